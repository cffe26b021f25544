"""The one exit-status policy of ``runledger`` (``runledger.errors.EXIT_STATUS``, applied by
``runledger.cli``), through the real console script in a subprocess.

Every package's root error is raised by a command added to the real app for the
test; a few real commands show the same policy without it. The Ctrl-C test tails
the session's broker and is marked ``kafka``.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.service import FENCED_EXIT
from events.kafka.clients import EventProducer
from events.topics import ALL, REPORTS
from runledger.errors import EXIT_STATUS, ControllerFenced, exit_status
from tests.events.builders import Ev

# The real app and main, plus one command that raises the error its argument names.
RAISER = """
import sys
from agent.errors import AgentError
from controller.errors import ControllerError
from dataplane.errors import DataPlaneError
from events.errors import EventsError
from queries.errors import QueryError
from runledger import cli, errors
from runledger.demo.procs import DemoError
from worker.errors import WorkerError

KINDS = {k.__name__: k for k in (
    AgentError, ControllerError, DataPlaneError, EventsError, QueryError, WorkerError, DemoError,
    errors.RunledgerError, errors.UsageError, errors.Interrupted, errors.ControllerFenced,
    errors.StackError, KeyboardInterrupt, ValueError)}


@cli.app.command("raise")
def raise_(kind: str) -> None:
    raise KINDS[kind](f"what went wrong, said by {kind}")


cli.main()
"""

POLICY = [
    ("EventsError", 1), ("AgentError", 1), ("ControllerError", 1), ("DataPlaneError", 1),
    ("WorkerError", 1), ("QueryError", 1), ("RunledgerError", 1), ("StackError", 1),
    ("DemoError", 1), ("UsageError", 2), ("ControllerFenced", 3), ("Interrupted", 130),
]


def run(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNLEDGER_BOOTSTRAP"}
    head = ["-c", code] if code is not None else ["-m", "runledger.cli"]
    return subprocess.run([sys.executable, *head, *args], capture_output=True, text=True,
                          timeout=120, env=env, check=False)


@pytest.mark.parametrize(("kind", "status"), POLICY)
def test_each_root_error_is_one_line_and_its_status(kind: str, status: int) -> None:
    done = run("raise", kind, code=RAISER)
    assert (done.returncode, done.stdout) == (status, "")
    assert done.stderr == f"runledger: what went wrong, said by {kind}\n"


def test_ctrl_c_in_a_command_is_130_and_says_interrupted() -> None:
    done = run("raise", "KeyboardInterrupt", code=RAISER)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "runledger: interrupted\n")


def test_any_other_error_is_a_bug_and_keeps_its_traceback() -> None:
    done = run("raise", "ValueError", code=RAISER)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and not done.stderr.startswith("runledger: ")
    assert done.stderr.rstrip().endswith("ValueError: what went wrong, said by ValueError")


def test_the_fenced_status_is_the_controllers() -> None:
    assert exit_status(ControllerFenced("x")) == FENCED_EXIT
    assert [status for _, status in EXIT_STATUS].count(FENCED_EXIT) == 1


def test_real_commands_follow_the_policy(tmp_path: Path) -> None:
    usage = run("events", "dump", "--topic", "nope")
    assert (usage.returncode, usage.stdout) == (2, "")
    assert usage.stderr == f"runledger: unknown topic 'nope'; one of {', '.join(ALL)}\n"
    bad = run("interval", "--cost", "0", "--mtbf", "6h", "--restore", "1")
    assert (bad.returncode, bad.stderr) == (1, "runledger: --cost: must be positive, got '0'\n")
    unset = run("status", "some-run")  # an EventsError: no bootstrap address
    assert unset.returncode == 1
    assert unset.stderr.startswith("runledger: no Kafka bootstrap address")
    # It says every way to give one; "is the broker up?" would only repeat them (#34).
    assert "is the broker up" not in unset.stderr and unset.stderr.count("\n") == 1
    missing = tmp_path / "none.duckdb"
    query = run("report", "r", "--html", str(tmp_path / "r.html"), "--db", str(missing))
    assert (query.returncode, query.stderr.splitlines()) == (
        1, [f"runledger: no projection at {missing}; run `runledger project --db {missing}`"
            " first"])
    typer_usage = run("no-such-command")
    assert typer_usage.returncode == 2 and "No such command" in typer_usage.stderr
    # `runledger controller --node-silence-s S` (docs/operating.md, "A large fleet"):
    # refused before it connects, naming the range and why.
    silence = run("controller", "--unsigned", "--node-silence-s", "0.5")
    assert (silence.returncode, silence.stdout) == (2, "")
    assert silence.stderr == ("runledger: --node-silence-s must be 1 to 600 seconds (got 0.5): "
                              "three of the agents' heartbeat intervals\n")


def test_a_usage_error_is_one_line_naming_the_fix_with_status_2() -> None:
    """Typer's usage errors speak as every other error does: one line, no box."""
    for args, said in ((["no-such-command"], "No such command 'no-such-command'"),
                       (["status"], "Missing argument 'run'"),
                       (["status", "r", "--bogus"], "No such option: --bogus"),
                       (["stack", "no-such-verb"], "No such command 'no-such-verb'")):
        done = run(*args)
        assert (done.returncode, done.stdout) == (2, ""), args
        [line] = done.stderr.splitlines()
        where = "runledger " + " ".join(a for a in args[:1] if a != "no-such-command")
        where = where.strip()
        assert line.startswith(f"runledger: {said} (in `{where}`)"), (args, line)
        assert line.endswith(f"`{where} --help` says what it takes"), line
    grouped = run("stack")  # a group without its command: its help, as before
    assert grouped.returncode == 2 and "up" in grouped.stdout + grouped.stderr


@pytest.mark.kafka
def test_ctrl_c_ends_a_tail_with_130(bootstrap: str, run_id: str) -> None:
    beat = Ev(run_id).heartbeat(1, "r0", step=1, node="n", at=int(time.time() * 1000),
                                event_id=f"{run_id}/hb")
    producer = EventProducer(bootstrap)
    producer.send(REPORTS, beat)
    producer.flush()
    # PYTHONFAULTHANDLER: a tail that does not end is made to say where it is stuck.
    env = {**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap, "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runledger.cli", "events", "tail", "--topic", REPORTS, "--run",
         run_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the tail printed nothing within 60 s"
        assert f"run={run_id}" in proc.stdout.readline()  # inside the command now
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"the tail did not end within 120 s of Ctrl-C:\n{err[-6000:]}")
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130
    assert err.splitlines()[-1:] == ["runledger: interrupted"] and "Traceback" not in err


def test_a_ctrl_c_swallowed_on_its_way_up_still_ends_a_following_command() -> None:
    """librdkafka can swallow a KeyboardInterrupt raised in one of its callbacks; the
    watchdog of ``runledger.interrupt`` then ends the command with 130 anyway."""
    swallowing = (
        "import os, signal, time\n"
        "from runledger.interrupt import follow_ctrl_c\n"
        "follow_ctrl_c(grace_s=0.5)\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(5)\n"
        "except KeyboardInterrupt:\n"
        "    pass  # swallowed, as a C callback may\n"
        "time.sleep(120)\n"
        "print('read on after Ctrl-C')\n")
    done = subprocess.run([sys.executable, "-c", swallowing], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 130 and done.stdout == ""
    assert done.stderr.splitlines() == ["runledger: interrupted"]
