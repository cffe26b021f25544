"""runledger/rehearse/trial.py without a broker: a run's worker processes found by their
environment, and what its events say (ended, newest generation). Submitting,
watching and cancelling are exercised against a real stack by `runledger pilot`'s
test."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from runledger.rehearse import trial
from tests.events.builders import Ev


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait(10)


def _sleeper(run_id: str, generation: int, logical_id: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RUNLEDGER_RUN_ID": run_id, "RUNLEDGER_GENERATION": str(generation),
           "RUNLEDGER_LOGICAL_ID": logical_id}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)


def test_worker_pids_select_by_run_generation_and_logical_id(
        workers: list[subprocess.Popen[bytes]]) -> None:
    a0 = _sleeper("trial-a", 1, "r0")
    a1 = _sleeper("trial-a", 2, "r1")
    b0 = _sleeper("trial-b", 1, "r0")
    workers.extend([a0, a1, b0])
    assert trial.worker_pids("trial-a") == sorted([a0.pid, a1.pid])
    assert trial.worker_pids("trial-a", generation=2) == [a1.pid]
    assert trial.worker_pids("trial-b", logical_id="r0") == [b0.pid]
    assert trial.worker_pids("trial-c") == []
    b0.kill()
    b0.wait(10)
    assert trial.worker_pids("trial-b") == []  # a dead worker is not found


def test_a_run_has_ended_at_its_terminal_fact() -> None:
    ev = Ev("trial-a")
    running = [ev.submitted(), ev.generation_started(1), ev.generation_started(2)]
    assert not trial.ended(running) and trial.generation(running) == 2
    assert trial.ended([*running, ev.finished(2)])
    assert trial.ended([*running, ev.cancelled(2)])
    assert trial.generation([]) == 0
    assert [e.generation for e in trial.of_type(running, "GenerationStarted")] == [1, 2]
