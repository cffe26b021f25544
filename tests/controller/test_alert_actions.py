"""Alert actions: ``alerts.actions`` in the spec, and what ``escalate`` does to a raise."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import yaml

from controller.alerts import escalated, facts
from controller.errors import SpecError
from controller.runplan import plan_from_submission
from controller.spec.runspec import parse_spec
from events.fold import fold
from events.model import AlertRaised, AlertResolved, Header, RunPaused, RunSubmitted
from events.state import Status
from tests.controller.spec.test_runspec import MINIMAL
from tests.controller.test_alerts import CFG, RUN, state, step, watch_of
from tests.controller.test_reconcile import PLAN, running, types


def alerts_problems(section: dict[str, object]) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(yaml.safe_dump({**MINIMAL, "alerts": section}), "test.yaml")
    return info.value.problems


def test_actions_name_known_rules_and_actions() -> None:
    [unknown_rule] = alerts_problems({"actions": {"loss_spike": "escalate"}})
    assert unknown_rule.startswith("alerts.actions") and "non_finite_loss" in unknown_rule
    [unknown] = alerts_problems({"actions": {"non_finite_loss": "page"}})
    assert "alerts.actions.non_finite_loss" in unknown
    assert "known: notify, pause, escalate" in unknown
    assert alerts_problems({"escalate_to": ""})[0].startswith("alerts.escalate_to")


def test_a_spec_without_actions_keeps_its_digest_and_actions_reach_the_plan() -> None:
    plain = parse_spec(yaml.safe_dump(MINIMAL), "a.yaml")
    spelled = parse_spec(yaml.safe_dump({**MINIMAL, "alerts": {"actions": {}}}), "b.yaml")
    assert plain.digest() == spelled.digest() and "actions" not in plain.canonical_json()
    doc = {**MINIMAL, "alerts": {"actions": {"straggler_rank": "escalate",
                                             "checkpoint_lag": "notify"},
                                 "escalate_to": "ml-pager"}}
    spec = parse_spec(yaml.safe_dump(doc), "c.yaml")
    assert spec.digest() != plain.digest()
    sub = RunSubmitted(header=Header("s", RUN, 0, 0, "cli"), spec_digest=spec.digest(),
                       spec_json=spec.canonical_json(), principal="alice", world_size=2)
    cfg = plan_from_submission(sub).alerts
    assert cfg.actions == {"straggler_rank": "escalate", "checkpoint_lag": "notify"}
    assert cfg.escalate_to == "ml-pager"


def test_escalate_raises_one_severity_higher_to_the_escalation_owner_and_says_so() -> None:
    assert [escalated(s) for s in ("info", "warning", "critical")] == [
        "warning", "critical", "critical"]
    w = watch_of(step(1, loss=math.nan))
    (plain,) = facts(state(), CFG, w, 5, "controller")
    cfg = replace(CFG, actions={"non_finite_loss": "escalate"}, escalate_to="ml-pager")
    (up,) = facts(state(), cfg, w, 5, "controller")
    assert isinstance(plain, AlertRaised) and isinstance(up, AlertRaised)
    assert (plain.severity, plain.owner) == ("critical", "alice")
    assert (up.severity, up.owner) == ("critical", "ml-pager")
    assert up.detail == f"{plain.detail} [escalated: alerts.actions.non_finite_loss]"
    assert up.header == plain.header  # the same alert, the same id: only its address differs
    # Without escalate_to it stays with the owner; a warning becomes critical.
    stalled = facts(state(last_progress_at=0), replace(CFG, actions={"progress_stall":
                                                                     "escalate"}), w, 10_000, "c")
    (stall,) = [f for f in stalled if isinstance(f, AlertRaised) and f.alert == "progress_stall"]
    assert (stall.severity, stall.owner) == ("critical", "alice")
    # The resolution is the usual one.
    st_ = fold([up], {RUN: state()})[RUN]
    (resolved,) = facts(st_, cfg, watch_of(step(1, loss=math.nan), step(2)), 6, "controller")
    assert isinstance(resolved, AlertResolved) and resolved.raised_event_id == up.header.event_id


def test_pause_stops_the_group_holds_the_run_and_only_its_cancel_authority_resumes() -> None:
    plan = replace(PLAN, alerts=replace(PLAN.alerts, actions={"non_finite_loss": "pause"}))
    sim = running(plan)
    out = sim.send(sim.ev.step(1, 1, tokens=1, loss_tokens=1, step_time_ms=1.0,
                               input_wait_ms=0.0, loss=math.nan))
    assert types(out) == ["StepCommitted", "AlertRaised", "RunPaused", "GroupStopCommanded"]
    paused = out[2][1]
    assert isinstance(paused, RunPaused) and paused.alert == "non_finite_loss"
    assert paused.header.causation_id == out[1][1].header.event_id
    assert "[pausing the run: alerts.actions.non_finite_loss]" in paused.reason
    assert (sim.state.status, sim.state.paused) == (Status.QUEUED, True)
    assert "runledger resume" in sim.state.queue_reason
    # Held: ticks admit nothing, and the old generation's reports are refused.
    assert types(sim.tick(60_000)) == []
    assert types(sim.beat(1, "r0")) == ["WriteRejected"]
    # A resume from outside the cancel authority is refused; the submitter's is taken.
    refused = sim.send(sim.ev.resume_requested(0, principal="mallory"))
    assert types(refused) == ["WriteRejected"] and refused[0][1].reason == "unauthorized"
    assert types(sim.send(sim.ev.resume_requested(0, principal="oncall"))) == ["RunResumed"]
    assert not sim.state.paused
    sim.agent("n1", 2)  # the node reports again after the minute held
    started = sim.tick()
    assert types(started)[:2] == ["RunAdmitted", "GenerationStarted"]
    assert sim.state.generation == 2
    # A resume of a run that is not paused says so.
    again = sim.send(sim.ev.resume_requested(0, principal="alice"))
    assert types(again) == ["WriteRejected"] and again[0][1].reason == "run_not_paused"


def test_an_alert_without_the_pause_action_never_pauses() -> None:
    sim = running()
    out = sim.send(sim.ev.step(1, 1, tokens=1, loss_tokens=1, step_time_ms=1.0,
                               input_wait_ms=0.0, loss=math.nan))
    assert types(out) == ["StepCommitted", "AlertRaised"]
    assert sim.state.status == Status.RUNNING and not sim.state.paused
