"""``runledger pilot SPEC``: the spec small and short on the live stack, measured.

The spec is read as ``submit`` reads it (the dataset alias resolved through
the catalog); :mod:`runledger.rehearse.trialplan` derives the pilot spec (``<name>-pilot``,
``--steps`` steps at ``--replicas`` replicas, a checkpoint every third of the
steps, and ``RUNLEDGER_FAULT`` killing every rank right after generation 1's
first commit, so generation 2 must restore it). Before anything is submitted
the path is checked as ``preflight`` checks it (free slots for the pilot,
each checkpoint root writable, every dataset object there): a failure there
refuses the pilot at once, naming the root or the object. Otherwise the pilot
run is submitted and watched (:mod:`runledger.rehearse.trial`) until it ends (it is
cancelled after ``--timeout``), and :mod:`runledger.rehearse.pilot` turns its events into
figures and rows. The result is recorded as a ``PilotCompleted`` keyed by the
ORIGINAL spec's digest (``spec/<hex>``), signed with an operator's key
(``runledger.signer``). Exit 0 when every check passed, 1 naming the failed checks.

Tested in tests/runledger/commands/test_pilot.py.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from controller.spec.runspec import RunSpec, load_spec
from events.model import Event, Header, PilotCompleted, PreflightCheck, spec_key
from events.signed.signing import SigningKey
from runledger import config
from runledger.config import AsJson, Bootstrap, Principal, catalog_option
from runledger.errors import RunledgerError
from runledger.nodelog import node_events
from runledger.rehearse import pilot, preflight, preflightio, trial, trialplan
from runledger.signer import ENV_KEY, request_signer, send_request
from runledger.specload import DatasetPin, check_code

SpecPath = Annotated[Path, typer.Argument(metavar="SPEC.yaml", help="The run spec.")]
Steps = Annotated[int, typer.Option(
    "--steps", min=2, help="Optimizer steps of the pilot (model.steps; never more than the"
                           " spec's own).")]
Replicas = Annotated[int | None, typer.Option(
    "--replicas", min=1, help="Replicas of the pilot (default: an elastic spec's min, else"
                              " the spec's replicas up to 2).")]
Timeout = Annotated[float, typer.Option(
    "--timeout", min=1.0, help="Seconds to wait for the pilot run to end; then it is"
                               " cancelled and the pilot fails.")]
Catalog = Annotated[str | None, catalog_option(
    "Dataset catalog that resolves the spec's dataset (default $RUNLEDGER_DATASETS or"
    " $RUNLEDGER_HOME/datasets).")]
KeyOption = Annotated[Path | None, typer.Option(
    "--key", metavar="FILE", envvar=ENV_KEY, show_envvar=False,
    help=f"Sign the pilot's run request and its result with this key file (default ${ENV_KEY}).")]
MANIFEST_WAIT_S = 30.0  # the manifest is in the terminal fact's transaction: a formality


class PilotFailed(RunledgerError):
    """A check of the pilot failed; the message names them (exit 1)."""


def register(app: typer.Typer) -> None:
    app.command("pilot")(run_pilot)


def run_pilot(spec_path: SpecPath, steps: Steps = 12, replicas: Replicas = None,
              timeout: Timeout = 900.0, as_json: AsJson = False, bootstrap: Bootstrap = None,
              catalog: Catalog = None, principal: Principal = None,
              key: KeyOption = None) -> None:
    """Run the spec small and short on the live stack; record step time, checkpoint cost
    and restore time.

    The pilot run is the spec with --steps steps at --replicas replicas, a
    checkpoint every third of the steps, and a crash right after the first
    commit, so the run must restore that checkpoint and publish its post-run
    manifest. Free slots, the checkpoint roots and the dataset objects are
    checked first. The result (PilotCompleted, bound to the spec's digest) goes
    to runledger.requests. Exit 0 when every check passed, 1 naming what failed.
    """
    pin = DatasetPin(catalog)
    spec = load_spec(spec_path, resolve_dataset=pin)
    check_code(spec, spec_path)
    length = min(steps, trialplan.spec_steps(spec))
    plan = trialplan.Trial(
        "pilot", length, replicas or trialplan.default_replicas(spec),
        env={trialplan.FAULT_ENV: trialplan.first_commit_fault(length)})
    derived = trialplan.derive(spec, plan)
    address = config.connect(bootstrap)
    signed = request_signer(address, key, principal, bootstrap)
    who = signed.principal
    signing = signed.key
    rows = _prechecks(derived, address, catalog)
    run_id = ""
    events: list[Event] = []
    if preflight.verdict(rows) == preflight.PASS:
        run_id = trial.submit(address, derived, who, signing)
        typer.echo(f"pilot run {run_id} submitted; follow it with `runledger status {run_id}`"
                   f" and `runledger logs {run_id}`", err=as_json)
        events, waited = _watch(address, run_id, derived, who, signing, timeout)
        rows = [*rows, *pilot.rows(run_id, events, spec.rto_s, waited)]
    _record(spec, plan, run_id, events, rows, who, address, signing, as_json)
    if preflight.verdict(rows) == preflight.FAIL:
        look = f"; look at pilot run {run_id}" if run_id else "; nothing was submitted"
        raise PilotFailed(f"pilot of {spec_path} failed: "
                          f"{'; '.join(preflight.failing(rows))}{look}")


def _prechecks(spec: RunSpec, address: str, catalog: str | None) -> list[PreflightCheck]:
    """Preflight's agents, storage and data rules on the pilot spec: what would make its run
    queue for ever or fail, refused before it is submitted. A reachable root's bandwidth
    is not judged here: the pilot's own checkpoints measure it."""
    limits = preflight.Thresholds()
    nodes = preflightio.nodes_seen(node_events(address), trial.now_ms())
    rows = preflight.agents_rows(preflight.need_of(spec), nodes)
    for root in preflightio.checkpoint_roots(spec):
        seen = preflightio.probe_storage(root, limits.probe_bytes)
        if seen.error is not None:
            rows += preflight.storage_rows(seen, limits)
    data = preflightio.probe_data(config.catalog(catalog), spec.dataset, limits.digest_sample)
    return [*rows, *preflight.data_rows(data)]


def _watch(address: str, run_id: str, spec: RunSpec, who: str, key: SigningKey | None,
           timeout_s: float) -> tuple[list[Event], str | None]:
    """The run's events once it ended (and its manifest came), or when ``timeout_s``
    passed (then it is cancelled); what was waited for in vain, if anything."""
    waited = None
    with trial.RunWatch(address, run_id) as watch:
        try:
            watch.wait(trial.ended, timeout_s, "end of the run (RunFinished or RunCancelled)")
            watch.wait(lambda ev: bool(trial.of_type(ev, "RunManifestPublished")),
                       MANIFEST_WAIT_S, "RunManifestPublished")
        except trial.TrialTimeout as exc:
            waited = str(exc)
            if not trial.ended(watch.events):
                trial.cancel(address, run_id, trial.generation(watch.events), who, key,
                             f"runledger pilot of {spec.name}: no end after {timeout_s:g} s")
        except KeyboardInterrupt:
            # A pilot left running would hold its slots for nothing: stop it, then stop.
            trial.cancel(address, run_id, trial.generation(watch.events), who, key,
                         f"runledger pilot of {spec.name} interrupted")
            raise
    # Reports travel on their own topic: read both to their ends, now that the run is over.
    return trial.read_run(address, run_id), waited


def _record(spec: RunSpec, plan: trialplan.Trial, run_id: str, events: list[Event],
            rows: list[PreflightCheck], who: str, address: str, key: SigningKey | None,
            as_json: bool) -> None:
    f = pilot.figures(events)
    verdict = preflight.verdict(rows)
    digest = spec.digest()
    skey = spec_key(digest)
    event = PilotCompleted(
        header=Header(f"{skey}/pilot/{uuid.uuid4().hex[:12]}", skey, 0, trial.now_ms(),
                      f"cli/{who}"),
        spec_digest=digest, principal=who, verdict=verdict, pilot_run_id=run_id,
        steps=plan.steps, replicas=plan.replicas, step_time_ms=f.step_time_ms,
        checkpoint_ms=f.checkpoint_ms, restore_ms=f.restore_ms, checks=tuple(rows))
    send_request(address, event, key)
    if as_json:
        typer.echo(json.dumps({
            "spec_digest": digest, "verdict": verdict, "pilot_run_id": run_id,
            "event_id": event.header.event_id, "principal": who, "steps": plan.steps,
            "replicas": plan.replicas, "figures": asdict(f),
            "checks": [asdict(r) for r in rows]}, indent=2))
        return
    for line in preflight.lines(rows):
        typer.echo(line)
    typer.echo(f"step time {f.step_time_ms} ms (median), checkpoint cost {f.checkpoint_ms} ms"
               f" (median stall), restore {f.restore_ms} ms (verify + load),"
               f" recovery {f.recovery_s} s")
    typer.echo(f"pilot {verdict} for {digest} ({event.header.event_id})"
               + (f"; pilot run {run_id}: `runledger status {run_id}`,"
                  f" `runledger logs {run_id}`" if run_id else ""))


__all__ = ["PilotFailed", "register", "run_pilot"]
