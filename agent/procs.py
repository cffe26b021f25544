"""Worker processes of one node agent: launch, terminate with a grace period, reap.

Each worker runs in its workdir (the start command's, else the agent's work
dir), its stdout and stderr one pipe that a relay process (``agent.logrelay``,
in a session of its own) writes to the worker's log file under the agent's
work dir, rotated at ``log_cap`` bytes with ``log_keep`` older files kept, so
a chatty worker's output stays bounded on disk. The agent keeps a copy of the
pipe's reading end: a relay that dies while its worker runs is started again
on it, and the worker, meanwhile, at worst waits on a full pipe (never a broken
one). Once the worker has exited, its exit waits (at most ``DRAIN_S``) for the
relay to write what was still in the pipe; then it names the log file and
carries its last ``TAIL_BYTES``, read across the rotated files
(``agent.logfiles``). A relay that cannot start at all leaves the worker
writing the file directly, unbounded, as before there was one (logged). Before a launch
the workdir, program and script are checked (``events.launch``): one that
cannot start is an exit with ``launch_error`` set, never a crash. With an
``--allow`` list, the program is then resolved with the worker's own
environment (``agent.allow``): one outside the list is such an exit too, code
125 (``not_allowed``), and an allowed one is run by the absolute path that
was checked.

Each worker runs in its own session (so its process group id is its pid): a
stop reaches whatever the worker spawned, and a Ctrl-C at the agent's terminal
reaches only the agent, which then stops its workers in order.

Tested in tests/agent/test_procs.py, tests/agent/test_service.py and tests/e2e/test_jobs.py.
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

from agent import logrelay
from agent.allow import program_problem
from agent.applied import STATE_DIR
from agent.decide import REJECTED_EXIT_CODE, Launch, WorkerKey
from agent.logfiles import TAIL_BYTES, tail
from events.kafka import runkeys
from events.launch import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, launch_problem
from events.signed.signing import SigningKey
from events.workerenv import compose_environ

log = logging.getLogger("runledger.agent")

__all__ = ["TAIL_BYTES", "Exit", "ProcessTable", "tail"]

# How long an ended worker's exit waits for its relay to write the rest of the pipe
# (it ends at once, unless a process that escaped the worker's group holds the pipe).
DRAIN_S = 5.0
# How many times a relay that died while its worker ran is started again.
RELAY_RESTARTS = 3


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
    log_path: Path
    causation_id: str
    # The relay writing its output (None: it writes its file directly) and the agent's
    # copy of the pipe's reading end, for a relay started again (-1: none).
    relay: subprocess.Popen[bytes] | None = None
    pipe: int = -1
    kill_at: float | None = None  # monotonic deadline for SIGKILL once terminated
    killed: bool = False
    ended: int | None = None  # its return code, once it ended (its relay draining)
    drain_until: float = 0.0
    restarts: int = 0
    # Where it writes its heartbeats and how often (events.beatfile); "" : it sends its own.
    beat_file: str = ""
    beat_interval_s: float = 0.0


class ProcessTable:
    def __init__(self, work_dir: Path, grace_s: float = 5.0,
                 base_env: Mapping[str, str] | None = None, *,
                 allowed: tuple[str, ...] = (), node: str = "",
                 node_key: Callable[[], SigningKey | None] = lambda: None,
                 log_cap: int = logrelay.DEFAULT_CAP,
                 log_keep: int = logrelay.DEFAULT_KEEP) -> None:
        self.work_dir = work_dir
        # Each worker's log: rotated at log_cap bytes, log_keep older files kept.
        self.log_cap, self.log_keep = log_cap, log_keep
        # The node's key, which certifies each run's key for its workers (events.kafka.runkeys);
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

    def beating(self) -> list[tuple[WorkerKey, str, float]]:
        """(key, beat file, interval) of each live worker that beats through this agent.
        Called from the agent's beat thread: a copy of the table (atomic under the GIL)."""
        procs = dict(self._procs)
        return [(k, p.beat_file, p.beat_interval_s) for k, p in procs.items()
                if p.beat_file and p.ended is None]

    def pids(self) -> dict[WorkerKey, int]:
        return {k: p.popen.pid for k, p in self._procs.items()}

    def log_paths(self) -> list[Path]:
        """The log files of the workers not yet reaped; safe from another thread (a scrape):
        the table is copied in one step before it is read."""
        return [p.log_path for p in list(self._procs.values())]

    def launch(self, action: Launch) -> None:
        path = (self.work_dir / action.log_path).absolute()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()  # there from the launch on: `runledger logs` finds it at once
        env = compose_environ(self._base_env, action.command_env, action.worker_env)
        env.pop(runkeys.ENV, None)  # only ever the one this agent issued, below
        node_key = self.node_key()
        if node_key is not None:
            env[runkeys.ENV] = str(self._run_key(node_key, action.worker_env.run_id,
                                                 action.worker_env.generation))
        cwd = action.workdir or str(self.work_dir.absolute())
        problem = launch_problem(action.argv, cwd, env.get("PATH", os.defpath))
        if problem is not None:
            self._launch_failed(action, path, problem.exit_code, problem.message)
            return
        argv = list(action.argv)
        if self.allowed:
            # Judged on the environment the worker gets (the spec's env.PATH applied),
            # then run by the very file judged: nothing looks PATH up again.
            program, refused = program_problem(argv[0], cwd, env.get("PATH", os.defpath),
                                               self.allowed, self.node)
            if refused is not None:
                self._launch_failed(action, path, REJECTED_EXIT_CODE,
                                    f"the agent on {self.node} refused the start: {refused}")
                return
            argv[0] = program
        output = _Output.open(path, self.log_cap, self.log_keep)
        try:
            popen = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=output.worker_end, stderr=subprocess.STDOUT, start_new_session=True,
            )
        except OSError as exc:
            output.abandon()
            code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
            self._launch_failed(action, path, code,
                                f"cannot start {list(action.argv)!r} in {cwd}: {exc}")
            return
        output.started()
        self._procs[action.key] = _Proc(popen, path, action.causation_id, output.relay,
                                        output.pipe, beat_file=action.worker_env.beat_file or "",
                                        beat_interval_s=action.worker_env.heartbeat_interval_s)
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

    def _launch_failed(self, action: Launch, path: Path, code: int, message: str) -> None:
        """Report a worker that never started: ``message`` names the path or field."""
        with path.open("ab") as log_file:
            log_file.write(f"runledger agent: launch failed: {message}\n".encode())
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
        """Collect ended workers (their output written); SIGKILL those past their grace."""
        out, self._failed = self._failed, []
        now = time.monotonic()
        for key, proc in list(self._procs.items()):
            if proc.ended is None:
                rc = proc.popen.poll()
                if rc is None:
                    self._overdue(key, proc, now)
                    self._keep_relaying(key, proc)
                    continue
                # The leader is gone; nothing it spawned may outlive it and hold the slot
                # (nor the pipe: the relay reads to its end once they are all gone).
                _signal_group(proc.popen.pid, signal.SIGKILL)
                proc.ended, proc.drain_until = rc, now + DRAIN_S
                if proc.relay is not None:  # it reads the pipe's end at once, as a rule
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.relay.wait(0.05)
            if proc.relay is not None and proc.relay.poll() is None:
                if now < proc.drain_until:
                    continue  # its last words are still on their way to the file
                log.warning("%s: its log relay (pid %d) still reads %.0fs after the worker"
                            " ended (a process outside its group holds its output?); the"
                            " exit goes with the output written so far", key, proc.relay.pid,
                            DRAIN_S)
            if proc.pipe >= 0:
                os.close(proc.pipe)
            del self._procs[key]
            out.append(Exit(key, proc.ended, proc.causation_id, proc.popen.pid,
                            str(proc.log_path), tail(proc.log_path)))
        return out

    def _overdue(self, key: WorkerKey, proc: _Proc, now: float) -> None:
        if proc.kill_at is not None and now >= proc.kill_at and not proc.killed:
            log.warning("%s: still alive %.1fs after SIGTERM, SIGKILL pid %d",
                        key, self.grace_s, proc.popen.pid)
            _signal_group(proc.popen.pid, signal.SIGKILL)
            proc.killed = True

    def _keep_relaying(self, key: WorkerKey, proc: _Proc) -> None:
        """Start a relay again on the pipe when it died while its worker runs (one that
        ended with 0 read the pipe's end: the worker closed its output)."""
        if proc.relay is None or proc.relay.poll() in (None, 0) or proc.pipe < 0 \
                or proc.restarts >= RELAY_RESTARTS:
            return
        proc.restarts += 1
        log.error("%s: its log relay (pid %d) died (%s); starting another (%d of %d)", key,
                  proc.relay.pid, proc.relay.returncode, proc.restarts, RELAY_RESTARTS)
        try:
            proc.relay = logrelay.spawn(proc.log_path, self.log_cap, self.log_keep, proc.pipe)
        except OSError as exc:
            log.error("%s: cannot start a log relay: %s", key, exc)


@dataclass(slots=True)
class _Output:
    """Where a worker about to start writes: a pipe into a relay, or (when no relay can
    start) its log file itself."""

    worker_end: int
    relay: subprocess.Popen[bytes] | None
    pipe: int  # the agent's copy of the reading end (-1: none)

    @classmethod
    def open(cls, path: Path, cap: int, keep: int) -> _Output:
        read_end, write_end = os.pipe()
        logrelay.grow_pipe(write_end)
        try:
            relay = logrelay.spawn(path, cap, keep, read_end)
        except OSError as exc:
            os.close(read_end)
            os.close(write_end)
            log.error("cannot start a log relay (%s): %s is written directly, unbounded", exc,
                      path)
            return cls(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                               0o666), None, -1)
        return cls(write_end, relay, read_end)

    def started(self) -> None:
        """The worker has its copy of the writing end: the agent lets its own go."""
        os.close(self.worker_end)

    def abandon(self) -> None:
        """The worker did not start: the relay reads the pipe's end and exits."""
        os.close(self.worker_end)
        if self.pipe >= 0:
            os.close(self.pipe)
        if self.relay is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.relay.wait(DRAIN_S)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    # ESRCH: the whole group has exited already.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
