"""The test worker against a real broker: steps, heartbeats and each failure mode; and
in process, over a slow log: a slow flush heartbeats on, only a failed delivery fails."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest

from agent.testworker import (
    CRASH_EXIT_CODE,
    TERM_EXIT_CODE,
    ReportsUndelivered,
    Worker,
    loss_at,
    parse_args,
)
from events import beatfile
from events.kafka.clients import EventProducer
from events.model import HeartbeatRecorded, StepCommitted
from events.workerenv import WorkerEnv
from tests.agent.tail import Tail
from tests.events.slowlog import SlowBroker

pytestmark = pytest.mark.kafka

Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def tail(bootstrap: str) -> Iterator[Tail]:
    t = Tail(bootstrap)
    yield t
    t.close()


@pytest.fixture
def spawn(bootstrap: str, run_id: str) -> Iterator[Spawn]:
    """Start test workers with a hand-made contract; every one is killed at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str, generation: int = 1, rank: int = 0, world_size: int = 1,
              resume_step: int | None = None) -> subprocess.Popen[bytes]:
        env = WorkerEnv(run_id=run_id, generation=generation, logical_id=f"r{rank}",
                        node="test-node", world_size=world_size, rank=rank, local_rank=rank,
                        master_addr="127.0.0.1", master_port=29500, bootstrap=bootstrap,
                        heartbeat_interval_s=0.2, resume_step=resume_step)
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent.testworker", *args],
            env={**os.environ, **env.to_environ()}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _steps(tail: Tail, run_id: str) -> list[int]:
    return [e.step for e in tail.of(run_id, StepCommitted)]


def test_runs_its_steps_and_reports_them_deterministically(
    spawn: Spawn, tail: Tail, run_id: str
) -> None:
    proc = spawn("--steps", "3", "--step-time", "0.05")
    assert proc.wait(timeout=30) == 0
    assert proc.stdout is not None and proc.stdout.read() == b""  # writes nothing else
    tail.wait_for("3 steps", lambda: len(_steps(tail, run_id)) == 3)
    steps = tail.of(run_id, StepCommitted)
    assert [s.step for s in steps] == [1, 2, 3]
    assert [s.header.event_id for s in steps] == [f"{run_id}/g1/r0/step/{n}" for n in (1, 2, 3)]
    assert all(s.header.producer == f"worker/{run_id}/r0" and s.generation == 1 for s in steps)
    assert [s.loss for s in steps] == [loss_at(n) for n in (1, 2, 3)]
    assert all(s.tokens == 1024 and s.loss_tokens == 1000 and s.step_time_ms >= 50 for s in steps)
    beats = tail.of(run_id, HeartbeatRecorded)
    assert beats and beats[0].header.event_id == f"{run_id}/g1/r0/hb/1"
    assert all(b.logical_id == "r0" and b.node == "test-node" for b in beats)


def test_resumes_after_the_resume_step_and_only_rank_0_reports_steps(
    spawn: Spawn, tail: Tail, run_id: str
) -> None:
    rank0 = spawn("--steps", "4", "--step-time", "0.05", generation=2, resume_step=2,
                  world_size=2)
    rank1 = spawn("--steps", "4", "--step-time", "0.05", generation=2, resume_step=2,
                  world_size=2, rank=1)
    assert rank0.wait(timeout=30) == 0 and rank1.wait(timeout=30) == 0
    tail.wait_for("steps 3 and 4", lambda: len(_steps(tail, run_id)) == 2)
    tail.wait_for("rank 1 heartbeats",
                  lambda: any(b.logical_id == "r1" for b in tail.of(run_id, HeartbeatRecorded)))
    assert _steps(tail, run_id) == [3, 4]
    assert {s.header.producer for s in tail.of(run_id, StepCommitted)} == {f"worker/{run_id}/r0"}
    # Heartbeats start from the resume point: progress never appears to go backwards.
    assert min(b.step for b in tail.of(run_id, HeartbeatRecorded)) == 2


def test_crash_exits_13_after_committing_the_steps_before(
    spawn: Spawn, tail: Tail, run_id: str
) -> None:
    proc = spawn("--steps", "5", "--step-time", "0.05", "--fail-mode", "crash",
                 "--fail-at-step", "3")
    assert proc.wait(timeout=30) == CRASH_EXIT_CODE
    tail.wait_for("2 steps", lambda: len(_steps(tail, run_id)) >= 2)
    tail.settle(0.5)
    assert _steps(tail, run_id) == [1, 2]


def test_fail_raises_and_exits_1(spawn: Spawn) -> None:
    proc = spawn("--steps", "5", "--step-time", "0.01", "--fail-mode", "fail",
                 "--fail-at-step", "1")
    assert proc.wait(timeout=30) == 1
    assert proc.stderr is not None
    assert b"InjectedFailure: injected failure at step 1" in proc.stderr.read()


def test_kill_ends_the_worker_by_sigkill(spawn: Spawn) -> None:
    proc = spawn("--steps", "5", "--step-time", "0.01", "--fail-mode", "kill",
                 "--fail-at-step", "1")
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert proc.stderr is not None
    assert b"testworker: killed at step 1" in proc.stderr.read()


def test_failure_only_in_the_named_generation_and_rank(spawn: Spawn) -> None:
    args = ("--steps", "2", "--step-time", "0.01", "--fail-mode", "crash",
            "--fail-at-step", "1", "--fail-generation", "1", "--fail-rank", "1")
    other_gen = spawn(*args, generation=2, rank=1, world_size=2)
    other_rank = spawn(*args, generation=1, rank=0, world_size=2)
    target = spawn(*args, generation=1, rank=1, world_size=2)
    assert other_gen.wait(timeout=30) == 0
    assert other_rank.wait(timeout=30) == 0
    assert target.wait(timeout=30) == CRASH_EXIT_CODE


def _beats_between(tail: Tail, run_id: str, seconds: float) -> int:
    before = len(tail.of(run_id, HeartbeatRecorded))
    tail.settle(seconds)
    return len(tail.of(run_id, HeartbeatRecorded)) - before


def test_stall_keeps_heartbeating_without_progress(
    spawn: Spawn, tail: Tail, run_id: str
) -> None:
    proc = spawn("--steps", "50", "--step-time", "0.05", "--fail-mode", "stall",
                 "--fail-at-step", "2")
    tail.wait_for("step 1", lambda: _steps(tail, run_id) == [1])
    tail.settle(0.3)  # a beat sent just before the stall may still be in flight
    assert _beats_between(tail, run_id, 1.2) >= 3
    assert proc.poll() is None
    assert _steps(tail, run_id) == [1]
    assert {b.step for b in tail.of(run_id, HeartbeatRecorded)[-3:]} == {1}
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == TERM_EXIT_CODE
    assert time.monotonic() - started < 3


def test_hang_stops_heartbeats_and_steps(spawn: Spawn, tail: Tail, run_id: str) -> None:
    proc = spawn("--steps", "50", "--step-time", "0.05", "--fail-mode", "hang",
                 "--fail-at-step", "2")
    tail.wait_for("step 1", lambda: _steps(tail, run_id) == [1])
    tail.settle(1.0)  # a beat sent just before the hang may still be in flight
    assert _beats_between(tail, run_id, 1.2) == 0
    assert proc.poll() is None  # hung, not dead
    assert _steps(tail, run_id) == [1]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == TERM_EXIT_CODE


def test_ignore_sigterm_keeps_a_zombie_reporting(spawn: Spawn, tail: Tail, run_id: str) -> None:
    proc = spawn("--steps", "100", "--step-time", "0.05", "--ignore-sigterm")
    tail.wait_for("step 1", lambda: bool(_steps(tail, run_id)))
    proc.send_signal(signal.SIGTERM)
    seen = len(_steps(tail, run_id))
    tail.wait_for("steps after SIGTERM", lambda: len(_steps(tail, run_id)) > seen + 3)
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == TERM_EXIT_CODE


def test_a_missing_variable_is_named() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNLEDGER_")}
    proc = subprocess.run([sys.executable, "-m", "agent.testworker"], env=env,
                          capture_output=True, timeout=30)
    assert proc.returncode == 2
    assert b"RUNLEDGER_RUN_ID is not set" in proc.stderr


def test_arguments() -> None:
    plan = parse_args(["--fail-mode", "stall", "--fail-generation", "3"])
    assert (plan.steps, plan.fail_mode, plan.fail_at_step, plan.fail_generation) == (
        10, "stall", 2, 3)
    assert parse_args([]).fail_generation is None
    assert parse_args(["--fail-generation", "any"]).fail_rank is None
    with pytest.raises(SystemExit):
        parse_args(["--fail-mode", "explode"])
    with pytest.raises(SystemExit):
        parse_args(["--fail-generation", "soon"])


def test_the_modes_for_alert_tests_are_off_by_default() -> None:
    env = WorkerEnv(run_id="run-1", generation=1, logical_id="r1", node="n", world_size=2, rank=1,
                    local_rank=1, master_addr="127.0.0.1", master_port=1, bootstrap="x",
                    heartbeat_interval_s=1.0)
    plain = parse_args([])
    assert (plain.extra_s(env), plain.input_wait_ms, plain.step_times_every) == (0.0, 0.0, 0)
    assert plain.loss(50) == loss_at(50)
    p = parse_args(["--slow-rank", "1", "--slow-ms", "200", "--nan-from-step", "5",
                    "--input-wait-ms", "30", "--step-times-every", "4"])
    assert p.extra_s(env) == 0.2 and p.extra_s(replace(env, rank=0)) == 0.0
    assert p.loss(4) == loss_at(4) and math.isnan(p.loss(5)) and math.isnan(p.loss(9))
    assert (p.input_wait_ms, p.step_times_every) == (30.0, 4)


def _in_process(broker: SlowBroker, steps: int = 2,
                beat_file: str | None = None) -> tuple[Worker, list[object]]:
    """A rank-0 worker run in a thread over ``broker``; the list gets its code or error."""
    env = WorkerEnv(run_id="run-1", generation=1, logical_id="r0", node="n", world_size=1,
                    rank=0, local_rank=0, master_addr="127.0.0.1", master_port=1,
                    bootstrap="slow:9092", heartbeat_interval_s=0.05, beat_file=beat_file)
    worker = Worker(env, parse_args(["--steps", str(steps), "--step-time", "0"]),
                    cast(EventProducer, broker))
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(worker.run())
        except Exception as exc:
            outcome.append(exc)

    threading.Thread(target=run, daemon=True).start()
    return worker, outcome


def _settled(outcome: list[object], timeout_s: float = 30.0) -> object:
    deadline = time.monotonic() + timeout_s
    while not outcome and time.monotonic() < deadline:
        time.sleep(0.01)
    assert outcome, "the worker did not finish"
    return outcome[0]


def test_a_slow_flush_heartbeats_on_and_ends_in_exit_0_once_the_log_takes_the_reports() -> None:
    """A broker slower than any fixed flush bound (a failover, a loaded machine): the
    worker waits, alive, instead of exiting 1 with every step done."""
    broker = SlowBroker()
    _worker, outcome = _in_process(broker)
    assert broker.wait_beats(5)  # its first step's flush is waiting; the beats go on
    assert not outcome
    broker.deliver.set()
    assert _settled(outcome) == 0
    assert [e.step for e in broker.sent if isinstance(e, StepCommitted)] == [1, 2]


def test_beats_to_a_beat_file_do_not_end_a_flush_its_step_still_waits_on(
        tmp_path: Path) -> None:
    """The agent's beat file takes the beats; a flush counted them as sent and moved on
    with the step report queued (a failing step's exit then lost it, and a CI run filed
    the generation as failing before its first step: job:start_exit)."""
    broker = SlowBroker()
    beat_file = tmp_path / "r0.beat"
    _worker, outcome = _in_process(broker, beat_file=str(beat_file))
    deadline = time.monotonic() + 30
    while (beat := beatfile.read(beat_file)) is None or beat.seq < 5:
        assert time.monotonic() < deadline, "the worker stopped beating while it flushed"
        time.sleep(0.02)
    assert not outcome  # its first step's report is not delivered: it still waits
    assert [e.step for e in broker.sent if isinstance(e, StepCommitted)] == [1]
    broker.deliver.set()
    assert _settled(outcome) == 0
    assert [e.step for e in broker.sent if isinstance(e, StepCommitted)] == [1, 2]


def test_a_failed_delivery_fails_the_worker_with_the_reason() -> None:
    broker = SlowBroker()
    broker.failing = "Broker: Topic authorization failed"
    _worker, outcome = _in_process(broker)
    failed = _settled(outcome)
    assert isinstance(failed, ReportsUndelivered)
    assert "Broker: Topic authorization failed" in str(failed)
