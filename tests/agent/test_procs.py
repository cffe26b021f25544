"""agent/procs.py without a broker: the output tail an exit report carries, and launch checks."""

from __future__ import annotations

import sys
from pathlib import Path

from agent.decide import Launch, WorkerKey
from agent.procs import ProcessTable, tail
from events.workerenv import WorkerEnv


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
    key = WorkerKey("run-1", 1, "r0")
    env = WorkerEnv(run_id="run-1", generation=1, logical_id="r0", node="n1", world_size=1,
                    rank=0, local_rank=0, master_addr="127.0.0.1", master_port=12345,
                    bootstrap="127.0.0.1:9092", heartbeat_interval_s=1.0)
    table = ProcessTable(tmp_path / "agent")
    table.launch(Launch(key, (sys.executable, "train.py"), {}, env, "run-1/g1/r0.log", "c1",
                        str(code)))
    [failed] = table.reap()
    assert failed.exit_code == 127 and failed.pid is None
    assert failed.launch_error == f"command[1] {code}/train.py (train.py in code.workdir)" \
        " does not exist"
    assert failed.log_path == str(tmp_path / "agent" / "run-1/g1/r0.log")
    assert failed.launch_error in failed.stderr_tail
    assert len(table) == 0
