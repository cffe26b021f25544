"""Worker processes of one node agent: launch, terminate with a grace period, reap.

Each worker runs in its workdir (the start command's, else the agent's work
dir), with its stdout and stderr in one log file under the agent's work dir;
an exit names that file and carries its last ``TAIL_BYTES``. Before a launch
the workdir, program and script are checked (``events.launch``): one that
cannot start is an exit with ``launch_error`` set, never a crash. With an
``--allow`` list, the program is then resolved with the worker's own
environment (``agent.allow``): one outside the list is such an exit too, code
125 (``not_allowed``), and an allowed one is run by the absolute path that
was checked.

Each worker runs in its own session (so its process group id is its pid): a
stop reaches whatever the worker spawned, and a Ctrl-C at the agent's terminal
reaches only the agent, which then stops its workers in order.

Tested in tests/agent/test_procs.py and tests/agent/test_service.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from agent.allow import program_problem
from agent.applied import STATE_DIR
from agent.decide import REJECTED_EXIT_CODE, Launch, WorkerKey
from events import runkeys
from events.launch import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, launch_problem
from events.signing import SigningKey
from events.workerenv import compose_environ

log = logging.getLogger("runledger.agent")

# The output an exit report carries: enough for a traceback, small for the log.
TAIL_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Exit:
    """A worker that ended: ``returncode`` < 0 means killed by signal ``-returncode``."""

    key: WorkerKey
    returncode: int
    causation_id: str
    pid: int | None
    log_path: str = ""
    stderr_tail: str = ""
    launch_error: str = ""

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
    log_path: Path
    causation_id: str
    kill_at: float | None = None  # monotonic deadline for SIGKILL once terminated
    killed: bool = False


class ProcessTable:
    def __init__(self, work_dir: Path, grace_s: float = 5.0,
                 base_env: Mapping[str, str] | None = None, *,
                 allowed: tuple[str, ...] = (), node: str = "",
                 node_key: Callable[[], SigningKey | None] = lambda: None) -> None:
        self.work_dir = work_dir
        # The node's key, which certifies each run's key for its workers (events.runkeys);
        # asked at each launch: the agent learns it after it is built (an enrollment).
        self.node_key = node_key
        self.grace_s = grace_s
        # The real paths of the programs workers may run (agent.allow); empty: any.
        self.allowed = allowed
        self.node = node
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
        path = (self.work_dir / action.log_path).absolute()
        path.parent.mkdir(parents=True, exist_ok=True)
        env = compose_environ(self._base_env, action.command_env, action.worker_env)
        env.pop(runkeys.ENV, None)  # only ever the one this agent issued, below
        node_key = self.node_key()
        if node_key is not None:
            env[runkeys.ENV] = str(self._run_key(node_key, action.worker_env.run_id,
                                                 action.worker_env.generation))
        cwd = action.workdir or str(self.work_dir.absolute())
        log_file = path.open("ab")
        problem = launch_problem(action.argv, cwd, env.get("PATH", os.defpath))
        if problem is not None:
            self._launch_failed(action, path, log_file, problem.exit_code, problem.message)
            return
        argv = list(action.argv)
        if self.allowed:
            # Judged on the environment the worker gets (the spec's env.PATH applied),
            # then run by the very file judged: nothing looks PATH up again.
            program, refused = program_problem(argv[0], cwd, env.get("PATH", os.defpath),
                                               self.allowed, self.node)
            if refused is not None:
                self._launch_failed(action, path, log_file, REJECTED_EXIT_CODE,
                                    f"the agent on {self.node} refused the start: {refused}")
                return
            argv[0] = program
        try:
            popen = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            )
        except OSError as exc:
            code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
            self._launch_failed(action, path, log_file, code,
                                f"cannot start {list(action.argv)!r} in {cwd}: {exc}")
            return
        self._procs[action.key] = _Proc(popen, log_file, path, action.causation_id)
        log.info("%s: started pid %d rank %d/%d in %s, log %s", action.key, popen.pid,
                 action.worker_env.rank, action.worker_env.world_size, cwd, path)

    def _run_key(self, node_key: SigningKey, run_id: str, generation: int) -> Path:
        """The file of the run key this node's workers of ``run_id`` generation ``generation``
        sign with: issued once (a restarted agent, a second rank reuse it), 0600 in a 0700
        directory of the agent's work dir; one certified by an older node key is replaced."""
        where = self.work_dir.absolute() / STATE_DIR / "runkeys"
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = where / f"{run_id}.g{generation}.json"
        if path.exists():
            try:
                if runkeys.RunKey.load(path).cert.node_key_id == node_key.key_id:
                    return path
            except runkeys.RunKeyError as exc:
                log.warning("%s; issuing a new one", exc)
            path.unlink()
        runkeys.RunKey.issue(node_key, run_id, generation, self.node).save(path)
        return path

    def _launch_failed(self, action: Launch, path: Path, log_file: IO[bytes], code: int,
                       message: str) -> None:
        """Report a worker that never started: ``message`` names the path or field."""
        log_file.write(f"runledger agent: launch failed: {message}\n".encode())
        log_file.close()
        log.error("%s: launch failed: %s", action.key, message)
        self._failed.append(Exit(action.key, code, action.causation_id, None, str(path),
                                 tail(path), message))

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
            out.append(Exit(key, rc, proc.causation_id, proc.popen.pid, str(proc.log_path),
                            tail(proc.log_path)))
        return out


def tail(path: Path, limit: int = TAIL_BYTES) -> str:
    """The last at most ``limit`` bytes of a log, from a line start, as text.

    Cut at a line (or, for one long line, a UTF-8 character) boundary, so the
    text is valid UTF-8 and starts where a line does; bytes that are not UTF-8
    come out as U+FFFD.
    """
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read(limit)
    except OSError:
        return ""
    if size > limit:
        newline = data.find(b"\n")
        if 0 <= newline < len(data) - 1:
            data = data[newline + 1:]
        else:
            while data and data[0] & 0xC0 == 0x80:  # a continuation byte: mid-character
                data = data[1:]
    return data.decode("utf-8", errors="replace")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    # ESRCH: the whole group has exited already.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
