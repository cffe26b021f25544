"""The controller's model: one update path, live and on replay; the live-run index."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.alerts import AlertConfig
from controller.checkpoints import AutoInterval
from controller.emitter import Out
from controller.model import Draft, Model, replay
from controller.reconcile import handle, tick
from controller.runplan import RunPlan
from controller.spec.parts import RetryPolicy
from events.model import (
    Event,
    RunSubmitted,
)
from events.state import Checkpoint
from events.topics import RUNS
from events.workerenv import CheckpointEnv
from tests.events.builders import Ev

RUN_IDS = ("run-a", "run-b", "run-c")
NODES = ("n1", "n2")


def plan(variant: int) -> RunPlan:
    """Plans that differ in size, retry policy, checkpointing and alert thresholds."""
    retry = {"worker_crash": RetryPolicy(attempts=4, backoff_base_s=1.0, backoff_cap_s=4.0,
                                         escalate_after=3),
             "hang": RetryPolicy(attempts=3, backoff_base_s=0.0, backoff_cap_s=0.0,
                                 escalate_after=2)}
    auto = AutoInterval(mtbf_prior_s=100.0, measured_cost_s=None, initial_interval_steps=5)
    return RunPlan(world_size=1 + variant % 3, argv=("train",), slots_per_node=2,
                   start_timeout_ms=20_000, cancel_authority=frozenset({"oncall"}), retry=retry,
                   checkpoint=CheckpointEnv(interval_steps=5) if variant % 2 else None,
                   auto_interval=auto if variant % 2 else None,
                   alerts=AlertConfig(progress_stall_ms=3_000, window_steps=4,
                                      checkpoint_lag_steps=4),
                   invalid="unreadable" if variant == 5 else "")


def plan_of(e: RunSubmitted) -> RunPlan:
    return plan(int(e.spec_json))


@dataclass
class Cluster:
    """Drives handle/tick like the controller process, agents heartbeating before each tick.

    ``ev`` builds the inputs of every run (``run_id=``), stamped with the clock ``now``."""

    model: Model = field(default_factory=lambda: Model(since=1_000_000))
    log: list[Out] = field(default_factory=list)
    up: set[str] = field(default_factory=lambda: set(NODES))
    ev: Ev = field(default_factory=lambda: Ev(RUN_IDS[0], start=1_000_000, tick=0, ids="in-{n}"))

    @property
    def now(self) -> int:
        return self.ev.now

    def send(self, event: Event) -> None:
        self.model, out = handle(self.model, event, self.now, plan_of)
        self.log += out

    def tick(self, advance_ms: int) -> None:
        self.ev.now += advance_ms
        for node in sorted(self.up):
            self.send(self.ev.agent_heartbeat(node, slots=3, domain="d1", busy_slots=0))
        self.model, out = tick(self.model, self.now, plan_of)
        self.log += out

    def facts(self) -> list[Event]:
        return [e for topic, e in self.log if topic == RUNS]

    def restart(self) -> None:
        self.model = replay(self.facts(), self.now, plan_of)


Op = tuple[int, int, int]
OPS = st.tuples(st.integers(0, 14), st.integers(0, 2), st.integers(0, 5))


def apply_op(c: Cluster, op: Op) -> None:
    kind, i, x = op
    run = RUN_IDS[i]
    s = c.model.runs.get(run)
    gen = s.generation if s is not None else 0
    lids = [m.logical_id for m in s.members] if s is not None and s.members else ["r0"]
    lid = lids[x % len(lids)]
    step = s.step if s is not None else 0
    ev = c.ev
    if kind == 0:
        c.send(ev.submitted(run_id=run, spec_digest="sha256:x", spec_json=str(x),
                            world_size=1 + x % 3, dataset_id=None))
    elif kind in (1, 2, 3):
        for lid_ in lids:
            c.send(ev.heartbeat(gen, lid_, step=step, node="n1", run_id=run))
    elif kind == 4:
        c.send(ev.step(gen, step + 1, tokens=1, loss_tokens=1, step_time_ms=100.0,
                       input_wait_ms=60.0 * (x % 2), loss=(1.0, math.nan, 2.0)[x % 3],
                       run_id=run))
    elif kind == 5:
        c.send(ev.step_times(gen, 1, lid, times=(100.0 * (1 + x),) * 4, node="n1",
                             input_wait_ms=(0.0,) * 4, run_id=run))
    elif kind == 6:
        code = (0, 0, 1, 13, None, 0)[x]
        c.send(ev.exited(gen, lid, exit_code=code, signal=9 if code is None else None,
                         node="n1", run_id=run))
    elif kind == 7:
        for lid_ in lids[:len(lids) - (x == 1)]:  # x == 1: one shard short
            c.send(ev.shard(gen, step, lid_, path="p", bytes=1, crc32c=0, run_id=run))
        c.send(ev.proposed(gen, step, manifest_path=f"m{step}", manifest_digest=f"d{step}",
                           dataset_id=None, run_id=run))
        c.send(ev.staged(gen, step, mode="sync", stall_ms=10.0 * (x + 1), bytes=1, backlog=0,
                         run_id=run))
    elif kind == 8:
        at = s.checkpoint.step if s is not None and s.checkpoint else 1
        c.send(ev.verify_failed(gen, Checkpoint(at, f"m{at}", f"d{at}", gen, 0), lid,
                                reason="manifest_digest", detail="x", run_id=run))
    elif kind == 9:
        c.send(ev.cancel_requested(gen, principal=("oncall", "mallory")[x % 2], reason="stop",
                                   run_id=run))
    elif kind in (10, 11, 12):
        c.tick((0, 1, 500, 1_100, 5_000, 21_000)[x])
    elif kind == 13:
        c.up ^= {NODES[x % 2]}
    else:
        c.restart()


def facts_view(model: Model) -> dict[str, Any]:
    """The model without what never becomes a fact: heartbeats, step times, agents' reports."""
    runs = {}
    for run_id in model.runs:
        t = model.tracked(run_id)
        assert t is not None
        runs[run_id] = (replace(t.state, heartbeats={}, updated_at=0), t.plan,
                        replace(t.watch, ranks={}), t.staged, dict(t.shards))
    quarantined = sorted(n.name for n in model.inventory.nodes.values() if n.quarantined)
    return {"runs": runs, "live": sorted(model.live), "node_failures": dict(model.node_failures),
            "closing": model.closing, "quarantined": quarantined}


def assert_indexed(model: Model) -> None:
    """Live runs are the unfinished ones; closing, the finished ones with alerts open."""
    assert all(not t.state.status.terminal for t in model.live.values())
    assert all(t.state.status.terminal for t in model.done.values())
    assert not set(model.live) & set(model.done)
    assert model.closing == {r for r, t in model.done.items() if t.state.open_alerts}


@settings(max_examples=150, deadline=None)
@given(st.lists(OPS, max_size=60), st.lists(st.integers(0, 5), min_size=3, max_size=3))
def test_the_model_reached_live_is_the_model_replay_rebuilds_from_the_facts(
    ops: list[Op], variants: list[int]
) -> None:
    c = Cluster()
    for i, variant in enumerate(variants):
        apply_op(c, (0, i, variant))
    c.tick(1)
    for op in ops:
        apply_op(c, op)
        assert_indexed(c.model)
    c.tick(100_000)  # ends what is stuck, closes what ended
    rebuilt = replay(c.facts(), c.model.since, plan_of)
    assert_indexed(rebuilt)
    assert facts_view(rebuilt) == facts_view(c.model)


def test_a_step_never_changes_the_model_it_started_from() -> None:
    c = Cluster()
    for i in range(2):
        apply_op(c, (0, i, 1))
    c.tick(1)
    before = c.model
    seen = facts_view(before), dict(before.live), len(before.done)
    for op in ((1, 0, 0), (10, 0, 3), (4, 0, 1), (9, 0, 0), (10, 0, 5), (6, 1, 2), (10, 0, 2)):
        apply_op(c, op)
    assert c.model.runs["run-a"].status.terminal  # cancelled: it moved to the shelf
    assert (facts_view(before), dict(before.live), len(before.done)) == seen


def finished_with_alert(run: str) -> list[Event]:
    """A run that ended with an alert open, as a controller that left it so wrote it."""
    ev = Ev(run, start=10, tick=0, producer="controller")
    return [ev.submitted(spec_digest="sha256:x", spec_json="0", world_size=1, dataset_id=None,
                         event_id=f"{run}/s"),
            ev.alert(alert="non_finite_loss", severity="critical", owner="alice", runbook="r",
                     detail="nan", event_id=f"{run}/alert"),
            ev.finished(0, outcome="failed", reason="gave up", event_id=f"{run}/end")]


def test_a_finished_run_with_an_open_alert_is_visited_until_it_is_closed_once() -> None:
    model = replay(finished_with_alert("run-x") + finished_with_alert("run-y")[:1], 0, plan_of)
    assert model.closing == {"run-x"} and model.due() == ["run-x", "run-y"]
    model, out = tick(model, 20, plan_of)
    assert [(type(e).__name__, e.run_id) for _, e in out if e.run_id == "run-x"] == [
        ("AlertResolved", "run-x")]
    assert model.closing == frozenset() and "run-x" not in model.due()
    assert model.runs["run-x"].open_alerts == {}
    assert [e for _, e in tick(model, 30, plan_of)[1] if e.run_id == "run-x"] == []


def test_the_tick_visits_live_runs_only() -> None:
    done = [e for i in range(50) for e in finished_with_alert(f"old-{i:02d}")]
    model = replay(done, 0, plan_of)
    model, _ = tick(model, 20, plan_of)  # closes their alerts
    new = Ev("new").submitted(at=30, event_id="s", producer="cli", spec_digest="sha256:x",
                              spec_json="1", world_size=2, dataset_id=None)
    model, _ = handle(model, new, 30, plan_of)
    assert model.due() == ["new"] and len(model.runs) == 51
    shelf = model.done
    model, _ = tick(model, 40, plan_of)
    assert model.done is shelf  # nothing finished: the finished runs were not touched


def test_a_draft_folds_a_record_once_and_says_whether_it_was_accepted() -> None:
    draft = Draft(Model(since=0), plan_of)
    sub = Ev("r").submitted(at=1, event_id="s", producer="cli", spec_digest="sha256:x",
                            spec_json="2", world_size=1, dataset_id=None)
    assert draft.absorb(sub).accepted
    again = draft.absorb(replace(sub, header=replace(sub.header, event_id="s2")))
    assert (again.accepted, again.reason) == (False, "duplicate_submission")
    model = draft.freeze()
    assert model.runs["r"].status.value == "Submitted" and model.tracked("r") is not None
    assert model.tracked("r").plan == plan(2)  # type: ignore[union-attr]
