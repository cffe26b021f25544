"""The emitter: facts folded as they are emitted, commands and kept copies not folded again."""

from __future__ import annotations

from controller.emitter import PRODUCER, Emitter
from events.model import GroupStopCommanded, Header, RunCancelled
from events.state import Status
from events.topics import COMMANDS, RUNS
from tests.controller.test_reconcile import plan_of, running
from tests.events.builders import Ev

NOW = 2_000_000


def test_a_fact_is_folded_when_emitted_a_command_and_a_kept_report_are_not() -> None:
    sim = running()
    state = sim.state
    em = Emitter(sim.model, NOW, plan_of)
    stop = GroupStopCommanded(header=em.header(state.run_id, 1, "c"), command_id="c",
                              node="n1", reason="r")
    em.emit(COMMANDS, stop)
    beat = Ev(state.run_id).heartbeat(1, "r0", step=0, node="n1", at=NOW, event_id="b",
                                      producer="w")
    em.keep(beat)
    assert em.draft.get(state.run_id).state == state  # type: ignore[union-attr]
    cancelled = RunCancelled(header=em.header(state.run_id, 1, "x"), principal="p", reason="r")
    em.emit(RUNS, cancelled)
    assert em.draft.get(state.run_id).state.status == Status.CANCELLED  # type: ignore[union-attr]
    model, out = em.result()
    assert out[:3] == [(COMMANDS, stop), (RUNS, beat), (RUNS, cancelled)]
    assert [e.event_type for _, e in out[3:]] == ["RunManifestPublished"]  # after the end
    assert state.run_id not in model.live and model.runs[state.run_id].rejections == 0
    assert sim.model.runs[state.run_id] == state  # the model it started from is untouched


def test_a_rejection_names_the_input_and_the_run_s_generation() -> None:
    sim = running()
    em = Emitter(sim.model, NOW, plan_of)
    for run, gen in ((sim.state.run_id, 1), ("ghost", 0)):
        beat = Ev(run).heartbeat(7, "r0", step=0, node="n1", at=1, event_id=f"in/{run}",
                                 producer="w")
        em.reject(beat, "why", "detail")
        rejected = em.out[-1][1]
        assert rejected.header == Header(f"in/{run}/WriteRejected", run, gen, NOW, PRODUCER,
                                         f"in/{run}")
    model, _ = em.result()
    assert model.runs[sim.state.run_id].rejections == 1
