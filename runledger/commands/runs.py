"""``runledger submit|status|cancel|resume|runs``: operator requests, and a run's state.

Thin: specs are validated by :mod:`controller.spec.runspec`, state comes from the pure
fold in :mod:`events.fold`. Requests go to ``runledger.requests`` and the
controller decides on them; ``status`` believes only ``runledger.runs`` (the
authoritative facts), except that a run the controller has not copied there
yet is shown as submitted but unseen. Clocks and ids are read here, at the
edge: the submission id, ``occurred_at``, and "now" for heartbeat ages.
``submit``, ``cancel`` and ``resume`` always sign the request with an operator's key
(``--key``, ``RUNLEDGER_KEY`` or the local stack's ``operator.key``;
:func:`runledger.signer.request_signer`), and the principal is the key's.

``status`` and ``runs`` read the runs' summaries on ``runledger.status``
(``events.kafka.statuslog``: one record per run, written by the controller in the
transaction of the facts), and fold the log only where there is no summary or
with ``--refold``; ``cancel`` and ``submit`` read the topics they need from the
beginning.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from controller.errors import ControllerError
from events.errors import BrokerUnavailable, KafkaOperationError
from events.kafka.statuslog import read_status
from events.model import CancelRequested, Event, Header, ResumeRequested, RunSubmitted
from events.status import RunStatusChanged
from events.topics import REPORTS, REQUESTS, RUNS, STATUS
from runledger import config
from runledger.config import ENV_KEY, AsJson, Bootstrap, Principal, RunArg, catalog_option
from runledger.errors import RunledgerError
from runledger.interrupt import follow_ctrl_c
from runledger.views import statusview
from runledger.views.runview import UNSEEN, list_rows, status_document, status_lines

if TYPE_CHECKING:
    from events.record import Quarantined

# status and runs read summaries: the log's readers, its report door and the request
# signer (cryptography) are imported where a command needs them, not at start.

WATCH_S = 1.0  # how often `status --watch` reads the run's summary
Refold = Annotated[bool, typer.Option(
    "--refold", help="Fold runledger.runs instead of reading the summary on runledger.status "
                     "(slow on a long log; adds heartbeat ages and undecided cancels).")]
Watch = Annotated[bool, typer.Option(
    "--watch", help="Print a line whenever the run changes, until it ends.")]
States = Annotated[list[str] | None, typer.Option(
    "--state", metavar="STATE", help="Only runs in this state (repeatable; any case).")]
Since = Annotated[str | None, typer.Option(
    "--since", metavar="DURATION|TIME",
    help="Only runs submitted since: 90s, 15m, 2h, 7d, 1w back, or an ISO 8601 time (UTC).")]
Limit = Annotated[int | None, typer.Option(
    "--limit", metavar="N", help="Only the newest N of the runs selected.")]
SpecPath = Annotated[Path, typer.Argument(metavar="SPEC.yaml", help="The run spec.")]
SubmitCatalog = Annotated[
    str | None,
    catalog_option("Dataset catalog that resolves an alias in `dataset` (default"
                   " $RUNLEDGER_DATASETS or $RUNLEDGER_HOME/datasets)."),
]
Reason = Annotated[str, typer.Option("--reason", help="Why; recorded with the request.")]
DryRun = Annotated[bool, typer.Option(
    "--dry-run", help="Validate the spec (dataset resolution included) and print the canonical"
                      " spec and its digest; write nothing, need no broker.")]
KeyOption = Annotated[Path | None, typer.Option(
    "--key", metavar="FILE", envvar=ENV_KEY, show_envvar=False,
    help=f"Sign the request with this key file (default ${ENV_KEY}, else the local stack's "
         "keys/operator.key); the principal is the one it is registered to on runledger.keys.")]


RemoteCode = Annotated[bool, typer.Option(
    "--remote-code", help="Do not check code.workdir and the command on this machine: the"
                          " code exists only on the nodes (their agents check it).")]


def register(app: typer.Typer) -> None:
    app.command()(submit)
    app.command()(status)
    app.command()(cancel)
    app.command()(resume)
    app.command()(runs)


def submit(
    spec_path: SpecPath,
    principal: Principal = None,
    as_json: AsJson = False,
    bootstrap: Bootstrap = None,
    catalog: SubmitCatalog = None,
    key: KeyOption = None,
    dry_run: DryRun = False,
    remote_code: RemoteCode = False,
) -> None:
    """Validate a run spec and request the run; print its run id.

    A dataset alias (e.g. corpus/latest) is resolved through the catalog first,
    so the run records the manifest id. An invalid spec is refused with every
    bad field named, and nothing is written. So is one whose code.workdir,
    program or script does not exist here (unless --remote-code). The request
    is signed (--key, $RUNLEDGER_KEY, else the local stack's operator key).
    """
    # Specs, their checks and the catalog (pydantic, the controller's rules): loaded
    # by the commands that read a spec, never by status or runs.
    from controller.spec.runspec import load_spec, run_id_for
    from runledger.specload import DatasetPin, check_code

    pin = DatasetPin(catalog)
    spec = load_spec(spec_path, resolve_dataset=pin)
    if not remote_code:
        check_code(spec, spec_path)
    if pin.alias is not None:
        typer.echo(f"resolved {pin.alias} -> {spec.dataset}", err=True)
    if dry_run:
        # What the controller would record: the canonical spec and the digest
        # the run's facts carry. No run id: that needs a submission id and a principal.
        doc = {"spec_digest": spec.digest(), "spec": json.loads(spec.canonical_json())}
        typer.echo(json.dumps(doc) if as_json else json.dumps(doc, indent=2, sort_keys=True))
        return
    from runledger.signer import request_signer, send_request

    address = config.connect(bootstrap)
    signed = request_signer(address, key, principal, bootstrap)
    who = signed.principal
    # The submission id makes two submissions of one spec two runs; it is made
    # here, never in the pure code, so run_id_for stays deterministic.
    run_id = run_id_for(spec, who, uuid.uuid4().hex)
    digest = spec.digest()
    event = RunSubmitted(
        header=_header(f"{run_id}/submitted", run_id, 0, who),
        spec_digest=digest,
        spec_json=spec.canonical_json(),
        principal=who,
        world_size=spec.world_size,
        dataset_id=spec.dataset,
    )
    send_request(address, event, signed.key)
    if as_json:
        typer.echo(json.dumps({"run_id": run_id, "spec_digest": digest, "principal": who,
                               "key_id": signed.key.key_id}))
    else:
        typer.echo(run_id)


def status(run: RunArg, as_json: AsJson = False, bootstrap: Bootstrap = None,
           refold: Refold = False, watch: Watch = False) -> None:
    """A run's state: generation, members, progress, checkpoint, failures.

    Read from the run's summary on runledger.status (one record); where there is
    none (a cluster without the topic, a run the controller has not summarized)
    the log is folded instead, and the command says so. --refold always folds
    it, and adds heartbeat ages and undecided cancel requests. --watch prints a
    line whenever the run changes, until it ends.
    """
    address = config.connect(bootstrap)
    if watch:
        follow_ctrl_c()
        _watch(address, run, refold)
        return
    doc = _status_doc(address, run, refold)
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        for line in status_lines(doc):
            typer.echo(line)


def _status_doc(address: str, run: str, refold: bool, quiet: bool = False) -> dict[str, Any]:
    """The run's document from its summary, or from the folded log; unknown: refused."""
    if not refold:
        found = _summaries(address, run, quiet)
        if found is not None and run in found:
            return statusview.document(found[run])
    view = _load(address, run, with_reports=True)
    doc = status_document(run, view.requests, view.facts, view.reports, _now_ms())
    if doc is None:
        raise _unknown(run)
    doc["source"] = statusview.REFOLD
    return doc


def _summaries(address: str, run: str | None, quiet: bool) -> dict[str, RunStatusChanged] | None:
    """The newest summaries (of ``run``, or all); None, said once, where the topic is absent."""
    def undecodable(key: str, exc: Exception) -> None:
        typer.echo(f"runledger: warning: the summary of {key} on {STATUS}: {exc}", err=True)

    # A broker that has just come back may not lead the topic's partitions yet:
    # waited for as long as any read is (RUNLEDGER_RETRY_S).
    deadline = time.monotonic() + config.retry_s()
    while True:
        try:
            return read_status(address, run_id=run, on_undecodable=undecodable)
        except BrokerUnavailable:
            if time.monotonic() + config.RETRY_PAUSE_S >= deadline:
                raise
            time.sleep(config.RETRY_PAUSE_S)
        except KafkaOperationError as exc:
            if "does not exist" not in str(exc):
                raise
            break
    if not quiet:
        typer.echo(f"runledger: note: {STATUS} does not exist (a cluster set up by an older "
                   f"runledger); folding {RUNS} instead, which takes longer", err=True)
    return None


def _watch(address: str, run: str, refold: bool) -> None:
    seen: tuple[Any, ...] | None = None
    while True:
        doc = _status_doc(address, run, refold, quiet=seen is not None)
        key = statusview.watch_key(doc)
        if key != seen:
            typer.echo(statusview.change_line(doc, _now_ms()))
            seen = key
        if doc["terminal"]:
            return
        time.sleep(WATCH_S)


def cancel(
    run: RunArg,
    reason: Reason,
    principal: Principal = None,
    as_json: AsJson = False,
    bootstrap: Bootstrap = None,
    key: KeyOption = None,
) -> None:
    """Ask the controller to cancel a run.

    The controller checks the principal against the run's cancel authority (the
    spec's list plus the submitter) and records RunCancelled or a WriteRejected.
    The request is signed (--key, $RUNLEDGER_KEY, else the local stack's operator key).
    """
    _ask("cancel", run, reason, principal, as_json, bootstrap, key)


def resume(
    run: RunArg,
    reason: Reason,
    principal: Principal = None,
    as_json: AsJson = False,
    bootstrap: Bootstrap = None,
    key: KeyOption = None,
) -> None:
    """Ask the controller to resume a run that an alert's pause action paused.

    Judged like a cancel (the spec's cancel authority plus the submitter); the
    controller records RunResumed, and the run is admitted again from its last
    committed checkpoint, or a WriteRejected (run_not_paused, unauthorized).
    The request is signed (--key, $RUNLEDGER_KEY, else the local stack's operator key).
    """
    _ask("resume", run, reason, principal, as_json, bootstrap, key)


def _ask(verb: str, run: str, reason: str, principal: str | None, as_json: bool,
         bootstrap: str | None, key: Path | None) -> None:
    """One operator request about a run (``cancel``, ``resume``), signed when keyed."""
    if not reason.strip():
        raise RunledgerError("--reason must say why")
    from runledger.signer import request_signer, send_request

    address = config.connect(bootstrap)
    signed = request_signer(address, key, principal, bootstrap)
    who = signed.principal
    view = _load(address, run, with_reports=False)
    doc = status_document(run, view.requests, view.facts, (), _now_ms())
    if doc is None:
        raise _unknown(run)
    if doc["terminal"]:
        raise RunledgerError(f"run {run} is already {doc['state']}; nothing to {verb}")
    if verb == "resume" and not str(doc["queue_reason"]).startswith("paused by alert"):
        typer.echo(f"runledger: note: {run} is {doc['state']} and not paused; the controller "
                   "will refuse the request and record the refusal", err=True)
    if not _may_cancel(view.requests + view.facts, who):
        typer.echo(f"runledger: note: {who!r} is not in the cancel authority of {run}; the"
                   " controller will refuse the request and record the refusal", err=True)
    event_id = f"{run}/{verb}/{uuid.uuid4().hex[:12]}"
    kind = CancelRequested if verb == "cancel" else ResumeRequested
    event = kind(header=_header(event_id, run, int(doc["generation"]), who),
                 principal=who, reason=reason)
    send_request(address, event, signed.key)
    if as_json:
        typer.echo(json.dumps({"run_id": run, "event_id": event_id, "principal": who,
                               "key_id": signed.key.key_id}))
    else:
        typer.echo(f"{verb} of {run} requested by {who} ({event_id}); the controller decides")


def runs(as_json: AsJson = False, bootstrap: Bootstrap = None, state: States = None,
         since: Since = None, limit: Limit = None, refold: Refold = False) -> None:
    """Runs: id, name, principal, state, generation, submitted at; oldest first.

    Read from runledger.status (every run's summary); where it is absent or empty
    the log is folded (and the command says so), as --refold always does; only
    then are submissions the controller has not seen yet listed (marked *).
    """
    wanted = statusview.states(state or [])
    since_at = statusview.since_ms(since, _now_ms()) if since is not None else None
    address = config.connect(bootstrap)
    found = None if refold else _summaries(address, None, quiet=False)
    if found:
        rows = statusview.rows(found.values())
    else:
        if found is not None:
            typer.echo(f"runledger: note: {STATUS} is empty (no controller of this version has "
                       f"summarized a run yet); folding {RUNS} instead", err=True)
        view = _load(address, None, with_reports=False)
        rows = list_rows(view.requests, view.facts)
    rows = statusview.select(rows, wanted, since_at, limit)
    if as_json:
        typer.echo(json.dumps({"runs": rows}, indent=2))
        return
    typer.echo(f"{'run':<40} {'name':<24} {'principal':<14} {'state':<20} {'gen':>4}  submitted")
    for r in rows:
        mark = "*" if not r["seen_by_controller"] else ""
        typer.echo(f"{r['run_id']:<40} {r['name']:<24} {r['principal']:<14} "
                   f"{r['state'] + mark:<20} {r['generation']:>4}  {r['submitted_at_iso']}")
    if any(not r["seen_by_controller"] for r in rows):
        typer.echo(f"* {UNSEEN}")


# --- the edge: clock, identity, broker ---------------------------------------


@dataclass(frozen=True, slots=True)
class _View:
    requests: list[Event]
    facts: list[Event]
    reports: list[Event]


def _load(bootstrap: str, run: str | None, *, with_reports: bool) -> _View:
    """The run's events (all runs' when ``run`` is None) from each topic, in offset order."""
    from events.kafka.consume import read_log
    from events.kafka.reportdoor import view_door

    skipped: list[Quarantined] = []

    def read(topic: str) -> list[Event]:
        def keep(q: Quarantined) -> None:
            if run is None or q.key == run:
                skipped.append(q)

        records = read_log(bootstrap, topic, on_quarantine=keep, retry_s=config.retry_s(),
                           raw=topic == REPORTS)
        mine = (r for r in records if run is None or r.event.run_id == run)
        if topic != REPORTS:
            return [r.event for r in mine]
        # A report the controller's door refuses (a forged one) is shown by no view either.
        door = view_door(bootstrap, "runledger-status", config.retry_s())
        return [r.event for r in mine if door.judge(r) is None]

    view = _View(read(REQUESTS), read(RUNS), read(REPORTS) if with_reports else [])
    # Nothing vanishes silently: say what could not be decoded (events dump shows it).
    if run is not None:
        for q in skipped:
            typer.echo(f"runledger: warning: {q}", err=True)
    elif skipped:
        typer.echo(f"runledger: warning: {len(skipped)} undecodable records skipped"
                   " (see `runledger events dump`)", err=True)
    return view


def _may_cancel(events: Iterable[Event], principal: str) -> bool:
    from controller.spec.runspec import parse_spec_json

    for event in events:
        if isinstance(event, RunSubmitted):
            try:
                return parse_spec_json(event.spec_json).may_cancel(principal, event.principal)
            except ControllerError:
                return True  # a spec this version cannot read: leave it to the controller
    return True


def _header(event_id: str, run_id: str, generation: int, principal: str) -> Header:
    return Header(event_id=event_id, run_id=run_id, generation=generation,
                  occurred_at=_now_ms(), producer=f"cli/{principal}")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _unknown(run: str) -> RunledgerError:
    return RunledgerError(f"unknown run {run!r}: not on {REQUESTS} or {RUNS}")


__all__ = ["cancel", "register", "resume", "runs", "status", "submit"]
