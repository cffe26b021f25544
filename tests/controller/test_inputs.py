"""The input table: one rule per type that may reach the controller, and how each is taken."""

from __future__ import annotations

from controller.emitter import Emitter
from controller.inputs import FALLBACK, RULES, Kind, rule_for, take
from controller.model import Model
from events.model import (
    EVENT_TYPES,
)
from events.topics import REPORTS, REQUESTS
from tests.controller.test_reconcile import PLAN, plan_of, running
from tests.events.builders import Ev

EV = Ev("run-1", start=1_000_000, tick=0, ids="x-{n}")


def test_every_request_and_report_type_has_its_own_rule() -> None:
    inputs = {cls for cls in EVENT_TYPES.values() if cls.TOPIC in (REQUESTS, REPORTS)}
    assert set(RULES) == inputs
    # Only what is judged on the clock skips the alert rules after it.
    assert {cls.__name__ for cls, rule in RULES.items() if not rule.alerts} == {
        "HeartbeatRecorded", "StepTimesRecorded", "AgentRegistered", "AgentHeartbeatRecorded"}
    assert {cls.__name__ for cls, rule in RULES.items() if rule.kind == Kind.REQUEST} == {
        "RunSubmitted", "CancelRequested", "ManifestProposed"}
    queued = Ev("r").queued(at=0, event_id="x", producer="t", reason="r")
    assert rule_for(queued) is FALLBACK


def taken(model: Model, event: object) -> tuple[Model, list[str]]:
    em = Emitter(model, 1_000_000, plan_of)
    take(em, event, rule_for(event))  # type: ignore[arg-type]
    model, out = em.result()
    return model, [e.event_type for _, e in out]


def test_a_heartbeat_is_folded_but_not_kept_and_a_stale_one_is_recorded_as_rejected() -> None:
    model = running().model
    beat = EV.heartbeat(1, "r0", step=0, node="n1", n=1)
    after, out = taken(model, beat)
    assert out == [] and after.runs["run-1"].heartbeats["r0"] == 1_000_000
    stale = EV.heartbeat(0, "r0", step=0, node="n1", n=2)
    after, out = taken(model, stale)
    assert out == ["WriteRejected"] and after.runs["run-1"].rejections == 1


def test_a_fact_sent_as_an_input_is_folded_as_a_report_of_its_run() -> None:
    model = running().model
    _, out = taken(model, EV.queued(1, reason="forged", n=3))
    assert out == ["WriteRejected"]  # the fold's own verdict: Running cannot be queued
    # A node's fact names no run: the run fold refuses it, the inventory never sees it.
    forged = EV.quarantined("n1", reason="x", at=0, event_id="q")
    after, out = taken(model, forged)
    assert out == ["WriteRejected"] and not after.inventory.nodes["n1"].quarantined


def test_a_resubmitted_request_is_the_same_run() -> None:
    sub = EV.submitted(spec_digest="sha256:x", world_size=2, dataset_id=None, n=4)
    model, out = taken(Model(since=0), sub)
    assert out == ["RunSubmitted"] and model.tracked("run-1") is not None
    again, out = taken(model, EV.submitted(spec_digest="sha256:x", world_size=2,
                                           dataset_id=None, n=5))
    assert out == [] and again.runs == model.runs
    assert model.tracked("run-1").plan == PLAN  # type: ignore[union-attr]
