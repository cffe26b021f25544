"""The input table: one rule per type that may reach the controller, and how each is taken."""

from __future__ import annotations

from dataclasses import replace

from controller.emitter import Emitter
from controller.inputs import RULES, Kind, rule_for, take
from controller.model import Model
from controller.reconcile import handle
from events.authority import EVIDENCE
from events.model import EVENT_TYPES, Header
from events.topics import REPORTS, REQUESTS
from tests.controller.test_reconcile import PLAN, plan_of, running
from tests.events.builders import Ev

EV = Ev("run-1", start=1_000_000, tick=0, ids="x-{n}")


def test_every_request_and_report_type_has_its_own_rule() -> None:
    inputs = {cls for cls in EVENT_TYPES.values()
              if cls.TOPIC in (REQUESTS, REPORTS) and cls.__name__ not in EVIDENCE}
    assert set(RULES) == inputs
    # Only what is judged on the clock skips the alert rules after it.
    assert {cls.__name__ for cls, rule in RULES.items() if not rule.alerts} == {
        "HeartbeatRecorded", "MembersHeartbeatRecorded", "StepTimesRecorded", "AgentRegistered",
        "AgentHeartbeatRecorded"}
    assert {cls.__name__ for cls, rule in RULES.items() if rule.kind == Kind.REQUEST} == {
        "RunSubmitted", "CancelRequested", "ResumeRequested", "ManifestProposed",
        "NodeOperationRequested"}
    queued = Ev("r").queued(at=0, event_id="x", producer="t", reason="r")
    assert rule_for(queued) is None  # a fact is no input
    assert rule_for(EV.preflight()) is None  # evidence about a spec is no input either


def taken(model: Model, event: object) -> tuple[Model, list[str]]:
    em = Emitter(model, 1_000_000, plan_of)
    rule = rule_for(event)  # type: ignore[arg-type]
    assert rule is not None
    take(em, event, rule)  # type: ignore[arg-type]
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


def test_a_fact_or_a_type_off_its_topic_is_no_input_and_changes_nothing() -> None:
    model = running().model
    cancel = EV.cancelled(1, principal="someone", reason="forged", n=3)
    for event, topic in [
        (EV.queued(1, reason="forged", n=3), REPORTS),
        (EV.finished(1, outcome="failed", reason="forged", n=3), REPORTS),
        (cancel, REQUESTS),
        (EV.quarantined("n1", reason="x", at=0, event_id="q"), REPORTS),
        # a report on the requests topic, and a request on the reports topic
        (EV.heartbeat(1, "r0", step=0, node="n1", n=4), REQUESTS),
        (EV.submitted(spec_digest="sha256:x", world_size=2, dataset_id=None, n=5), REPORTS),
    ]:
        after, out = handle(model, event, 1_000_000, plan_of, topic)
        assert out == [] and after is model, event.event_type


def test_a_future_dated_input_counts_from_when_it_was_received() -> None:
    model = running().model
    now = 1_000_000
    ten_years = 10 * 365 * 86_400_000
    beat = replace(EV.heartbeat(1, "r0", step=0, node="n1", n=7),
                   header=Header("hb-7", "run-1", 1, now + ten_years, "w"))
    after, _ = handle(model, beat, now, plan_of)
    assert after.runs["run-1"].heartbeats["r0"] == now
    step = replace(EV.step(1, step=1, n=8), header=Header("s-8", "run-1", 1, now + ten_years, "w"))
    after, out = handle(model, step, now, plan_of)
    kept = [e for _, e in out if e.event_type == "StepCommitted"]
    assert kept[0].header.occurred_at == now and after.runs["run-1"].last_progress_at == now


def test_a_resubmitted_request_is_refused_and_the_run_is_unchanged() -> None:
    sub = EV.submitted(spec_digest="sha256:x", world_size=2, dataset_id=None, n=4)
    model, out = taken(Model(since=0), sub)
    assert out == ["RunSubmitted"] and model.tracked("run-1") is not None
    again, out = taken(model, EV.submitted(spec_digest="sha256:x", world_size=2,
                                           dataset_id=None, n=5))
    # A run is submitted once (controller.replays): the second request is recorded refused.
    assert out == ["WriteRejected"]
    assert again.runs["run-1"].status == model.runs["run-1"].status
    assert model.tracked("run-1").plan == PLAN  # type: ignore[union-attr]


def test_a_future_dated_submission_is_kept_as_sent_its_fact_is_the_signed_copy() -> None:
    ten_years = 10 * 365 * 86_400_000
    sub = EV.submitted(spec_digest="sha256:x", world_size=2, dataset_id=None, n=9,
                       at=1_000_000 + ten_years)
    em = Emitter(Model(since=0), 1_000_000, plan_of)
    take(em, sub, RULES[type(sub)])
    _, out = em.result()
    assert [e for _, e in out] == [sub]  # the very event: the copy keeps the operator's bytes
