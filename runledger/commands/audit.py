"""``runledger audit verify|export``: check the signed log, from a broker or from a copy.

``verify`` reads ``runledger.keys`` and ``runledger.runs`` (bounded,
``read_committed``, raw bytes and headers: :mod:`runledger.rawlog`), or a copy
``export`` wrote (``--from DIR``: :mod:`runledger.logcopy`, no broker), and
judges them with ``events.signed.audit.verify``: the key ring and its trust anchor,
and each run's hash chain of signed facts. It prints one verdict per run
(:mod:`runledger.views.auditview`) and exits 1 when anything fails. ``--trust``
pins the anchor's key id, ``--heads`` takes the run heads of an earlier
``--json`` report so a run whose last facts were removed is noticed.
``--keys-topic`` and ``--runs-topic`` read a mirror of the log kept under other
topic names.

``export`` signs the heads of what it copied (every run's and the keys log's:
``events.signed.loghead``) with the exporter's key: ``--key``, ``RUNLEDGER_KEY``, or
the remembered local stack's ``keys/operator.key``; a key that is no live key
of the keys log it exports is refused before anything is written.
``verify --from`` checks those heads against the copy, so a copy whose chain
(a run's or the keys log's) was cut at its end fails with no outside state.

Tested in tests/runledger/commands/test_audit.py.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from events.signed import audit, loghead
from events.signed.audit import AuditReport, LoggedRecord
from events.signed.signing import SigningKey, is_key_id
from events.topics import KEYS, RUNS
from runledger import config, current, logcopy
from runledger.config import AsJson, Bootstrap
from runledger.errors import RunledgerError, UsageError
from runledger.rawlog import read_raw
from runledger.signer import ENV_KEY, load_key
from runledger.views import auditview

RunOption = Annotated[str | None, typer.Argument(
    metavar="RUN", help="Only this run's verdict (every run's chain is checked all the same).")]
Trust = Annotated[str | None, typer.Option(
    "--trust", metavar="KEY_ID", help="The trust anchor's key id this log must have.")]
FromDir = Annotated[Path | None, typer.Option(
    "--from", metavar="DIR", help="Verify a copy `runledger audit export` wrote; no broker.")]
Heads = Annotated[Path | None, typer.Option(
    "--heads", metavar="FILE",
    help="An earlier `audit verify --json` report: a run that no longer reaches its head "
         "there is reported truncated.")]
KeysTopic = Annotated[str, typer.Option("--keys-topic", help="The keys topic to read.")]
RunsTopic = Annotated[str, typer.Option("--runs-topic", help="The runs topic to read.")]
Target = Annotated[Path, typer.Argument(metavar="DIR", help="A new (or empty) directory.")]
ExportKey = Annotated[Path | None, typer.Option(
    "--key", metavar="FILE", envvar=ENV_KEY, show_envvar=False,
    help=f"Sign the copy's heads with this key file (default ${ENV_KEY}, else the local "
         "stack's keys/operator.key); a live key of the keys log.")]


def register(app: typer.Typer) -> None:
    audit_app = typer.Typer(help="Verify the signed log: the key ring and each run's chain.",
                            no_args_is_help=True)
    audit_app.command("verify")(verify)
    audit_app.command("export")(export)
    app.add_typer(audit_app, name="audit")


def verify(run: RunOption = None, as_json: AsJson = False, trust: Trust = None,
           source: FromDir = None, heads: Heads = None, keys_topic: KeysTopic = KEYS,
           runs_topic: RunsTopic = RUNS, bootstrap: Bootstrap = None) -> None:
    """Verify the keys log and every run's signed hash chain; one verdict line per run.

    Exit 1 when anything fails: each problem names its record (topic, partition and
    offset) and why.
    """
    if trust is not None and not is_key_id(trust):
        raise UsageError(f"--trust {trust!r:.40} is not a key id (16 lowercase hex "
                         "characters, as `runledger key list` prints)")
    known = _heads(heads)
    if source is not None:
        copy = logcopy.load(source)
        keys, runs, where = copy.keys, copy.runs, str(source)
        report = _copy_report(copy, source, trust, known)
    else:
        keys, runs = _read(bootstrap, keys_topic, runs_topic)
        where = f"{keys_topic} and {runs_topic}"
        report = audit.verify(keys, runs, trust=trust, heads=known)
    chosen = auditview.selected(report, run)
    if as_json:
        typer.echo(json.dumps(auditview.document(report, chosen, len(keys), where), indent=2))
    else:
        for line in auditview.lines(report, chosen, len(keys)):
            typer.echo(line)
    if not auditview.passed(report, chosen):
        raise auditview.failure(report, chosen)
    typer.echo(f"verified {len(chosen)} run(s) of {where}", err=True)


def _copy_report(copy: logcopy.Copy, source: Path, trust: str | None,
                 known: dict[str, str] | None) -> AuditReport:
    """The audit of a copy, its signed heads included: a cut end is a problem."""
    try:
        signed = loghead.parse(copy.heads)
    except loghead.HeadsError as exc:
        raise logcopy.CopyError(f"{source / logcopy.HEADS_FILE}: {exc}; `runledger audit "
                                "export` writes it") from None
    report = audit.verify(copy.keys, copy.runs, trust=trust,
                          heads={**loghead.run_heads(signed), **(known or {})})
    return replace(report, keys=report.keys + tuple(loghead.check(signed, report.ring)))


def export(target: Target, keys_topic: KeysTopic = KEYS, runs_topic: RunsTopic = RUNS,
           key: ExportKey = None, as_json: AsJson = False, bootstrap: Bootstrap = None) -> None:
    """Copy the raw records of the keys and runs topics into DIR, for `audit verify --from`,
    with every chain's head signed by your key."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{target} exists and is not an empty directory; export into a new one")
    address = config.bootstrap(bootstrap)
    signer = _export_key(key)
    keys, runs = _read(bootstrap, keys_topic, runs_topic)
    report = audit.verify(keys, runs)
    entry = report.ring.get(signer.key_id)
    if entry is None or not entry.live_at(None):
        raise RunledgerError(f"key {signer.key_id} is no live key of {keys_topic}: a copy's "
                             "heads must be signed by a key its own keys log holds; sign with a "
                             "registered key (`runledger key list`), --key or $" + ENV_KEY)
    manifest = {"bootstrap": address, "topics": {"keys": keys_topic, "runs": runs_topic},
                "exported_at_ms": time.time_ns() // 1_000_000}
    heads = loghead.sign(signer, loghead.heads_of(report, len(keys)))
    counts = logcopy.write(target, keys, runs, manifest, heads)
    if as_json:
        typer.echo(json.dumps({"directory": str(target), "key_records": counts[0],
                               "facts": counts[1], "heads_signed_by": signer.key_id}))
        return
    typer.echo(f"exported {counts[0]} key records and {counts[1]} facts to {target}, their "
               f"heads signed by {signer.key_id}")


def _export_key(path: Path | None) -> SigningKey:
    """--key (or $RUNLEDGER_KEY), else the remembered local stack's operator key."""
    if path is not None:
        return load_key(path, f"--key (or ${ENV_KEY})")
    stack = current.recall(config.home()) if not config.external_bootstrap() else None
    found = stack.data_dir / "keys" / "operator.key" if stack is not None else None
    if found is None or not found.is_file():
        raise UsageError("audit export signs the heads of what it copies: name your key with "
                         f"--key FILE or ${ENV_KEY} (no local stack's keys/operator.key "
                         "was found)")
    return load_key(found, "the stack's operator key")


def _read(bootstrap: str | None, keys_topic: str,
          runs_topic: str) -> tuple[list[LoggedRecord], list[LoggedRecord]]:
    if keys_topic == runs_topic:
        raise UsageError(f"--keys-topic and --runs-topic both name {keys_topic}; they are two "
                         "topics")
    address = config.connect(bootstrap)
    found = read_raw(address, [keys_topic, runs_topic], patience_s=config.retry_s())
    return found[keys_topic], found[runs_topic]


def _heads(path: Path | None) -> dict[str, str] | None:
    if path is None:
        return None
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"--heads {path}: cannot read it ({exc.strerror})") from None
    return auditview.heads_from(text, str(path))
