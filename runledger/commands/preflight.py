"""``runledger preflight SPEC``: check the path a spec will use before it runs.

The spec is read as ``submit`` reads it (``runledger.specload``: the dataset
alias resolved through the catalog, the canonical spec and its digest); the
shell (``runledger.rehearse.preflightio``) observes the live nodes, this client's
software, every checkpoint root, every dataset object and the topics; the
rules of ``runledger.rehearse.preflight`` make the rows and the verdict. The result is
recorded as a ``PreflightCompleted`` on ``runledger.requests``, keyed
``spec/<hex digest>`` (``events.base.spec_key``), signed with an operator's key
(``runledger.signer``). Exit 0 when every check passed or was skipped, 1 naming the
failed checks.

Tested in tests/runledger/commands/test_preflight.py and tests/runledger/rehearse/test_preflight.py.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from controller.spec.runspec import RunSpec, load_spec
from events.model import Header, PreflightCompleted, spec_key
from events.topics import KEYS, REPORTS, REQUESTS, RUNS, STATUS
from runledger import config
from runledger.config import AsJson, Bootstrap, Principal, catalog_option
from runledger.errors import RunledgerError
from runledger.nodelog import node_events
from runledger.rehearse import preflight, preflightio
from runledger.signer import ENV_KEY, request_signer, send_request
from runledger.specload import DatasetPin

# What an operator's client reads or writes; COMMANDS is the controller's and agents'.
TOPICS = (REQUESTS, REPORTS, RUNS, KEYS, STATUS)

SpecPath = Annotated[Path, typer.Argument(metavar="SPEC.yaml", help="The run spec.")]
Catalog = Annotated[str | None, catalog_option(
    "Dataset catalog that resolves the spec's dataset (default $RUNLEDGER_DATASETS or"
    " $RUNLEDGER_HOME/datasets).")]
KeyOption = Annotated[Path | None, typer.Option(
    "--key", metavar="FILE", envvar=ENV_KEY, show_envvar=False,
    help=f"Sign the result with this key file (default ${ENV_KEY}).")]


class PreflightFailed(RunledgerError):
    """At least one check failed; the message names them (exit 1)."""


def register(app: typer.Typer) -> None:
    app.command("preflight")(run_preflight)


def run_preflight(spec_path: SpecPath, as_json: AsJson = False, bootstrap: Bootstrap = None,
                  catalog: Catalog = None, principal: Principal = None,
                  key: KeyOption = None) -> None:
    """Check the nodes, storage, data and topics a spec would use; record the result.

    Checks: live agents with the free slots the topology needs; each checkpoint
    root writable, with its write and read bandwidth and latency; every dataset
    object present with its size, a sample of digests verified; the topics.
    Software, clock skew and devices are reported as skipped with the reason.
    The result (PreflightCompleted, bound to the spec digest) goes to
    runledger.requests. Exit 0 when nothing failed, 1 naming what failed.
    """
    pin = DatasetPin(catalog)
    spec = load_spec(spec_path, resolve_dataset=pin)
    address = config.connect(bootstrap)
    signed = request_signer(address, key, principal, bootstrap)
    who = signed.principal
    limits = preflight.Thresholds()
    seen = _observe(spec, address, catalog, limits)
    rows = preflight.plan(preflight.need_of(spec), seen, limits)
    verdict = preflight.verdict(rows)
    digest = spec.digest()
    skey = spec_key(digest)
    event = PreflightCompleted(
        header=Header(f"{skey}/preflight/{uuid.uuid4().hex[:12]}", skey, 0, _now_ms(),
                      f"cli/{who}"),
        spec_digest=digest, principal=who, verdict=verdict, checks=tuple(rows))
    send_request(address, event, signed.key)
    if as_json:
        typer.echo(json.dumps({"spec_digest": digest, "verdict": verdict,
                               "event_id": event.header.event_id, "principal": who,
                               "checks": [asdict(r) for r in rows]}, indent=2))
    else:
        for line in preflight.lines(rows):
            typer.echo(line)
        typer.echo(f"preflight {verdict} for {digest} ({event.header.event_id})")
    if verdict == preflight.FAIL:
        raise PreflightFailed(f"preflight of {spec_path} failed: "
                              f"{'; '.join(preflight.failing(rows))}")


def _observe(spec: RunSpec, address: str, catalog: str | None,
             limits: preflight.Thresholds) -> preflight.Seen:
    """Everything the rules judge, observed now."""
    nodes = preflightio.nodes_seen(node_events(address), _now_ms())
    storage = tuple(preflightio.probe_storage(root, limits.probe_bytes)
                    for root in preflightio.checkpoint_roots(spec))
    data = preflightio.probe_data(config.catalog(catalog), spec.dataset, limits.digest_sample)
    return preflight.Seen(
        nodes=nodes, python=preflightio.python_version(), torch=preflightio.torch_version(),
        storage=storage, data=data, missing_topics=preflightio.missing_topics(address, TOPICS),
        topics=len(TOPICS), cuda_devices=preflightio.cuda_devices())


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


__all__ = ["PreflightFailed", "register", "run_preflight"]
