"""The controller's log line per appended record: decisions at INFO, routine at DEBUG."""

from __future__ import annotations

import logging

from controller.narrate import MAX_VALUE, line
from events.topics import RUNS
from tests.events.builders import Ev


def test_a_decision_is_one_info_line_naming_the_run_and_its_fields() -> None:
    ev = Ev("run-7")
    level, text = line(RUNS, ev.failure(2, action="restart", signature="worker_crash:exit=2"))
    assert level == logging.INFO and "\n" not in text
    assert text.startswith("appended FailureClassified to runledger.runs: run run-7 gen 2 ")
    assert "action=restart" in text and "signature=worker_crash:exit=2" in text
    level, text = line(RUNS, ev.queued(reason="no capacity:\nneeds 4 slots"))
    assert level == logging.INFO and "reason=no capacity: needs 4 slots" in text
    level, text = line(RUNS, ev.submitted())
    assert level == logging.INFO and "spec_json" not in text  # large: the event dump has it


def test_routine_facts_are_debug_and_long_text_is_cut() -> None:
    ev = Ev("run-7")
    level, text = line(RUNS, ev.heartbeat(1, "w0", step=5))
    assert level == logging.DEBUG and text.startswith("appended HeartbeatRecorded")
    level, text = line(RUNS, ev.finished(1, outcome="failed", reason="x" * 500))
    assert level == logging.INFO
    assert "reason=" + "x" * (MAX_VALUE - 1) + "…" in text and "x" * MAX_VALUE not in text
