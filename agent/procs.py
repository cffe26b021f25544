"""Worker processes of one node agent: launch, terminate with a grace period, reap.

Each worker runs in its own session (so its process group id is its pid): a
stop reaches whatever the worker spawned, and a Ctrl-C at the agent's terminal
reaches only the agent, which then stops its workers in order.

Tested in tests/agent/test_service.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from agent.decide import Launch, WorkerKey
from events.workerenv import compose_environ

log = logging.getLogger("runledger.agent")

# Shell conventions for a program that could not be started at all.
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


@dataclass(frozen=True, slots=True)
class Exit:
    """A worker that ended: ``returncode`` < 0 means killed by signal ``-returncode``."""

    key: WorkerKey
    returncode: int
    causation_id: str
    pid: int | None

    @property
    def exit_code(self) -> int | None:
        return self.returncode if self.returncode >= 0 else None

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode < 0 else None


@dataclass(slots=True)
class _Proc:
    popen: subprocess.Popen[bytes]
    log_file: IO[bytes]
    causation_id: str
    kill_at: float | None = None  # monotonic deadline for SIGKILL once terminated
    killed: bool = False


class ProcessTable:
    def __init__(self, work_dir: Path, grace_s: float = 5.0,
                 base_env: Mapping[str, str] | None = None) -> None:
        self.work_dir = work_dir
        self.grace_s = grace_s
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._procs: dict[WorkerKey, _Proc] = {}
        # Launches that failed in exec: reported by the next reap like any exit.
        self._failed: list[Exit] = []

    def __len__(self) -> int:
        return len(self._procs)

    def __contains__(self, key: WorkerKey) -> bool:
        return key in self._procs

    def pids(self) -> dict[WorkerKey, int]:
        return {k: p.popen.pid for k, p in self._procs.items()}

    def launch(self, action: Launch) -> None:
        path = self.work_dir / action.log_path
        path.parent.mkdir(parents=True, exist_ok=True)
        env = compose_environ(self._base_env, action.command_env, action.worker_env)
        log_file = path.open("ab")
        try:
            popen = subprocess.Popen(
                list(action.argv), cwd=self.work_dir, env=env, stdin=subprocess.DEVNULL,
                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            )
        except OSError as exc:
            log_file.write(f"runledger agent: cannot start {action.argv!r}: {exc}\n".encode())
            log_file.close()
            code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
            log.error("%s: cannot start %r: %s", action.key, list(action.argv), exc)
            self._failed.append(Exit(action.key, code, action.causation_id, None))
            return
        self._procs[action.key] = _Proc(popen, log_file, action.causation_id)
        log.info("%s: started pid %d rank %d/%d, log %s", action.key, popen.pid,
                 action.worker_env.rank, action.worker_env.world_size, path)

    def terminate(self, key: WorkerKey, reason: str) -> None:
        proc = self._procs.get(key)
        if proc is None or proc.kill_at is not None:
            return  # already gone, or already on its way out: keep the first deadline
        log.info("%s: SIGTERM pid %d (%s)", key, proc.popen.pid, reason)
        proc.kill_at = time.monotonic() + self.grace_s
        _signal_group(proc.popen.pid, signal.SIGTERM)

    def terminate_all(self, reason: str) -> None:
        for key in list(self._procs):
            self.terminate(key, reason)

    def reap(self) -> list[Exit]:
        """Collect ended workers; SIGKILL those past their grace period."""
        out, self._failed = self._failed, []
        now = time.monotonic()
        for key, proc in list(self._procs.items()):
            rc = proc.popen.poll()
            if rc is None:
                if proc.kill_at is not None and now >= proc.kill_at and not proc.killed:
                    log.warning("%s: still alive %.1fs after SIGTERM, SIGKILL pid %d",
                                key, self.grace_s, proc.popen.pid)
                    _signal_group(proc.popen.pid, signal.SIGKILL)
                    proc.killed = True
                continue
            # The leader is gone; nothing it spawned may outlive it and hold the slot.
            _signal_group(proc.popen.pid, signal.SIGKILL)
            proc.log_file.close()
            del self._procs[key]
            out.append(Exit(key, rc, proc.causation_id, proc.popen.pid))
        return out


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    # ESRCH: the whole group has exited already.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
