"""worker/reporter.py: per-rank step times leave the worker as one report per run of
consecutive steps; heartbeats go on while a flush waits for a slow log and through a
session's whole teardown; only a failed delivery fails a flush."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from events import beatfile
from events.kafka.clients import EventProducer
from events.model import HeartbeatRecorded, StepTimesRecorded
from events.workerenv import CheckpointEnv, WorkerEnv
from tests.events.slowlog import SlowBroker
from worker.comm import Comm
from worker.faults import Faults
from worker.reporter import Reporter, ReportError
from worker.session import Session
from worker.watcher import Watcher

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


def test_step_times_name_the_device_the_rank_steps_on() -> None:
    """StepTimesRecorded v2: the report names its device hours by what ranks said."""
    import torch

    from worker.comm import device_name

    here = device_name(ENV.local_rank)
    assert here == "cpu" if not torch.cuda.is_available() else here.startswith("cuda: ")
    reporter = Reporter(ENV, producer=None, clock=lambda: 1700000000.0)  # type: ignore[arg-type]
    reporter.step_times([(1, 100.0, 1.0)])
    assert [r.device for r in queued(reporter)] == [None]  # not told: a v1-like report
    reporter.device = here
    reporter.step_times([(2, 100.0, 1.0)])
    assert [r.device for r in queued(reporter)] == [here]


FAST = replace(ENV, heartbeat_interval_s=0.05)


def started(broker: SlowBroker) -> Reporter:
    return Reporter(FAST, producer=cast(EventProducer, broker)).start()


def test_a_slow_flush_keeps_heartbeating_and_succeeds_once_delivered() -> None:
    broker = SlowBroker()
    reporter = started(broker)
    reporter.step_times([(1, 10.0, 0.0)])
    outcome: list[BaseException | None] = []

    def flush() -> None:
        try:
            reporter.flush(timeout_s=120.0)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    flushing = threading.Thread(target=flush)
    flushing.start()
    before = broker.beats()
    assert broker.wait_beats(before + 3)  # the log is slow: the worker is still alive
    assert not outcome  # and the flush still waits
    broker.deliver.set()
    flushing.join(30)
    assert outcome == [None]
    reporter.close()


def test_a_flush_beside_a_beat_file_waits_for_its_reports_though_beats_go_on(
        tmp_path: Path) -> None:
    """Beats written to the agent's beat file are not records: a flush that counted them
    as sent ended with a report still queued, which the exit that followed lost (a CI
    run filed a failing run's generation as failing before its first step)."""
    broker = SlowBroker()
    beat_file = tmp_path / "r1.beat"
    reporter = Reporter(replace(FAST, beat_file=str(beat_file)),
                        producer=cast(EventProducer, broker)).start()
    reporter.step_times([(1, 10.0, 0.0)])
    done = threading.Event()
    flushing = threading.Thread(target=lambda: (reporter.flush(timeout_s=120.0), done.set()))
    flushing.start()
    first = beatfile.read(beat_file)
    deadline = time.monotonic() + 30
    while (now := beatfile.read(beat_file)) is None or first is None or now.seq < first.seq + 3:
        assert time.monotonic() < deadline, "the reporter stopped beating while it flushed"
        first = first or now
        time.sleep(0.02)
    assert not done.is_set()  # several beats later, the report is still not delivered
    assert broker.beats() == 0  # and every beat went to the file
    broker.deliver.set()
    flushing.join(30)
    assert done.is_set()
    reporter.close()


def test_a_failed_delivery_fails_the_flush_and_close_still_stops_the_heartbeats() -> None:
    broker = SlowBroker()
    reporter = started(broker)
    reporter.step_times([(1, 10.0, 0.0)])
    broker.failing = "Local: Message timed out"
    with pytest.raises(ReportError, match="report delivery failed: Local: Message timed out"):
        reporter.close()
    assert not reporter._thread.is_alive()


def test_close_sends_a_closing_heartbeat_before_it_stops_the_thread() -> None:
    """What follows close is the process's teardown: its last beat says so, and the
    controller then judges the member by its exit (controller.liveness)."""
    broker = SlowBroker()
    broker.deliver.set()
    reporter = started(broker)
    assert broker.wait_beats(1)
    assert not any(e.closing for e in broker.sent if isinstance(e, HeartbeatRecorded))
    reporter.close()
    beats = [e for e in broker.sent if isinstance(e, HeartbeatRecorded)]
    assert beats[-1].closing and beats[-1].logical_id == FAST.logical_id


class BlockingWatcher:
    """Its close returns once the session's heartbeats have gone on during it (or gives up)."""

    def __init__(self, broker: SlowBroker) -> None:
        self.broker = broker
        self.beat_while_closing: bool | None = None

    def close(self) -> None:
        self.beat_while_closing = self.broker.wait_beats(self.broker.beats() + 3, 10.0)


def test_a_session_heartbeats_through_its_whole_teardown_and_stops_its_reporter_last() -> None:
    broker = SlowBroker()
    broker.deliver.set()
    watcher = BlockingWatcher(broker)
    session = Session(FAST, CheckpointEnv(), comm=cast(Comm, None), reporter=started(broker),
                      watcher=cast(Watcher, watcher), faults=Faults(None, FAST.rank, 2))
    session.close()
    assert watcher.beat_while_closing is True
    assert not session.reporter._thread.is_alive()
