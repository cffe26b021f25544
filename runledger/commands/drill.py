"""``runledger drill SPEC``: inject faults one by one into small runs of a spec, and judge.

The spec is read as ``submit`` reads it (``runledger.specload``); the faults
come from ``--faults`` (default: the whole catalog of ``runledger.rehearse.drillplan``)
and each is planned for the drill runs' topology: one the topology cannot show
is skipped with its reason. Each applicable fault runs, in turn, as its own
short run on the live stack (``runledger.rehearse.drillrun``) and is judged
(``runledger.rehearse.drilljudge``). Every fault, skipped ones too, is recorded as a
``DrillCompleted`` on ``runledger.requests`` keyed ``spec/<hex digest>`` of the
spec as given (not of the drill runs' specs), signed (``runledger.signer``). The
matrix is printed as a table, ``--json``, or written to ``--html FILE``. Exit 0
when no applicable fault failed, 1 naming those that did.

Tested in tests/e2e/test_drill.py and tests/runledger/rehearse/test_drill.py.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from controller.spec.runspec import RunSpec, load_spec
from events.model import DrillCompleted, Header, spec_key
from runledger import config
from runledger.config import AsJson, Bootstrap, Principal, catalog_option
from runledger.errors import RunledgerError, UsageError
from runledger.rehearse import drillplan, drillrun, drillview
from runledger.rehearse.drilljudge import SKIP, Judged
from runledger.rehearse.drillplan import Planned
from runledger.rehearse.trialplan import spec_steps
from runledger.signer import ENV_KEY, request_signer, send_request
from runledger.specload import DatasetPin

SpecPath = Annotated[Path, typer.Argument(metavar="SPEC.yaml", help="The run spec.")]
Faults = Annotated[str | None, typer.Option(
    "--faults", metavar="LIST",
    help=f"Comma-separated faults to inject (default: all): {', '.join(drillplan.NAMES)}.")]
Steps = Annotated[int, typer.Option(
    "--steps", min=1, help="Steps of each drill run (at most the spec's model.steps).")]
HtmlFile = Annotated[Path | None, typer.Option(
    "--html", metavar="FILE", help="Also write the report as one self-contained HTML file.")]
Timeout = Annotated[float, typer.Option(
    "--timeout", min=10.0, help="Seconds each drill run may take before it is cancelled and"
                                " its fault failed.")]
KeyOption = Annotated[Path | None, typer.Option(
    "--key", metavar="FILE", envvar=ENV_KEY, show_envvar=False,
    help=f"Sign the drill runs and the results with this key file (default ${ENV_KEY}).")]
Catalog = Annotated[str | None, catalog_option(
    "Dataset catalog that resolves the spec's dataset (default $RUNLEDGER_DATASETS or"
    " $RUNLEDGER_HOME/datasets).")]
# Tests only: the stale worker's own fence check off, the "broken build" its drill catches.
IGNORE_FENCE_ENV = "RUNLEDGER_DRILL_IGNORE_FENCE"


class DrillFailed(RunledgerError):
    """At least one applicable fault did not show its expected outcome (exit 1)."""


def register(app: typer.Typer) -> None:
    app.command("drill")(run_drill)


def run_drill(spec_path: SpecPath, faults: Faults = None,
              steps: Steps = drillplan.DEFAULT_STEPS, as_json: AsJson = False,
              html_file: HtmlFile = None, timeout: Timeout = 300.0,
              bootstrap: Bootstrap = None, catalog: Catalog = None,
              principal: Principal = None, key: KeyOption = None) -> None:
    """Inject each fault into its own small run of the spec and check what followed.

    Faults: kill_compute, kill_checkpoint, hang, straggler, storage_timeout,
    truncated_shard, stale_worker, missing_object, topology_change. Each expects
    its outcome (a restart from the newest verified checkpoint, fencing, bounded
    retries, data cursor continuity, no node blamed for a data fault, ...) and
    a clean end (workers gone, committed checkpoints kept, no stray shards);
    RPO and RTO are measured against the spec's rpo_s and rto_s. One
    DrillCompleted per fault goes to runledger.requests. Exit 0 when no
    applicable fault failed.
    """
    names = drillplan.chosen(faults)
    pin = DatasetPin(catalog)
    spec = load_spec(spec_path, resolve_dataset=pin)
    address = config.connect(bootstrap)
    signed = request_signer(address, key, principal, bootstrap)
    who = signed.principal
    ctx = drillrun.Context(address, spec, who, signed.key,
                           config.catalog(catalog), min(steps, spec_steps(spec)), timeout,
                           ignore_fence=os.environ.get(IGNORE_FENCE_ENV) == "1")
    shape = replace_rpo(drillplan.shape_of(drillrun.trial_of(ctx, None, "drill")), spec)
    entries = drillplan.plan(shape, names, ctx.steps)
    results = []
    for entry in entries:
        if not as_json:
            typer.echo(f"drill {entry.fault} ...", err=True)
        if isinstance(entry, Planned):
            run_id, judged = drillrun.run_fault(ctx, entry, shape)
        else:
            run_id, judged = "", Judged(SKIP, entry.reason, None, None, ())
        results.append(_record(ctx, entry.fault, run_id, judged))
    _show(spec.digest(), spec.name, results, as_json, html_file)
    failed = [r.fault for r in results if r.verdict == "fail"]
    if failed:
        raise DrillFailed(f"drill of {spec_path} failed: {', '.join(failed)}")


def replace_rpo(shape: drillplan.Shape, spec: RunSpec) -> drillplan.Shape:
    """The drill runs' shape, judged against the user's own spec's RPO, RTO and retries."""
    own = drillplan.shape_of(spec)
    return replace(shape, rpo_s=own.rpo_s, rto_s=own.rto_s, attempts=own.attempts)


def _record(ctx: drillrun.Context, fault: str, run_id: str, judged: Judged) -> DrillCompleted:
    digest = ctx.spec.digest()
    skey = spec_key(digest)
    event = DrillCompleted(
        header=Header(f"{skey}/drill/{fault}/{uuid.uuid4().hex[:12]}", skey, 0,
                      time.time_ns() // 1_000_000, f"cli/{ctx.who}"),
        spec_digest=digest, principal=ctx.who, fault=fault, verdict=judged.verdict,
        drill_run_id=run_id, rpo_s=judged.rpo_s, rto_s=judged.rto_s, reason=judged.reason,
        checks=judged.checks)
    send_request(ctx.address, event, ctx.key)
    return event


def _show(digest: str, name: str, results: list[DrillCompleted], as_json: bool,
          html_file: Path | None) -> None:
    if html_file is not None:
        try:
            html_file.write_text(drillview.page(digest, name, results))
        except OSError as exc:
            raise UsageError(f"--html {html_file}: cannot write it ({exc.strerror})") from None
    if as_json:
        typer.echo(json.dumps(drillview.document(digest, results), indent=2))
        return
    for line in drillview.lines(results):
        typer.echo(line)
    typer.echo(f"drill {drillview.verdict(results)} for {digest}")


__all__ = ["DrillFailed", "register", "run_drill"]
