"""controller/exits.py: the evidence of a generation's exits, reset by each new generation."""

from __future__ import annotations

from controller import exits
from tests.events.builders import Ev


def test_exits_keep_their_evidence_and_whether_a_step_came_first() -> None:
    ev = Ev("run-1")
    seen = exits.observe(exits.EMPTY, ev.exited(1, "r0", exit_code=1, node="n1", at=7,
                                                log_path="/l/r0.log", stderr_tail="boom"))
    seen = exits.observe(seen, ev.step(1, 1))
    seen = exits.observe(seen, ev.exited(1, "r1", exit_code=3, node="n1",
                                         launch_error="command[1] x does not exist"))
    r0, r1 = seen.exits["r0"], seen.exits["r1"]
    assert (r0.exit_code, r0.at, r0.log_path, r0.stderr_tail, r0.stepped) == (
        1, 7, "/l/r0.log", "boom", False)
    assert r1.stepped and r1.launch_error == "command[1] x does not exist"
    assert exits.observe(seen, ev.generation_started(2)) == exits.EMPTY
    assert exits.observe(seen, ev.heartbeat(1, "r0")) is seen


def test_a_closing_heartbeat_marks_its_member_until_the_next_generation() -> None:
    ev = Ev("run-1")
    seen = exits.observe(exits.EMPTY, ev.heartbeat(1, "r0", closing=True))
    assert set(seen.closing) == {"r0"}
    assert exits.observe(seen, ev.heartbeat(1, "r0", closing=True)) is seen
    assert exits.observe(seen, ev.heartbeat(1, "r1")) is seen  # a plain beat marks nothing
    assert exits.observe(seen, ev.generation_started(2)) == exits.EMPTY
