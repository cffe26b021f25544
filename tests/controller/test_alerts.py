"""Alert rules: each rule pure, through the reconcile core, as a property, and end to end.

The end-to-end test starts its own broker (like tests/e2e): a controller acts on
every run it finds on ``runledger.runs``, so it must not share a log with others.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import watch
from controller.alerts import AlertConfig, evaluate, facts
from controller.errors import SpecError
from controller.model import replay
from controller.reconcile import tick
from controller.runplan import plan_from_submission
from controller.spec.runspec import parse_spec
from events.fold import fold
from events.model import (
    AlertRaised,
    AlertResolved,
    CursorAdvanced,
    Event,
    FailureClassified,
    Header,
    RunFinished,
    StepCommitted,
    StepTimesRecorded,
)
from events.state import Checkpoint, RunState, Status
from events.topics import RUNS
from tests.controller.spec.test_runspec import MINIMAL, with_
from tests.controller.test_reconcile import PLAN, Sim, plan_of, running
from tests.e2e.harness import Cluster, of_type
from tests.e2e.harness import spec as e2e_spec
from tests.events.builders import Ev, members

RUN = "run-1"
CFG = AlertConfig(progress_stall_ms=5_000, window_steps=8, checkpoint_lag_steps=10)
EV = Ev(RUN, start=0, tick=0)  # every header at 0; the ids the alerts cite are the tests'


def state(**kw: Any) -> RunState:
    base = RunState(run_id=RUN, status=Status.RUNNING, spec_digest="s", principal="alice",
                    world_size=2, dataset_id=None, submitted_at=0, updated_at=0, generation=1,
                    members=members("r0", "r1"))
    return replace(base, **kw)


def step(n: int, time_ms: float = 100.0, wait_ms: float = 0.0, loss: float | None = 1.0,
         at: int = 0) -> StepCommitted:
    return EV.step(1, n, tokens=1, loss_tokens=1, step_time_ms=time_ms, input_wait_ms=wait_ms,
                   loss=loss, at=at, event_id=f"step/{n}")


def times(lid: str, first: int, *ms: float) -> StepTimesRecorded:
    return EV.step_times(1, first, lid, times=ms, node="n", input_wait_ms=(0.0,) * len(ms),
                         event_id=f"{lid}/t/{first}")


def watch_of(*events: Event) -> watch.Watch:
    w = watch.EMPTY
    for e in events:
        w = watch.observe(w, e, None)
    return w


def decided(st_: RunState, w: watch.Watch, now: int = 0,
            cfg: AlertConfig = CFG) -> list[tuple[str, str, str]]:
    return [(d.action, d.alert, d.subject) for d in evaluate(st_, cfg, w, now)]


def opened(*keys: str) -> dict[str, str]:
    return {k: f"{RUN}/alert/{k}/0" for k in keys}


def test_progress_stall_fires_past_the_threshold_and_the_next_step_resolves_it() -> None:
    st_ = state(last_progress_at=1_000, step=7)
    assert decided(st_, watch.EMPTY, now=6_000) == []  # exactly 5 s: not past it
    assert decided(st_, watch.EMPTY, now=6_001) == [("raise", "progress_stall", "")]
    (d,) = evaluate(st_, CFG, watch.EMPTY, 6_001)
    assert d.severity == "warning" and d.value == 5.001 and "after step 7" in d.detail
    held = replace(st_, open_alerts=opened("progress_stall"))
    assert decided(held, watch.EMPTY, now=60_000) == []  # open: not raised twice
    stepped = replace(held, last_progress_at=59_000, step=8)
    assert decided(stepped, watch.EMPTY, now=60_000) == [("resolve", "progress_stall", "")]
    # Not Running, or a member has exited (the group is finishing): no verdict.
    assert decided(replace(st_, status=Status.RECOVERING), watch.EMPTY, now=99_000) == []
    assert decided(replace(st_, exits={"r0": 0}), watch.EMPTY, now=99_000) == []
    # A controller that just started listening counts from then.
    assert evaluate(st_, CFG, watch.EMPTY, 9_000, since=5_000) == []


def test_straggler_is_the_rank_slower_than_the_ratio_times_the_others() -> None:
    fast = [times(lid, 1, 100, 101, 99, 100) for lid in ("r0", "r1", "r2")]
    w = watch_of(*fast, times("r3", 1, 160, 150, 155, 170))
    assert decided(state(), w) == [("raise", "straggler_rank", "r3")]
    (d,) = evaluate(state(), CFG, w, 0)
    assert d.value == 1.575 and d.cause == "r3/t/1" and "r3: median step time" in d.detail
    assert decided(state(), watch_of(*fast, times("r3", 1, 149, 150, 148, 150))) == []
    # Tiny steps: 3x the others, but 10 ms apart is jitter, not a straggler (#34).
    tiny = [times(lid, 1, 5, 5, 5, 5) for lid in ("r0", "r1", "r2")]
    assert decided(state(), watch_of(*tiny, times("r3", 1, 15, 15, 15, 15))) == []
    assert decided(state(), watch_of(*tiny, times("r3", 1, 60, 60, 60, 60))) == [
        ("raise", "straggler_rank", "r3")]
    # Fewer than 4 samples for a rank, or a single rank: no verdict.
    assert decided(state(), watch_of(*fast[:1], times("r3", 1, 900, 900, 900))) == []
    assert decided(state(), watch_of(times("r3", 1, 900, 900, 900, 900))) == []
    # Two ranks: against the other one (with all ranks' median, never above 1.33x).
    assert decided(state(), watch_of(fast[0], times("r1", 1, 200, 200, 200, 200))) == [
        ("raise", "straggler_rank", "r1")]
    # Only the last window_steps samples count: r3 caught up.
    later = watch.observe(w, times("r3", 5, *[100.0] * 8), None)
    held = state(open_alerts=opened("straggler_rank/r3"))
    assert decided(held, later) == [("resolve", "straggler_rank", "r3")]
    # A new generation forgets the old group's times; the open alert waits for evidence.
    restarted = EV.generation_started(2, members=(), reason="restart", event_id="g2")
    assert decided(held, watch.observe(w, restarted, None)) == []


def test_input_wait_share_over_the_window_of_steps() -> None:
    waiting = [step(n, 100.0, 30.0) for n in range(1, 5)]
    assert decided(state(), watch_of(*waiting[:3])) == []  # fewer than 4 steps
    assert decided(state(), watch_of(*waiting)) == [("raise", "input_wait_share", "")]
    assert decided(state(), watch_of(*[step(n, 100.0, 25.0) for n in range(1, 5)])) == []
    # The window is the last 8 steps: 8 quick ones clear it.
    clear = watch_of(*waiting, *[step(n, 100.0, 1.0) for n in range(5, 13)])
    held = state(open_alerts=opened("input_wait_share"))
    assert decided(held, clear) == [("resolve", "input_wait_share", "")]


def test_checkpoint_lag_against_the_explicit_or_three_intervals() -> None:
    ckpt = Checkpoint(20, "m", "d", 1, 0)
    assert decided(state(step=30, checkpoint=ckpt), watch.EMPTY) == []  # 10: not past 10
    assert decided(state(step=31, checkpoint=ckpt), watch.EMPTY) == [
        ("raise", "checkpoint_lag", "")]
    assert decided(state(step=11), watch.EMPTY) == [("raise", "checkpoint_lag", "")]  # none yet
    auto = replace(CFG, checkpoint_lag_steps=None, plan_interval_steps=5)
    assert decided(state(step=15), watch.EMPTY, cfg=auto) == []
    assert decided(state(step=16), watch.EMPTY, cfg=auto) == [("raise", "checkpoint_lag", "")]
    # The controller's own interval (auto policy) replaces the spec's.
    assert decided(state(step=16, checkpoint_interval_steps=6), watch.EMPTY, cfg=auto) == []
    assert decided(state(step=16), watch.EMPTY, cfg=replace(auto, plan_interval_steps=None)) == []
    held = state(step=31, checkpoint=Checkpoint(30, "m", "d", 1, 0),
                 open_alerts=opened("checkpoint_lag"))
    assert decided(held, watch.EMPTY) == [("resolve", "checkpoint_lag", "")]


def cursor(counts: dict[str, int], targets: dict[str, float] | None) -> CursorAdvanced:
    return EV.cursor(1, 8, position=1, dataset_id="ds", source_counts=counts,
                     mixture_targets=targets, event_id="c")


def test_mixture_drift_from_the_last_cursor() -> None:
    targets = {"web": 0.7, "code": 0.3}
    assert decided(state(), watch_of(cursor({"web": 750, "code": 250}, targets))) == [
        ("raise", "mixture_drift", "")]
    (d,) = evaluate(state(), CFG, watch_of(cursor({"web": 750, "code": 250}, targets)), 0)
    assert math.isclose(d.value or 0, 0.05) and "'web' has 750 of 1000" in d.detail
    assert decided(state(), watch_of(cursor({"web": 710, "code": 290}, targets))) == []
    # Within one sample of the target is rounding, however small N is.
    assert decided(state(), watch_of(cursor({"web": 4, "code": 1}, targets))) == []
    assert decided(state(), watch_of(cursor({"web": 750, "code": 250}, None))) == []
    held = state(open_alerts=opened("mixture_drift"))
    assert decided(held, watch_of(cursor({"web": 700, "code": 300}, targets))) == [
        ("resolve", "mixture_drift", "")]


def test_non_finite_loss_is_critical_and_a_finite_loss_resolves_it() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        (d,) = evaluate(state(), CFG, watch_of(step(1), step(2, loss=bad)), 0)
        assert (d.action, d.alert, d.severity, d.cause) == ("raise", "non_finite_loss",
                                                            "critical", "step/2")
    held = state(open_alerts=opened("non_finite_loss"))
    assert decided(held, watch_of(step(2, loss=math.nan), step(3, loss=None))) == []
    assert decided(held, watch_of(step(2, loss=math.nan), step(3, loss=2.5))) == [
        ("resolve", "non_finite_loss", "")]


def failure(gen: int, sig: str = "worker_crash:exit=1") -> FailureClassified:
    return EV.failure(gen, signature=sig, attempt=gen, detail="x", logical_id=None, node=None,
                      event_id=f"f{gen}")


def test_repeated_failure_per_signature_until_a_later_generation_commits() -> None:
    sig = "worker_crash:exit=1"
    one = state(failures={sig: 1, "hang:no_progress": 1})
    assert decided(one, watch_of(failure(1))) == []
    two = state(generation=3, failures={sig: 2})
    w = watch_of(failure(1), failure(2))
    (d,) = evaluate(two, CFG, w, 0)
    assert (d.alert, d.subject, d.severity, d.value, d.cause) == (
        "repeated_failure", sig, "critical", 2.0, "f2")
    held = replace(two, open_alerts=opened(f"repeated_failure/{sig}"))
    assert decided(replace(held, checkpoint=Checkpoint(5, "m", "d", 2, 0)), w) == []
    assert decided(replace(held, checkpoint=Checkpoint(9, "m", "d", 3, 0)), w) == [
        ("resolve", "repeated_failure", sig)]


def test_the_end_of_a_run_resolves_every_open_alert() -> None:
    keys = ("non_finite_loss", "straggler_rank/r1", "repeated_failure/hang:no_progress")
    ended = state(status=Status.SUCCEEDED, outcome_reason="every member exited 0",
                  open_alerts=opened(*keys))
    w = watch.observe(watch_of(step(1, loss=math.nan)), EV.finished(1, reason="ok",
                                                                    event_id="end"), None)
    got = evaluate(ended, CFG, w, 0)
    assert sorted((d.action, d.key) for d in got) == sorted(("resolve", k) for k in keys)
    assert all(d.cause == "end" and "the run ended: Succeeded" in d.detail for d in got)
    assert w.steps == () and w.ranks == {}  # the windows are dropped at the end


def test_fact_ids_are_deterministic_and_count_raises_per_key() -> None:
    cfg = replace(CFG, owner="ml-oncall", runbook_base="https://wiki/runbooks")
    w = watch_of(step(1, loss=math.nan))
    (raised,) = facts(state(generation=4), cfg, w, 77, "controller")
    assert isinstance(raised, AlertRaised)
    assert raised.header == Header(f"{RUN}/alert/non_finite_loss/0", RUN, 4, 77, "controller",
                                   "step/1")
    assert raised.owner == "ml-oncall" and raised.runbook == "https://wiki/runbooks#non-finite-loss"
    assert facts(state(generation=4), cfg, w, 77, "controller") == [raised]  # same inputs
    assert facts(state(), CFG, w, 0, "c")[0].owner == "alice"  # type: ignore[union-attr]
    st_ = fold([raised], {RUN: state(generation=4)})[RUN]
    w = watch.observe(w, raised, state(generation=4))
    (resolved,) = facts(st_, cfg, watch.observe(w, step(2, loss=1.0), st_), 78, "controller")
    assert isinstance(resolved, AlertResolved)
    assert resolved.header.event_id == f"{RUN}/alert/non_finite_loss/0/resolved"
    assert resolved.raised_event_id == raised.header.event_id
    st_ = fold([resolved], {RUN: st_})[RUN]
    (again,) = facts(st_, cfg, watch.observe(w, step(3, loss=math.inf), st_), 79, "controller")
    assert again.header.event_id == f"{RUN}/alert/non_finite_loss/1"
    # A duplicate raise the fold ignored is not counted.
    assert watch.observe(w, raised, fold([raised], {RUN: state()})[RUN]) is w


# --- through the reconcile core ----------------------------------------------------


def step_at(sim: Sim, n: int, loss: float) -> StepCommitted:
    return sim.ev.step(sim.state.generation, n, tokens=1, loss_tokens=1, step_time_ms=100.0,
                       input_wait_ms=0.0, loss=loss)


def test_handle_and_tick_raise_and_resolve_and_a_replay_decides_nothing_new() -> None:
    sim = running()
    sim.send(step_at(sim, 1, loss=math.nan))
    raised = [e for _, e in sim.log if isinstance(e, AlertRaised)]
    assert [(e.alert, e.owner, e.generation) for e in raised] == [("non_finite_loss", "alice", 1)]
    # Step times are evaluated by the tick, not per report.
    for lid, ms in (("r0", 100.0), ("r1", 400.0)):
        out = sim.send(sim.ev.step_times(1, 1, lid, times=(ms,) * 4, node="n1",
                                         input_wait_ms=(0.0,) * 4))
        assert out == []
    out = sim.tick(10)
    assert [(e.alert, e.subject) for _, e in out if isinstance(e, AlertRaised)] == [
        ("straggler_rank", "r1")]
    assert sim.tick(10) == []
    # Rebuilt from the facts alone: the same open alerts and raise counts, nothing to redo
    # (step times are no facts: the rebuilt watch has none, and decides nothing on them).
    model = replay((e for t, e in sim.log if t == RUNS), sim.model.since, plan_of)
    assert model.runs[RUN].open_alerts == sim.state.open_alerts
    rebuilt, live = model.tracked(RUN), sim.model.tracked(RUN)
    assert rebuilt is not None and live is not None
    assert rebuilt.watch.raised == live.watch.raised
    assert rebuilt.watch.ranks == {}
    assert tick(model, sim.now, plan_of)[1] == []
    out = sim.send(step_at(sim, 2, loss=3.0))
    assert [e.alert for _, e in out if isinstance(e, AlertResolved)] == ["non_finite_loss"]
    out = sim.send(sim.ev.cancel_requested(1, principal="alice", reason="t"))
    assert [e.event_type for _, e in out][:1] == ["RunCancelled"]
    (ended,) = [e for _, e in out if isinstance(e, AlertResolved)]
    assert ended.alert == "straggler_rank" and "Cancelled" in ended.detail
    assert sim.state.open_alerts == {} and sim.tick(10) == []


# --- the property --------------------------------------------------------------------

Op = tuple[str, int, float]
OPS = st.one_of(
    st.tuples(st.just("step"), st.integers(0, 3), st.sampled_from([1.0, math.nan, math.inf])),
    st.tuples(st.just("times"), st.integers(0, 1), st.sampled_from([50.0, 100.0, 400.0])),
    st.tuples(st.just("wait"), st.integers(0, 4_000), st.just(0.0)),
    st.tuples(st.just("checkpoint"), st.just(0), st.just(0.0)),
    st.tuples(st.just("crash"), st.just(0), st.just(0.0)),
)


def apply_op(sim: Sim, op: Op) -> None:
    kind, n, x = op
    gen = sim.state.generation
    if kind == "step" and sim.state.status.active:
        for _ in range(n + 1):
            sim.send(sim.ev.step(gen, sim.state.step + 1, tokens=1, loss_tokens=1,
                                 step_time_ms=100.0, input_wait_ms=100.0 * (x != 1.0), loss=x))
    elif kind == "times":
        sim.send(sim.ev.step_times(gen, 1, f"r{n}", times=(x,) * 4, node="n1",
                                   input_wait_ms=(0.0,) * 4))
    elif kind == "wait":
        sim.tick(n)
        sim.beat(gen)
    elif kind == "checkpoint" and sim.state.status.active and sim.state.step > (
            sim.state.checkpoint.step if sim.state.checkpoint else 0):
        at = sim.state.step
        for lid in ("r0", "r1"):
            sim.send(sim.ev.shard(gen, at, lid, path="p", bytes=1, crc32c=0))
        sim.send(sim.ev.proposed(gen, at, manifest_path=f"m{at}", manifest_digest=f"d{at}",
                                 dataset_id=None))
    elif kind == "crash" and sim.state.status.active:
        sim.send(sim.ev.exited(gen, "r0", exit_code=13, node="n1"))
        sim.tick()
        sim.tick(5_000)  # past the backoff: the next generation starts
        sim.beat(sim.state.generation)
    sim.tick(1)


@settings(max_examples=60, deadline=None)
@given(st.lists(OPS, max_size=30), st.booleans())
def test_alerts_alternate_per_key_and_each_resolution_names_the_open_raise(
    ops: list[Op], cancel: bool
) -> None:
    cfg = AlertConfig(progress_stall_ms=2_000, window_steps=4, checkpoint_lag_steps=5)
    sim = running(replace(PLAN, alerts=cfg))
    for op in ops:
        apply_op(sim, op)
    if cancel and not sim.state.status.terminal:
        sim.send(sim.ev.cancel_requested(sim.state.generation, principal="alice", reason="end"))
        sim.tick(1)
    open_: dict[str, str] = {}
    ids: set[str] = set()
    for _, e in sim.log:
        if isinstance(e, AlertRaised):
            assert e.key not in open_, f"{e.key} raised while open"
            open_[e.key] = e.header.event_id
        elif isinstance(e, AlertResolved):
            assert open_.pop(e.key, None) == e.raised_event_id, f"{e.key} resolved while closed"
        else:
            continue
        assert e.header.event_id not in ids
        ids.add(e.header.event_id)
    assert open_ == sim.state.open_alerts
    if sim.state.status.terminal:
        assert open_ == {}


# --- the spec ----------------------------------------------------------------------------


def test_the_spec_alerts_section_defaults_validates_and_reaches_the_plan() -> None:
    spec = parse_spec(yaml.safe_dump(with_("heartbeat", {"stall_timeout_s": 40.0})), "t")
    assert spec.alerts.progress_stall_s == 20.0 and spec.alerts.owner is None
    # Writing a default out means the same run.
    same = with_("alerts", {"progress_stall_s": 20.0, "straggler_ratio": 1.5},
                 with_("heartbeat", {"stall_timeout_s": 40.0}))
    assert parse_spec(yaml.safe_dump(same), "t").digest() == spec.digest()
    doc = with_("alerts", {"owner": "ml-oncall", "runbook_base": "https://wiki/rb",
                           "checkpoint_lag_steps": 500, "window_steps": 32,
                           "repeated_failure": 3})
    doc["budget"] = {"price_per_gpu_hour": 2.5}
    spec = parse_spec(yaml.safe_dump(doc), "t")
    assert spec.budget.price_per_gpu_hour == 2.5
    sub = EV.submitted(1, event_id="s", spec_digest=spec.digest(),
                       spec_json=spec.canonical_json(), world_size=2, dataset_id=None)
    assert plan_from_submission(sub).alerts == AlertConfig(
        owner="ml-oncall", runbook_base="https://wiki/rb", progress_stall_ms=30_000,
        window_steps=32, checkpoint_lag_steps=500, plan_interval_steps=100,
        repeated_failure=3)
    bad = {"straggler_ratio": 1.0, "input_wait_share": 1.5, "mixture_drift": 0.0,
           "window_steps": 2, "repeated_failure": 1, "checkpoint_lag_steps": 0,
           "progress_stall_s": 60.0, "owner": "", "colour": "red"}
    with pytest.raises(SpecError) as info:
        parse_spec(yaml.safe_dump(with_("alerts", bad)), "t")
    named = {p.split(":")[0] for p in info.value.problems}
    assert named == {f"alerts.{k}" for k in bad if k != "progress_stall_s"}
    with pytest.raises(SpecError, match=r"progress_stall_s 60\.0 must be below heartbeat"):
        parse_spec(yaml.safe_dump(with_("alerts", {"progress_stall_s": 60.0})), "t")
    assert MINIMAL.get("alerts") is None  # the section is optional


# --- end to end --------------------------------------------------------------------------


@pytest.mark.kafka
@pytest.mark.e2e
def test_a_slow_rank_a_nan_loss_and_input_waits_raise_alerts_closed_at_the_end(
    cluster: Cluster,
) -> None:
    cluster.controller()
    cluster.agent("n1", 2)
    worker = ["--steps", "24", "--step-time", "0.05", "--slow-rank", "1", "--slow-ms", "200",
              "--input-wait-ms", "40", "--nan-from-step", "20", "--step-times-every", "4"]
    run = cluster.submit(e2e_spec("alerts", worker, alerts={"owner": "ml-oncall"}))

    def ended_and_closed(facts: list[Event]) -> bool:
        done = any(isinstance(e, RunFinished) for e in facts)
        return done and len(of_type(facts, "AlertResolved")) >= 3

    facts = cluster.wait_facts(run, ended_and_closed, timeout=90, what="the end, alerts closed")
    (end,) = of_type(facts, "RunFinished")
    assert end.outcome == "succeeded"
    raised = {(e.alert, e.subject): e for e in facts if isinstance(e, AlertRaised)}
    assert set(raised) == {("straggler_rank", "r1"), ("non_finite_loss", ""),
                           ("input_wait_share", "")}
    straggler = raised["straggler_rank", "r1"]
    assert straggler.severity == "warning" and (straggler.value or 0) > 1.5
    assert straggler.runbook == "docs/runbooks.md#straggler-rank"
    assert straggler.header.event_id == f"{run}/alert/straggler_rank/r1/0"
    nan = raised["non_finite_loss", ""]
    assert nan.severity == "critical" and nan.header.causation_id == f"{run}/g1/r0/step/20"
    assert all(e.owner == "ml-oncall" and e.generation == 1 for e in raised.values())
    resolved = {e.raised_event_id: e for e in facts if isinstance(e, AlertResolved)}
    assert set(resolved) == {e.header.event_id for e in raised.values()}
    assert all("the run ended: Succeeded" in e.detail for e in resolved.values())
    assert min(facts.index(e) for e in resolved.values()) > facts.index(end)
    assert fold(facts)[run].open_alerts == {}
