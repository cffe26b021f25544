"""worker/reporter.py: per-rank step times leave the worker as one report per run of
consecutive steps."""

from __future__ import annotations

from typing import Any

from events.model import StepTimesRecorded
from events.workerenv import WorkerEnv
from worker.reporter import Reporter

ENV = WorkerEnv(run_id="run-1", generation=2, logical_id="r1", node="n1", world_size=2, rank=1,
                local_rank=1, master_addr="127.0.0.1", master_port=12345,
                bootstrap="127.0.0.1:1", heartbeat_interval_s=1.0)


def queued(reporter: Reporter) -> list[Any]:
    out = []
    while not reporter._queue.empty():
        out.append(reporter._queue.get_nowait())
    return out


def test_consecutive_steps_are_batched_and_a_gap_starts_a_new_report() -> None:
    reporter = Reporter(ENV, producer=None, clock=lambda: 1700000000.0)  # type: ignore[arg-type]
    reporter.step_times([(5, 100.0, 1.0), (6, 110.0, 2.0), (9, 90.0, 0.0), (10, 95.0, 0.5)])
    reports = [e for e in queued(reporter) if isinstance(e, StepTimesRecorded)]
    assert [(r.first_step, r.step_time_ms, r.input_wait_ms) for r in reports] == [
        (5, (100.0, 110.0), (1.0, 2.0)), (9, (90.0, 95.0), (0.0, 0.5))]
    assert {r.logical_id for r in reports} == {"r1"} and {r.generation for r in reports} == {2}
    # Deterministic ids: a retried report is recognisably the same one.
    assert [r.header.event_id for r in reports] == [
        "run-1/g2/r1/steptimes/5", "run-1/g2/r1/steptimes/9"]
    reporter.step_times([])
    assert queued(reporter) == []
