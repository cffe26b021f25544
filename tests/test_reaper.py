"""tests/reaper.py: what a test run starts dies with it, even when the run is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A stand-in for a test run: it starts the reaper, then a detached grandchild in
# a session of its own (as the tests start brokers and agents), prints that
# grandchild's pid, and waits to be killed.
_RUN = """
import subprocess, sys, time
from tests import reaper
reaper.start()
child = subprocess.Popen(["sleep", "600"], start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers signal 0; its state letter says it is dead.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


def test_a_killed_test_run_takes_its_detached_processes_along() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RUNLEDGER_TEST_RUN"}
    run = subprocess.Popen([sys.executable, "-c", _RUN], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None
    child = int(run.stdout.readline())
    try:
        assert _alive(child)
        run.send_signal(signal.SIGKILL)  # no teardown runs
        run.wait(30)
        assert _wait_gone(child, 60), f"pid {child} outlived the killed test run"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_processes_of_another_test_run_are_left_alone() -> None:
    from tests import reaper

    other = subprocess.Popen(["sleep", "600"], start_new_session=True,
                             env={**os.environ, reaper.MARK: "another-run"})
    try:
        # Until the child has exec'd, /proc shows the environment it forked with
        # (this run's mark): wait for its own before asking anything of it.
        deadline = time.monotonic() + 30
        while (reaper.marked("another-run", exclude=os.getpid()) != [other.pid]
               and time.monotonic() < deadline):
            time.sleep(0.05)
        assert reaper.marked("another-run", exclude=os.getpid()) == [other.pid]
        assert reaper.reap("not-that-run", exclude=os.getpid()) == []
        assert _alive(other.pid)
        assert reaper.marked("another-run", exclude=os.getpid()) == [other.pid]
    finally:
        other.kill()
        other.wait(10)
