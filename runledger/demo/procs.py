"""The demo's OS processes: long-running ``runledger`` services and one-shot CLI calls.

:class:`Services` starts the controller, the projector and the agent as
``python -m runledger.cli ...`` subprocesses, each in its own session with its
output in a log file, and stops exactly those again (SIGTERM to the process
group, SIGKILL after a grace period). Workers are the agent's children in
sessions of their own, so a worker that outlives its agent is found by what
makes it ours (its cwd is our agent's work dir and the agent put a logical id
in its environment) and killed by pid. :func:`cli` runs one command to the end.

Tested in tests/e2e/test_demo.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runledger.errors import RunledgerError

CLI = (sys.executable, "-m", "runledger.cli")


class DemoError(RunledgerError):
    """Something the demo needed did not happen; the message names it and the log to read."""


@dataclass(slots=True)
class Service:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


class Services:
    """The long-running processes one demo started, in start order."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.started: list[Service] = []

    def start(self, name: str, args: Sequence[str], log: Path,
              env: Mapping[str, str] | None = None) -> Service:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            # A session of its own: a Ctrl-C at the terminal reaches only the
            # demo, which then stops the services in order (agent first).
            proc = subprocess.Popen([*CLI, *args], env=dict(env or self.env), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        service = Service(name, proc, log)
        self.started.append(service)
        return service

    def check_alive(self) -> None:
        """Raise :class:`DemoError` naming the first service that has exited."""
        for s in self.started:
            code = s.proc.poll()
            if code is not None:
                raise DemoError(f"the {s.name} exited with status {code}; its log: {s.log}\n"
                                f"{tail(s.log)}")

    def stop(self, name: str, grace_s: float = 15.0) -> int | None:
        """Stop one service (SIGTERM, then SIGKILL after ``grace_s``); its exit status."""
        for s in self.started:
            if s.name == name:
                return _stop(s.proc, grace_s)
        return None

    def stop_all(self, grace_s: float = 15.0) -> None:
        # The agent first: it stops its workers and reports their exits while
        # the controller still listens.
        for s in sorted(self.started, key=lambda s: s.name != "agent"):
            _stop(s.proc, grace_s)


def _stop(proc: subprocess.Popen[bytes], grace_s: float) -> int:
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
    return proc.wait()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)  # the service's own session: pgid == its pid


def kill_workers(agent_dir: Path) -> list[int]:
    """SIGKILL the live workers our agent launched (cwd in ``agent_dir``); their pids."""
    root = agent_dir.resolve()
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            cwd = Path(os.readlink(entry / "cwd"))
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        if (cwd == root or root in cwd.parents) and b"\0RUNLEDGER_LOGICAL_ID=" in b"\0" + environ:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except ProcessLookupError:
                pass
    return killed


def cli(args: Sequence[str], env: Mapping[str, str], timeout_s: float = 300.0
        ) -> subprocess.CompletedProcess[str]:
    """Run ``runledger ARGS`` to the end with output captured."""
    try:
        return subprocess.run([*CLI, *args], env=dict(env), text=True, capture_output=True,
                              timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise DemoError(f"`runledger {' '.join(args)}` did not finish within {timeout_s:.0f} s"
                        ) from None


def cli_ok(args: Sequence[str], env: Mapping[str, str], timeout_s: float = 300.0) -> str:
    """``cli``, where a non-zero exit is a :class:`DemoError` carrying the command's stderr."""
    done = cli(args, env, timeout_s)
    if done.returncode != 0:
        raise DemoError(f"`runledger {' '.join(args)}` exited with status {done.returncode}:\n"
                        f"{done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log, indented, for an error message."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])
