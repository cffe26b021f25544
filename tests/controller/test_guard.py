"""No input can stop the controller: the core under random inputs, and the guard's isolation."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import guard, run_decide
from controller.emitter import PRODUCER
from controller.guard import FACT_INVALID, INPUT_FAILED, RECONCILE_FAILED, take_input, take_tick
from controller.inputs import RULES
from controller.model import Model
from controller.reconcile import handle, tick
from events.authority import SENDERS, Role
from events.codec import default_codec
from events.model import (
    EVENT_TYPES,
    Event,
    RunAdmitted,
    RunFinished,
    RunSubmitted,
    WriteRejected,
)
from events.topics import ALL, RUNS
from tests.controller.test_reconcile import RUN, Sim, plan_of, running
from tests.events.strategies import event_of

ENCODE = default_codec().encode
NOW = 2_000_000

# Random events of every type, most of them aimed at the running run (its id, its
# generation), the rest at whatever run id hypothesis chose.
_aimed = st.one_of([event_of(cls) for cls in EVENT_TYPES.values()]).flatmap(
    lambda e: st.sampled_from([
        e, replace(e, header=replace(e.header, run_id=RUN, generation=1)),
        replace(e, header=replace(e.header, run_id=RUN))]))
_inputs = st.lists(st.tuples(_aimed, st.sampled_from(ALL)), min_size=1, max_size=12)


def _allowed_on_runs(written: Event, sent: Event, topic: str) -> bool:
    """A fact the controller made, or the input itself, taken by its rule from its own topic."""
    if written.header.event_id != sent.header.event_id:
        made = written.header.producer == PRODUCER
        return made and SENDERS[type(written)].role == Role.CONTROLLER
    rule = RULES.get(type(sent))
    kept = rule is not None and (rule.keep or isinstance(sent, RunSubmitted))
    return type(written) is type(sent) and kept and topic == type(sent).TOPIC


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_inputs)
def test_random_typed_events_on_random_topics_never_raise_nor_put_a_stray_on_runs(
    inputs: list[tuple[Event, str]],
) -> None:
    model = running().model
    for i, (event, topic) in enumerate(inputs):
        model, out = handle(model, event, NOW + i, plan_of, topic)
        for out_topic, written in out:
            if out_topic == RUNS:
                assert _allowed_on_runs(written, event, topic), (written, topic)
        model, _ = tick(model, NOW + i, plan_of)


def test_an_input_whose_handling_raises_is_refused_and_the_model_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim = running()
    beat = sim.ev.heartbeat(1, "r0", step=0, node="n1")

    def broken(*_: object, **__: object) -> None:
        raise ZeroDivisionError("a bug the core never met")

    monkeypatch.setattr(guard, "handle", broken)
    after, out, problem = take_input(sim.model, beat, beat.TOPIC, NOW, plan_of, ENCODE)
    assert problem is not None and problem[1] == INPUT_FAILED
    ((topic, rejected, data),) = out
    assert isinstance(rejected, WriteRejected)
    assert topic == RUNS and rejected.reason == INPUT_FAILED
    assert "ZeroDivisionError: a bug the core never met" in rejected.detail
    assert default_codec().decode(data).event.detail == rejected.detail  # what is appended
    assert after.runs[RUN].status == sim.model.runs[RUN].status


def test_a_fact_its_schema_cannot_hold_refuses_the_input_that_caused_it() -> None:
    sim = Sim()
    sim.agent("n1", 2)
    sim.submit()

    def encode(event: Event) -> bytes:
        if isinstance(event, RunAdmitted):  # as a long past 2**63 would
            raise OverflowError("Python int too large to convert to C long")
        return ENCODE(event)

    model, out, problems = take_tick(sim.model, sim.now, plan_of, encode)
    # The tick fails as a whole, then run by run: this run fails, with the reason.
    assert [p[1] for p in problems] == [RECONCILE_FAILED]
    assert [e.event_type for _, e, _ in out] == ["RunFinished", "RunManifestPublished"]
    assert "OverflowError" in out[0][1].reason  # type: ignore[attr-defined]
    assert model.runs[RUN].status.value == "Failed"
    # An input is refused with FACT_INVALID when a fact it causes cannot be encoded.
    sub = sim.ev.submitted(spec_digest="sha256:y", world_size=2, dataset_id=None, run_id="r2")

    def no_submissions(event: Event) -> bytes:
        if event.event_type == "RunSubmitted":
            raise OverflowError("too large")
        return ENCODE(event)

    after, out, problem = take_input(model, sub, sub.TOPIC, sim.now, plan_of, no_submissions)
    assert problem is not None and problem[1] == FACT_INVALID
    assert [e.reason for _, e, _ in out] == [FACT_INVALID]  # type: ignore[attr-defined]
    assert after.tracked("r2") is None


def test_a_run_whose_reconcile_raises_fails_and_every_other_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim = Sim()
    sim.agent("n1", 4)
    sim.submit()
    sim.send(sim.ev.submitted(spec_digest="sha256:z", world_size=2, dataset_id=None,
                              run_id="healthy"))
    real = run_decide.decide

    def decide(run, world):  # type: ignore[no-untyped-def]
        if run.state.run_id == RUN:
            raise KeyError("members")
        return real(run, world)

    monkeypatch.setattr("controller.reconcile.decide", decide)
    model, out, problems = take_tick(sim.model, sim.now, plan_of, ENCODE)
    assert problems == [(RUN, RECONCILE_FAILED, "KeyError: 'members'")]
    assert model.runs[RUN].status.value == "Failed"
    healthy = [e.event_type for _, e, _ in out if e.run_id == "healthy"]
    assert "RunAdmitted" in healthy and "GenerationStarted" in healthy
    # The failed run is finished: the next tick does not visit it again.
    assert RUN not in model.due()


def test_a_spec_that_cannot_be_planned_fails_its_run_instead_of_the_controller() -> None:
    def plan_raises(_: object) -> object:
        raise OverflowError("cannot convert float infinity to integer")

    sim = Sim()
    sim.agent("n1", 2)
    model, out, problem = take_input(
        Model(since=0), sim.ev.submitted(spec_digest="sha256:x", world_size=2, dataset_id=None),
        "runledger.requests", NOW, plan_raises, ENCODE)  # type: ignore[arg-type]
    assert problem is None and [e.event_type for _, e, _ in out] == ["RunSubmitted"]
    model, out, _ = take_tick(model, NOW, plan_raises, ENCODE)  # type: ignore[arg-type]
    (finished,) = [e for _, e, _ in out if isinstance(e, RunFinished)]
    assert finished.outcome == "failed" and "OverflowError" in finished.reason
