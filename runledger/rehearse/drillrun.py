"""One fault of ``runledger drill`` on the live stack: derive, submit, inject, watch, judge.

The shell under the pure :mod:`runledger.rehearse.drillplan` (what to inject) and
:mod:`runledger.rehearse.drilljudge` (what it showed). For each planned fault it

1. derives the drill run's spec (``runledger.rehearse.trialplan``: short, small, the
   fault in its workers' environment, shorter heartbeat limits so a paused or
   hung worker is noticed within seconds); for ``missing_object`` the run
   reads an overlay of the dataset: a new manifest in the catalog whose first
   object of each source names a path that does not exist (the user's dataset
   and its files are never touched);
2. submits it (``runledger.rehearse.trial``) and, for ``stale_worker``, SIGSTOPs the
   coordinator (rank 0) right after its first commit and SIGCONTs it once the
   next generation started; a worker started with ``RUNLEDGER_FAULT_NO_SIGTERM``
   ignores its agent's SIGTERM, so it lives on until the agent's SIGKILL,
   ``--grace`` seconds after the stop (``runledger agent --grace``);
3. waits for the run to end (cancelling it on a timeout, which fails the
   drill with the reason), then for its workers to exit, and judges the
   terminal transition (``runledger.rehearse.terminalcheck`` on the run's facts,
   reports and the listing of its checkpoint directory, plus a row for worker
   processes still alive on this machine);
4. judges the fault (``runledger.rehearse.drilljudge``). The drill's own failures are
   never counted against a node: its spec sets a fault hook, so the controller
   marks them injected (``controller.policy.injected``) and a one-node stack is
   not quarantined by its own rehearsal.

Tested in tests/e2e/test_drill.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from controller.runplan import checkpoint_env
from controller.spec.parts import ElasticMembership
from controller.spec.runspec import RunSpec
from dataplane.catalog import Catalog
from dataplane.manifest import DatasetManifest
from events.model import Event, PreflightCheck
from events.signed.signing import SigningKey
from runledger.rehearse import drilljudge, drillplan, terminalcheck, trial, trialplan
from runledger.rehearse.drilljudge import FAIL, PASS, Judged
from runledger.rehearse.drillplan import HIDE_OBJECT, PAUSE, Planned
from runledger.rehearse.trialplan import Trial
from worker.faults import IGNORE_FENCE_ENV

HEARTBEAT_TIMEOUT_S = 6.0  # a paused worker is declared lost within seconds
STALL_TIMEOUT_S = 20.0  # and a hung one within these
EXIT_WAIT_S = 60.0  # for the workers' exits after the run's end
# Uncommitted checkpoint directories a fault may leave (the cut or revoked one).
RESIDUE = {"kill_checkpoint": 1, "truncated_shard": 1}


@dataclass(frozen=True, slots=True)
class Context:
    """What every fault of one drill shares."""

    address: str
    spec: RunSpec
    who: str
    key: SigningKey | None
    catalog: Catalog
    steps: int
    timeout_s: float
    ignore_fence: bool = False  # tests only: the stale worker's fence check off


def trial_of(ctx: Context, planned: Planned | None, label: str) -> RunSpec:
    """The drill run's spec for ``planned`` (None: the shape alone, with no fault)."""
    spec = ctx.spec
    m = spec.membership
    elastic = (m.min, m.max) if isinstance(m, ElasticMembership) else None
    replicas = elastic[1] if elastic else trialplan.default_replicas(spec)
    env = dict(planned.env) if planned is not None else {}
    if planned is not None and planned.fault == "stale_worker" and ctx.ignore_fence:
        env[IGNORE_FENCE_ENV] = "1"
    beat = spec.heartbeat
    timeout = min(beat.timeout_s, HEARTBEAT_TIMEOUT_S)
    doc = json.loads(spec.canonical_json())
    if planned is not None and planned.action == HIDE_OBJECT:
        doc["dataset"] = hidden_overlay(ctx.catalog, spec.dataset)
    return trialplan.derive_json(json.dumps(doc), Trial(
        label=label, steps=ctx.steps, replicas=replicas, elastic=elastic, env=env,
        timeout_s=timeout, stall_timeout_s=max(min(beat.stall_timeout_s, STALL_TIMEOUT_S),
                                               timeout + 1.0)))


def hidden_overlay(catalog: Catalog, dataset: str) -> str:
    """A new dataset id: the manifest with each source's first object renamed to a path
    that does not exist (nothing of the dataset is changed or moved)."""
    doc = catalog.get(dataset).model_dump(mode="json")
    for source in doc["sources"]:
        if source["objects"]:
            source["objects"][0]["path"] += ".drill-missing"
    doc["name"] += "-drill-missing"
    # Validated afresh (a model_copy would keep the original's cached dataset id).
    return catalog.put(DatasetManifest.model_validate(doc))


def run_fault(ctx: Context, planned: Planned, shape: drillplan.Shape) -> tuple[str, Judged]:
    """Inject ``planned`` into a fresh drill run; its run id and the judgement."""
    spec = trial_of(ctx, planned, "drill-" + planned.fault.replace("_", "-"))
    run_id = trial.submit(ctx.address, spec, ctx.who, ctx.key)
    with trial.RunWatch(ctx.address, run_id) as watch:
        try:
            if planned.action == PAUSE:
                _pause_until_replaced(watch, ctx.timeout_s)
            watch.wait(trial.ended, ctx.timeout_s, "end of the drill run")
        except trial.TrialTimeout as exc:
            trial.cancel(ctx.address, run_id, trial.generation(watch.events), ctx.who, ctx.key,
                         f"drill {planned.fault}: {exc}")
            _settle(watch, run_id, ctx.timeout_s)
            failed = PreflightCheck("completed", "drill run", FAIL, None, None, "", str(exc))
            return run_id, Judged(FAIL, f"completed: {exc}", None, None, (failed,))
        _settle(watch, run_id, EXIT_WAIT_S)  # a worker still running fails a terminal row
        rows = terminal_rows(watch.facts, watch.reports, _listing(spec, run_id), run_id,
                             RESIDUE.get(planned.fault, 0), trial.worker_pids(run_id))
        return run_id, drilljudge.judge(planned, shape, watch.facts, watch.reports, rows)


def _pause_until_replaced(watch: trial.RunWatch, timeout_s: float) -> None:
    """SIGSTOP rank 0 after generation 1's first commit; SIGCONT when generation 2 runs.
    A run that ends first is left to the judgement (nothing was paused)."""
    def committed(events: Sequence[Event]) -> bool:
        return trial.ended(events) or any(
            e.event_type == "ManifestCommitted" and e.generation == 1 for e in events)

    if trial.ended(watch.wait(committed, timeout_s, "first checkpoint of generation 1")):
        return
    deadline = time.monotonic() + 10.0  # /proc may lag the commit on a loaded machine
    while not (pids := trial.worker_pids(watch.run_id, 1, "r0")) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    if not pids:
        raise trial.TrialTimeout(f"run {watch.run_id}: no local worker r0 of generation 1 to"
                                 " pause; the stale-worker drill needs an agent on this machine")
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        watch.wait(lambda es: trial.ended(es) or any(
            e.event_type == "GenerationStarted" and e.generation > 1 for e in es),
            timeout_s, "a second generation")
    finally:
        for pid in pids:
            # Its agent may have killed it while paused: then nothing stale wakes.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _settle(watch: trial.RunWatch, run_id: str, wait_s: float) -> bool:
    """Read on until every worker of the run exited (by report and locally) or the wait
    ends; whether they did."""
    deadline = time.monotonic() + wait_s
    while True:
        watch.poll()
        rows = terminalcheck.judge_terminal(watch.facts, (), reports=watch.reports,
                                            run_id=run_id)
        stopped = all(r.verdict != FAIL for r in rows if r.check == "stopped")
        if (stopped and not trial.worker_pids(run_id)) or time.monotonic() >= deadline:
            return stopped
        time.sleep(0.5)


def _listing(spec: RunSpec, run_id: str) -> tuple[str, ...]:
    env = checkpoint_env(spec)
    roots = [t.root for t in env.tiers] or ([env.root] if env.root else [])
    if not roots:
        return ()
    root = roots[0]
    if "://" not in root and not os.path.isabs(root):
        root = os.path.join(spec.workdir or os.getcwd(), root)
    try:
        return terminalcheck.list_run(root, run_id)
    except OSError:
        return ()


def terminal_rows(facts: Sequence[Event], reports: Sequence[Event], listing: Sequence[str],
                  run_id: str, residue: int, alive: Sequence[int]) -> tuple[PreflightCheck, ...]:
    """The terminal transition's rows, named ``terminal.<rule>``, and the local processes."""
    rows = [r if r.check == "terminal" else replace(r, check=f"terminal.{r.check}")
            for r in terminalcheck.judge_terminal(facts, listing, reports=reports,
                                                  residue_bound=residue, run_id=run_id)]
    rows.append(PreflightCheck(
        "terminal.processes", "this machine", FAIL if alive else PASS, len(alive), 0,
        "processes", f"worker processes of {run_id} still alive here: {list(alive)}" if alive
        else f"no worker process of {run_id} remains on this machine"))
    return tuple(rows)
