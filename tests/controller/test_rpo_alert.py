"""The rpo_violated alert (controller.alerts over events.recovery): raised once per violation
episode and per failure domain, resolved when back in budget, re-armed with a new id; the
spec's checkpoint.rpo and first tier reach the plan."""

from __future__ import annotations

import itertools
from dataclasses import replace

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import watch
from controller.alerts import RPO_VIOLATED, AlertConfig, facts
from controller.model import replay
from controller.reconcile import tick
from controller.runplan import plan_from_submission
from controller.spec.runspec import parse_spec
from events.fold import fold
from events.model import AlertRaised, AlertResolved, Event
from events.state import Checkpoint, RunState, Status
from events.topics import RUNS
from tests.controller.spec.test_tiers import LOCAL, REMOTE, with_checkpoint
from tests.controller.test_reconcile import PLAN, running
from tests.events.builders import Ev, members

RUN = "run-1"
EV = Ev(RUN, start=0, tick=10)
CFG = AlertConfig(rpo={"process": 8, "host": 10}, first_protects="process")


class Run:
    """One running run: its folded state and watch, and the alert facts each tick appends."""

    def __init__(self, cfg: AlertConfig = CFG) -> None:
        self.cfg = cfg
        self.state = RunState(run_id=RUN, status=Status.RUNNING, spec_digest="s",
                              principal="alice", world_size=2, dataset_id=None, submitted_at=0,
                              updated_at=0, generation=1, members=members("r0", "r1"))
        self.watch = watch.EMPTY
        self.alerts: list[AlertRaised | AlertResolved] = []

    def see(self, event: Event) -> None:
        before = self.state
        self.state = fold([event], {RUN: before})[RUN]
        self.watch = watch.observe(self.watch, event, before)

    def tick(self) -> list[AlertRaised | AlertResolved]:
        out = facts(self.state, self.cfg, self.watch, EV.now, "controller")
        for f in out:
            self.see(f)
        self.alerts += out
        return out

    def steps(self, upto: int) -> None:
        for s in range(self.state.step + 1, upto + 1):
            self.see(EV.step(1, s))

    def commit(self) -> Checkpoint:
        c = EV.committed(1, self.state.step)
        self.see(c)
        return Checkpoint(c.step, c.manifest_path, c.manifest_digest, 1, c.header.occurred_at)


def test_a_host_gap_over_its_rpo_raises_once_and_a_replica_resolves_it() -> None:
    run = Run()
    run.steps(4)
    ck4 = run.commit()
    assert run.tick() == []  # process: 0 of 8; host: 4 of 10
    run.steps(11)
    (raised,) = run.tick()  # process: 7 of 8; host: 11 of 10
    assert isinstance(raised, AlertRaised) and raised.alert == RPO_VIOLATED
    assert (raised.subject, raised.value, raised.severity) == ("host", 11.0, "warning")
    assert raised.header.event_id == f"{RUN}/alert/rpo_violated/host/0"
    assert raised.threshold == "> 10 steps lost by a host loss"
    assert "no checkpoint survives it" in raised.detail and "add a tier" in raised.detail
    assert raised.runbook.endswith("#rpo-violated")
    run.steps(12)
    assert run.tick() == []  # still violated: not raised again every tick
    run.see(EV.replicated(1, ck4, protects="host"))
    run.commit()  # at step 12, on the first tier only: it survives a process loss
    (resolved,) = run.tick()  # host: step 12 - 4 = 8 <= 10
    assert isinstance(resolved, AlertResolved)
    assert resolved.raised_event_id == raised.header.event_id
    assert resolved.header.causation_id == run.watch.recovery.changed_by
    run.steps(15)  # 11 steps past step 4 again: a new episode, a new id
    (again,) = run.tick()
    assert again.header.event_id == f"{RUN}/alert/rpo_violated/host/1"
    assert "the newest checkpoint that survives it is at step 4" in again.detail


def test_no_rpo_no_alert_and_an_ended_run_closes_what_is_open() -> None:
    run = Run(AlertConfig())
    run.steps(50)
    assert run.tick() == []
    run = Run()
    run.steps(20)
    assert {a.subject for a in run.tick()} == {"process", "host"}
    run.see(EV.finished(1))
    assert {(type(a).__name__, a.subject) for a in run.tick()} == {
        ("AlertResolved", "process"), ("AlertResolved", "host")}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(("step", "commit", "replicate", "tick")), max_size=60))
def test_alerts_alternate_per_domain_and_match_the_violation_after_each_tick(ops) -> None:
    run, last = Run(), None
    for op in ops:
        if op == "step":
            run.steps(run.state.step + 3)
        elif op == "commit" and (run.state.checkpoint is None
                                 or run.state.checkpoint.step < run.state.step):
            last = run.commit()
        elif op == "replicate" and last is not None:
            run.see(EV.replicated(1, last, protects="host"))
        run.tick()
        for domain in ("process", "host"):
            mine = [type(a) for a in run.alerts if a.subject == domain]
            assert all(a is not b for a, b in itertools.pairwise(mine))
            gap = run.state.step - next(
                (c.step for c in reversed(run.watch.recovery.checkpoints)
                 if domain == "process" or c.replicated >= 1), 0)
            assert (mine[-1:] == [AlertRaised]) == (gap > CFG.rpo[domain])


def test_the_spec_rpo_and_first_tier_reach_the_plan() -> None:
    doc = with_checkpoint(tiers=[LOCAL, REMOTE], rpo={"host": 200, "process": 20})
    spec = parse_spec(yaml.safe_dump(doc), "t")
    sub = EV.submitted(event_id="s", spec_digest=spec.digest(), spec_json=spec.canonical_json())
    alerts = plan_from_submission(sub).alerts
    assert (alerts.rpo, alerts.first_protects) == ({"host": 200, "process": 20}, "process")
    plain = parse_spec(yaml.safe_dump(with_checkpoint(root="/shared/ck")), "t")
    sub = EV.submitted(event_id="s", spec_digest=plain.digest(), spec_json=plain.canonical_json())
    assert (plan_from_submission(sub).alerts.rpo,
            plan_from_submission(sub).alerts.first_protects) == ({}, "host")


def test_through_the_controller_core_a_replica_report_resolves_and_a_replay_agrees() -> None:
    plan = replace(PLAN, alerts=AlertConfig(rpo={"host": 3}, first_protects="process"))
    sim = running(plan)
    for s in (1, 2, 3):
        sim.send(sim.ev.step(1, s))
    for lid in ("r0", "r1"):
        sim.send(sim.ev.shard(1, 3, lid, path="p", bytes=1, crc32c=0))
    sim.send(sim.ev.proposed(1, 3, manifest_path="m3", manifest_digest="d3", dataset_id=None))
    out = sim.send(sim.ev.step(1, 4))  # 4 steps past nothing that survives a host loss
    (raised,) = [e for _, e in out if isinstance(e, AlertRaised)]
    assert (raised.alert, raised.subject, raised.value) == (RPO_VIOLATED, "host", 4.0)
    assert sim.tick(10) == []
    copy = Checkpoint(3, "m3", "d3", 1, 0)
    out = sim.send(sim.ev.replicated(1, copy, "r0", protects="host"))
    assert [(type(e).__name__, e.subject) for _, e in out if isinstance(
        e, AlertRaised | AlertResolved)] == [("AlertResolved", "host")]
    model = replay((e for t, e in sim.log if t == RUNS), sim.model.since, lambda _: plan)
    assert model.runs[RUN].open_alerts == sim.state.open_alerts == {}
    assert tick(model, sim.now, lambda _: plan)[1] == []
