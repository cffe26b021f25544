"""No replay of an operator's request (controller.replays), through the controller's pure core.

Each attack of issue #33 as the log would carry it: the same request (the same
event id and bytes) taken a second time. It is refused as ``replayed`` in every
window of the run, after a restart of the controller too (the memory is folded
from the facts), and node operations apply only in order (``superseded``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from controller.model import replay
from controller.rejections import WINDOW_MS
from controller.replays import REPLAYED, SUPERSEDED, epoch_of, request_of
from events.model import Event, NodeCordoned, NodeUncordoned, WriteRejected, node_key
from events.state import Status
from events.topics import RUNS
from tests.controller.test_nodes import FLAKY
from tests.controller.test_reconcile import PLAN, RUN, Sim, running, types


def refusal(out: list[tuple[str, Event]]) -> str:
    (kind,) = types(out)
    assert kind == "WriteRejected", types(out)
    record = out[0][1]
    assert isinstance(record, WriteRejected)
    return record.reason


def again(sim: Sim, event: Event) -> str:
    """The refusal of ``event`` sent once more, past the window in which a repeated
    rejection is only counted (controller.rejections), so each one is a record."""
    sim.now += WINDOW_MS
    return refusal(sim.send(event))


def restarted(sim: Sim) -> Sim:
    """The same controller after a restart: its model rebuilt from runledger.runs alone."""
    facts = [e for topic, e in sim.log if topic == RUNS]
    return Sim(model=replay(facts, sim.now, sim.plan_of), log=list(sim.log), plan=sim.plan,
               ev=sim.ev)


def test_a_replayed_uncordon_after_a_newer_cordon_leaves_the_node_cordoned() -> None:
    sim = running(FLAKY)
    cordon = sim.ev.node_request("cordon", "n1", epoch=0)
    assert types(sim.send(cordon)) == ["NodeCordoned"]
    uncordon = sim.ev.node_request("uncordon", "n1", epoch=1)
    assert types(sim.send(uncordon)) == ["NodeUncordoned"]
    recordon = sim.ev.node_request("cordon", "n1", epoch=2)
    assert types(sim.send(recordon)) == ["NodeCordoned"]
    # Another operator, who can read runledger.requests, sends the uncordon again.
    assert refusal(sim.send(uncordon)) == REPLAYED
    assert sim.model.inventory.nodes["n1"].cordon == "cordon"
    # The same after a controller restart: the memory is the log's.
    sim = restarted(sim)
    assert again(sim, uncordon) == REPLAYED
    assert again(sim, cordon) == REPLAYED
    assert sim.model.inventory.nodes["n1"].cordon == "cordon"
    assert sum(isinstance(e, NodeUncordoned) for _, e in sim.log) == 1


def test_node_operations_apply_in_order_an_older_view_is_superseded() -> None:
    sim = running(FLAKY)
    assert types(sim.send(sim.ev.node_request("cordon", "n1", epoch=0))) == ["NodeCordoned"]
    # Decided before that cordon was applied (it saw epoch 0): not applied over it.
    stale = sim.ev.node_request("uncordon", "n1", epoch=0)
    out = sim.send(stale)
    assert refusal(out) == SUPERSEDED
    assert "epoch 0" in out[0][1].detail and "runledger nodes" in out[0][1].detail  # type: ignore[attr-defined]
    assert sim.model.inventory.nodes["n1"].cordon == "cordon"
    facts = [e for _, e in sim.log if isinstance(e, NodeCordoned | NodeUncordoned)]
    assert epoch_of("n1", facts) == sim.model.node_epochs["n1"] == 1
    # The current view is applied; a request that says no epoch (a v1 client) is judged by
    # its id alone.
    assert types(sim.send(sim.ev.node_request("uncordon", "n1", epoch=1))) == ["NodeUncordoned"]
    assert types(sim.send(sim.ev.node_request("cordon", "n1"))) == ["NodeCordoned"]


def test_a_replayed_resume_after_the_run_resumed_and_paused_again_is_refused() -> None:
    plan = replace(PLAN, alerts=replace(PLAN.alerts, actions={"non_finite_loss": "pause"}))
    sim = running(plan)

    def nan_step() -> None:
        out = sim.send(sim.ev.step(sim.state.generation, sim.state.step + 1, tokens=1,
                                   loss_tokens=1, step_time_ms=1.0, input_wait_ms=0.0,
                                   loss=math.nan))
        assert "RunPaused" in types(out)

    nan_step()
    resume = sim.ev.resume_requested(0, principal="oncall")
    assert types(sim.send(resume)) == ["RunResumed"]
    sim.agent("n1", 2)
    sim.tick()
    sim.beat(sim.state.generation)
    sim.tick()
    sim.send(sim.ev.step(sim.state.generation, sim.state.step + 1, tokens=1, loss_tokens=1,
                         step_time_ms=1.0, input_wait_ms=0.0, loss=1.0))
    nan_step()  # paused again, for a new reason
    assert sim.state.paused
    assert refusal(sim.send(resume)) == REPLAYED
    assert sim.state.paused  # still held: only a new resume lifts this pause
    assert again(restarted(sim), resume) == REPLAYED


def test_a_replayed_request_is_refused_in_every_window_of_the_run() -> None:
    sim = running(FLAKY)
    forged = sim.ev.cancel_requested(1, principal="mallory")  # not in the cancel authority
    assert refusal(sim.send(forged)) == "unauthorized"
    assert refusal(sim.send(forged)) == REPLAYED  # running
    sim.step()
    sim.send(sim.ev.exited(sim.state.generation, "r0", exit_code=1, node="n1"))
    sim.tick()
    assert sim.state.status == Status.RECOVERING
    assert again(sim, forged) == REPLAYED  # recovering
    cancel = sim.ev.cancel_requested(sim.state.generation, principal="alice")
    assert "RunCancelled" in types(sim.send(cancel))
    assert sim.state.status == Status.CANCELLED
    assert again(sim, cancel) == REPLAYED  # finished: a replayed cancel
    assert again(sim, forged) == REPLAYED
    # queued: a run waiting for slots
    queued = Sim()
    queued.submit()
    queued.tick()
    assert queued.state.status == Status.QUEUED
    late = queued.ev.cancel_requested(0, principal="mallory")
    assert refusal(queued.send(late)) == "unauthorized"
    assert refusal(queued.send(late)) == REPLAYED
    assert again(restarted(queued), late) == REPLAYED


def test_a_replayed_submit_of_an_existing_run_is_refused_and_changes_nothing() -> None:
    sim = Sim()
    submit = sim.ev.submitted(spec_digest="sha256:x", world_size=2, dataset_id=None)
    assert types(sim.send(submit)) == ["RunSubmitted"]
    before = sim.model.runs[RUN]
    out = sim.send(submit)
    assert refusal(out) == REPLAYED
    after = sim.model.runs[RUN]
    assert (after.status, after.generation, after.principal) == (
        before.status, before.generation, before.principal)
    # The same run id under another request id (a copy re-sent with a new header):
    # a run is submitted once.
    other = replace(submit, header=replace(submit.header, event_id="another-id"))
    sim.now += WINDOW_MS
    out = sim.send(other)
    assert refusal(out) == REPLAYED and "submitted once" in out[0][1].detail  # type: ignore[attr-defined]
    assert again(restarted(sim), submit) == REPLAYED


def test_the_facts_that_take_a_request_name_it() -> None:
    ev = Sim().ev
    submit = ev.submitted()
    assert request_of(submit) == submit.header.event_id
    assert request_of(ev.cancelled(1, causation_id="req-1")) == "req-1"
    assert request_of(ev.uncordoned("n1", run_id=node_key("n1"), causation_id="req-2")) == "req-2"
    assert request_of(ev.rejected(1, rejected_event_type="ResumeRequested",
                                  rejected_event_id="req-3")) == "req-3"
    # A rejected report, or a fact no request caused, takes no request.
    assert request_of(ev.rejected(1, rejected_event_type="HeartbeatRecorded",
                                  rejected_event_id="hb")) is None
    assert request_of(ev.step(1, 1)) is None
