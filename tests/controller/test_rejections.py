"""Bounded rejections: a zombie's flood costs one record per key per window, and none is lost."""

from __future__ import annotations

from controller.model import replay
from controller.reconcile import handle, tick
from controller.rejections import WINDOW_MS
from events.model import WriteRejected
from events.topics import RUNS
from tests.controller.test_reconcile import RUN, plan_of, running


def _rejections(out: list) -> list[WriteRejected]:  # type: ignore[type-arg]
    return [e for topic, e in out if topic == RUNS and isinstance(e, WriteRejected)]


def test_a_zombie_flood_is_one_record_then_one_per_window_and_every_rejection_is_counted() -> None:
    sim = running()
    start = sim.now
    recorded: list[WriteRejected] = []
    # 300 stale reports from one orphaned member over 25 s (generation 0 never ran).
    for i in range(300):
        sim.now = start + i * 83
        recorded += _rejections(sim.send(sim.ev.heartbeat(0, "r0", step=0, node="n1")))
        recorded += _rejections(sim.tick())
    assert len(recorded) == 1 and recorded[0].repeats == 0
    assert (recorded[0].reason, recorded[0].member, recorded[0].rejected_generation) == (
        "stale_generation", "r0", 0)
    # The window closes: one record stands for the 299 suppressed.
    sim.now = start + WINDOW_MS
    closing = _rejections(sim.tick())
    assert [(r.reason, r.repeats) for r in closing] == [("stale_generation", 298)]
    assert sim.state.rejections == 300
    assert _rejections(sim.tick(advance_ms=WINDOW_MS)) == []  # nothing left to say


def test_each_member_and_reason_is_its_own_key() -> None:
    sim = running()
    out = sim.send(sim.ev.heartbeat(0, "r0", step=0, node="n1"))
    out += sim.send(sim.ev.heartbeat(0, "r1", step=0, node="n1"))
    out += sim.send(sim.ev.heartbeat(1, "w9", step=0, node="n1"))  # not a member
    out += sim.send(sim.ev.heartbeat(0, "r0", step=0, node="n1"))  # r0 again: counted only
    assert [(r.member, r.reason) for r in _rejections(out)] == [
        ("r0", "stale_generation"), ("r1", "stale_generation"), ("w9", "not_a_member")]


def test_forged_reports_for_runs_nobody_submitted_share_one_key() -> None:
    sim = running()
    out = []
    for i in range(50):
        forged = sim.ev.heartbeat(1, "r0", step=0, node="n1", run_id=f"forged-{i}")
        out += handle(sim.model, forged, sim.now, plan_of)[1]
        sim.model = handle(sim.model, forged, sim.now, plan_of)[0]
    assert len(_rejections(out)) == 1


def test_a_restarted_controller_keeps_the_window_of_what_is_on_the_log() -> None:
    sim = running()
    sim.send(sim.ev.heartbeat(0, "r0", step=0, node="n1"))
    model = replay((e for topic, e in sim.log if topic == RUNS), sim.now, plan_of)
    again = handle(model, sim.ev.heartbeat(0, "r0", step=0, node="n1"), sim.now + 1, plan_of)[1]
    assert _rejections(again) == []
    later = handle(model, sim.ev.heartbeat(0, "r0", step=0, node="n1"), sim.now + WINDOW_MS,
                   plan_of)[1]
    assert [r.repeats for r in _rejections(later)] == [0]
    assert tick(model, sim.now, plan_of)[0].runs[RUN].rejections == 1
