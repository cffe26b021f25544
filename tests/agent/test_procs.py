"""agent/procs.py without a broker: the output tail an exit report carries, launch checks, and
real workers' output through the log relay: bounded on disk, its last lines in the exit, a
relay that dies started again while its worker goes on."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from agent import logrelay
from agent.decide import Launch, WorkerKey
from agent.logfiles import chain, dropped
from agent.procs import Exit, ProcessTable, tail
from events.workerenv import WorkerEnv

KEY = WorkerKey("run-1", 1, "r0")
ENV = WorkerEnv(run_id="run-1", generation=1, logical_id="r0", node="n1", world_size=1,
                rank=0, local_rank=0, master_addr="127.0.0.1", master_port=12345,
                bootstrap="127.0.0.1:9092", heartbeat_interval_s=1.0)
CAP = 64 << 10
# 2.2 MiB of numbered lines on stdout, then the last words on stderr, and exit 3.
CHATTY = ("import sys\n"
          "for i in range(40000):\n"
          "    print(f'line {i:06d} ' + 'x' * 44)\n"
          "sys.stdout.flush()\n"
          "print('Traceback: the end', file=sys.stderr)\n"
          "sys.exit(3)\n")


def start(table: ProcessTable, tmp_path: Path, script: str) -> Path:
    table.launch(Launch(KEY, (sys.executable, "-c", script), {}, ENV, "run-1/g1/r0.log", "c1",
                        str(tmp_path)))
    return tmp_path / "agent" / "run-1/g1/r0.log"


def reap_one(table: ProcessTable, timeout: float = 60) -> Exit:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = table.reap()
        if done:
            return done[0]
        time.sleep(0.05)
    raise AssertionError(f"no exit in {timeout}s")


def test_the_exit_tail_is_bounded_utf8_and_starts_at_a_line(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_bytes(("é" * 3000 + "\n").encode() + b"line two\nTraceback: boom\n")
    assert tail(log, 64) == "line two\nTraceback: boom\n"
    log.write_bytes("é".encode() * 100)  # one long line: cut at a character boundary
    assert tail(log, 63) == "é" * 31
    assert tail(tmp_path / "missing.log") == ""


def test_a_missing_script_is_a_launch_failure_naming_the_path(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    table = ProcessTable(tmp_path / "agent")
    table.launch(Launch(KEY, (sys.executable, "train.py"), {}, ENV, "run-1/g1/r0.log", "c1",
                        str(code)))
    [failed] = table.reap()
    assert failed.exit_code == 127 and failed.pid is None
    assert failed.launch_error == f"command[1] {code}/train.py (train.py in code.workdir)" \
        " does not exist"
    assert failed.log_path == str(tmp_path / "agent" / "run-1/g1/r0.log")
    assert failed.launch_error in failed.stderr_tail
    assert len(table) == 0


def test_a_chatty_worker_s_log_stays_bounded_and_its_exit_carries_its_last_words(
        tmp_path: Path) -> None:
    table = ProcessTable(tmp_path / "agent", log_cap=CAP, log_keep=2)
    path = start(table, tmp_path, CHATTY)
    ended = reap_one(table)
    assert ended.exit_code == 3 and ended.log_path == str(path)
    assert ended.stderr_tail.endswith("line 039999 " + "x" * 44 + "\nTraceback: the end\n")
    files = chain(path)
    assert [p.name for p in files] == ["r0.log.2", "r0.log.1", "r0.log"]
    assert all(p.stat().st_size <= CAP for p in files)
    kept = b"".join(p.read_bytes() for p in files)
    assert len(kept) <= 3 * CAP
    written = b"".join(f"line {i:06d} {'x' * 44}\n".encode() for i in range(40000)) \
        + b"Traceback: the end\n"
    assert written.endswith(kept)
    cut = dropped(path)
    assert cut is not None and cut.bytes == len(written) - len(kept)
    assert len(table) == 0


def test_a_relay_that_dies_is_started_again_and_the_worker_never_notices(
        tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = ("import os, sys, time\n"
              "print('before', flush=True)\n"
              f"while not os.path.exists({str(go)!r}):\n"
              "    time.sleep(0.02)\n"
              "for i in range(20000):\n"  # more than a pipe holds: the new relay reads it
              "    print(f'after {i}', flush=True)\n")
    table = ProcessTable(tmp_path / "agent", log_cap=CAP, log_keep=3)
    path = start(table, tmp_path, script)
    deadline = time.monotonic() + 30
    while b"before" not in path.read_bytes():
        assert time.monotonic() < deadline, "the worker's first line never came"
        time.sleep(0.02)
    relay = table._procs[KEY].relay
    assert relay is not None
    os.kill(relay.pid, signal.SIGKILL)
    relay.wait(10)
    assert table.reap() == []  # the worker runs on; the table starts another relay
    assert table._procs[KEY].relay is not relay
    go.touch()
    ended = reap_one(table)
    assert (ended.exit_code, ended.signal) == (0, None)  # no SIGPIPE, no BrokenPipeError
    assert ended.stderr_tail.endswith("after 19999\n")
    assert b"before\n" in b"".join(p.read_bytes() for p in chain(path))


def test_without_a_relay_the_worker_writes_its_file_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def cannot(*_: object) -> None:
        raise OSError("no more processes")
    monkeypatch.setattr(logrelay, "spawn", cannot)
    table = ProcessTable(tmp_path / "agent", log_cap=CAP, log_keep=1)
    path = start(table, tmp_path, "print('still logged')")
    ended = reap_one(table)
    assert ended.exit_code == 0 and ended.stderr_tail == "still logged\n"
    assert chain(path) == [path]
