"""bench/cluster.py's processes: controllers, the projector and the user's commands.

Each is a real OS process started as an operator starts it (``runledger
controller``, ``runledger project``, ``runledger status``, ``runledger runs``,
``runledger audit verify``) with the stack's address in ``RUNLEDGER_BOOTSTRAP``
and the admin's credentials in ``RUNLEDGER_CREDENTIALS``. Their CPU comes from
``/proc/<pid>/stat``, their peak memory from ``VmHWM``.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench.common import REPO_ROOT
from bench.common import proc_cpu_s as cpu_s
from bench.common import proc_hwm_mb as hwm_mb

TRANSACTION_TIMEOUT_S = 10.0  # the controllers' --transaction-timeout: a faster takeover


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "runledger.cli", *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Controller:
    """One ``runledger controller`` of the group."""

    name: str  # its transactional id
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    started_at: float  # time.monotonic()
    metrics_url: str  # its --metrics page: the report -> fact histogram it keeps itself
    stopped_at: float | None = None
    peak_mb: float = float("nan")
    cpu: float = float("nan")  # seconds of CPU when it stopped

    def sample(self) -> None:
        """Its CPU and peak memory so far (kept: a killed process has none to read)."""
        if self.proc.poll() is None:
            self.cpu, self.peak_mb = cpu_s(self.proc.pid), hwm_mb(self.proc.pid)


@dataclass
class Procs:
    """The processes of one scenario, started and stopped in order."""

    env: dict[str, str]
    tmp: Path
    group: str
    signing_key: Path | None
    silence_s: float
    controllers: dict[str, Controller] = field(default_factory=dict)
    projector: subprocess.Popen[bytes] | None = None
    metrics_url: str = ""

    def controller(self, name: str) -> Controller:
        log = (self.tmp / f"{name}.log").open("wb")
        signing = ["--signing-key", str(self.signing_key)] if self.signing_key else ["--unsigned"]
        port = free_port()
        proc = subprocess.Popen(
            cli("controller", "--transactional-id", name, "--group", self.group,
                "--node-silence-s", f"{self.silence_s:g}",
                "--transaction-timeout", f"{TRANSACTION_TIMEOUT_S:g}",
                "--metrics", f"127.0.0.1:{port}", *signing),
            cwd=REPO_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        c = self.controllers[name] = Controller(name, proc, log, time.monotonic(),
                                                f"http://127.0.0.1:{port}/metrics")
        return c

    def kill(self, name: str) -> float:
        """SIGKILL, as a node's power goes: no transaction is ended, no group left."""
        c = self.controllers[name]
        c.sample()
        c.proc.send_signal(signal.SIGKILL)
        c.stopped_at = time.monotonic()
        c.proc.wait(30)
        return c.stopped_at

    def start_projector(self) -> None:
        port = free_port()
        self.metrics_url = f"http://127.0.0.1:{port}/metrics"
        self.projector = subprocess.Popen(
            cli("project", "--db", str(self.tmp / "projection.duckdb"),
                "--metrics", f"127.0.0.1:{port}"),
            cwd=REPO_ROOT, env=self.env, stdout=(self.tmp / "projector.log").open("wb"),
            stderr=subprocess.STDOUT)

    def stop_controllers(self) -> dict[str, Any]:
        """SIGTERM every controller still running; each one's CPU and peak memory."""
        out: dict[str, Any] = {}
        for c in self.controllers.values():
            c.sample()
            if c.proc.poll() is None:
                c.proc.terminate()
        for c in self.controllers.values():
            try:
                c.proc.wait(30)
            except subprocess.TimeoutExpired:
                c.proc.kill()
            if not c.log.closed:
                c.log.close()
            out[c.name] = {"cpu_s": c.cpu, "peak_rss_mb": c.peak_mb}
        return out

    def stop_projector(self) -> dict[str, Any]:
        """SIGTERM the projector; its CPU and peak memory."""
        out: dict[str, Any] = {}
        if self.projector is not None and self.projector.poll() is None:
            pid = self.projector.pid
            out["projector"] = {"cpu_s": cpu_s(pid), "peak_rss_mb": hwm_mb(pid)}
            self.projector.terminate()
            try:
                self.projector.wait(60)
            except subprocess.TimeoutExpired:
                self.projector.kill()
        return out


@dataclass(eq=False)  # a thread: hashed by identity
class Timed(threading.Thread):
    """A user's command, as a whole process, timed; its JSON answer kept."""

    argv: list[str]
    env: dict[str, str]
    took_s: float | None = None
    answer: Any = None
    error: str = ""

    def __post_init__(self) -> None:
        super().__init__(name="timed", daemon=True)

    def run(self) -> None:
        began = time.monotonic()
        done = subprocess.run(self.argv, cwd=REPO_ROOT, env=self.env, capture_output=True,
                              text=True, timeout=600, check=False)
        self.took_s = time.monotonic() - began
        try:
            self.answer = json.loads(done.stdout)
        except json.JSONDecodeError:
            self.error = f"exit {done.returncode}: {done.stderr[-2000:]}"
