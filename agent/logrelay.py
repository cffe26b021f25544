"""A worker's log, bounded on disk: the relay process between its output and its files.

The agent owns a worker's log, not the job: the worker's stdout and stderr are
one pipe, and a small relay process (this file, run as a script by
:func:`spawn`) reads that pipe and writes :class:`RotatingLog`: ``<log>`` until
it holds ``cap`` bytes, then ``<log>`` becomes ``<log>.1`` (``.1`` becomes
``.2`` and so on; the oldest, ``<log>.<keep>``, is deleted) and a new ``<log>``
begins. A worker's output thus takes at most ``(keep + 1) * cap`` bytes on
disk (by default 4 x 64 MiB); what was deleted is counted in ``<log>.dropped``
(JSON: ``dropped_bytes``, ``cap_bytes``, ``keep``), so a reader can say that
older output was dropped by the cap. The files, oldest first and the current
one last, are the suffix of everything the worker wrote, byte for byte; a
file is cut at the cap exactly, so a line may run on from one file into the
next (``agent.logfiles`` reads across them).

Why a process of its own, and not a thread in the agent: the worker must never
block or die because of its log, and a thread would die with the agent (its
workers then writing into a broken pipe) and wait on the agent's own work. The
agent keeps a copy of the pipe's reading end, so a relay that dies is only
started again (``agent.procs``). The relay does nothing but read and write
(``python -I -S``, the standard library only, ignoring SIGINT, SIGTERM and
SIGHUP, in a session of its own so no signal meant for the agent or the
worker's group reaches it); a write that fails (a full disk) loses those bytes,
said once on the relay's stderr (the agent's), and it goes on reading, so the
pipe never fills because of the disk. It ends when the pipe does: once every
process that held the worker's output has exited. An agent killed with
SIGKILL leaves its workers running (their own sessions) and their relays with
them: their output stays bounded, and each relay ends with its worker.

Exit status: 0 once the pipe ended (its end of file), 2 for bad arguments.

Tested in tests/agent/test_logrelay.py and tests/e2e/test_jobs.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

DEFAULT_CAP = 64 << 20  # bytes per file
DEFAULT_KEEP = 3  # rotated files kept besides the current one
# An agent's smallest cap and keep: rotation stays rare, and the last 4 KiB an exit
# report carries always lie in the current file and the one before it.
MIN_CAP = 64 << 10
MIN_KEEP = 1
DROPPED_SUFFIX = ".dropped"
CHUNK = 1 << 16
# What a pipe may buffer while the relay is busy (Linux: F_SETPIPE_SZ; an
# unprivileged process may ask up to /proc/sys/fs/pipe-max-size, 1 MiB by default).
PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031


def rotated(path: Path, n: int) -> Path:
    """The ``n``-th older file of the log at ``path`` (1: the newest rotated one)."""
    return path.with_name(f"{path.name}.{n}")


def dropped_file(path: Path) -> Path:
    """The file that counts what the cap deleted from the log at ``path``."""
    return path.with_name(path.name + DROPPED_SUFFIX)


def limits_problem(cap: int, keep: int) -> str | None:
    """Why an agent may not bound its workers' logs so (None: it may)."""
    if cap < MIN_CAP:
        return f"--log-cap must be at least {MIN_CAP} bytes (64 KiB), got {cap}"
    if keep < MIN_KEEP:
        return (f"--log-keep must be at least {MIN_KEEP} (a worker's last lines may lie in"
                f" the file before the current one), got {keep}")
    return None


def _say(message: str) -> None:
    try:
        sys.stderr.write(f"runledger log relay: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # nobody to tell (the agent's stderr closed): the relay goes on regardless


class RotatingLog:
    """Appends to ``path``, rotating it at ``cap`` bytes and keeping ``keep`` older files.

    Never raises on a write: bytes that cannot be written are counted in
    ``lost`` and ``on_error`` is told (once per kind of error).
    """

    def __init__(self, path: Path, cap: int = DEFAULT_CAP, keep: int = DEFAULT_KEEP,
                 on_error: Callable[[str], None] = _say) -> None:
        if cap < 1 or keep < 0:
            raise ValueError(f"a log cap must be >= 1 byte and keep >= 0, got {cap}, {keep}")
        self.path, self.cap, self.keep = path, cap, keep
        self.on_error = on_error
        self.dropped = _read_dropped(path)  # carried on when a log is appended to again
        self.lost = 0
        self._said: set[str] = set()
        self._fd: int | None = None
        self._size = 0
        self._open()

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._size >= self.cap:
                self._rotate()
            part = view[:self.cap - self._size]
            self._write_all(part)
            view = view[len(part):]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self, truncate: bool = False) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            self._fd = os.open(self.path, flags | (os.O_TRUNC if truncate else 0), 0o666)
            self._size = os.fstat(self._fd).st_size
        except OSError as exc:
            self._fd, self._size = None, 0
            self.tell("open", f"cannot open {self.path}: {exc}")

    def _write_all(self, part: memoryview) -> None:
        if self._fd is None:
            self._open()  # the directory may have come back
        while part:
            try:
                if self._fd is None:
                    raise OSError(f"{self.path} is not open")
                n = os.write(self._fd, part)
            except OSError as exc:
                self.lost += len(part)
                self.tell("write", f"cannot write {self.path} ({exc}): output lost")
                return
            self._size += n
            part = part[n:]

    def _rotate(self) -> None:
        """``<log>.<keep - 1>`` .. ``<log>`` move one place older; ``<log>.<keep>`` goes."""
        self.close()
        gone = 0
        try:
            if self.keep == 0:
                gone = _size(self.path)
                self._open(truncate=True)
            else:
                oldest = rotated(self.path, self.keep)
                size = _size(oldest)
                oldest.unlink(missing_ok=True)
                gone = size
                for n in range(self.keep - 1, 0, -1):
                    if rotated(self.path, n).exists():
                        os.replace(rotated(self.path, n), rotated(self.path, n + 1))
                os.replace(self.path, rotated(self.path, 1))
                self._open()
        except OSError as exc:
            # The bound first: start the current file again rather than let it grow.
            self.tell("rotate", f"cannot rotate {self.path} ({exc}): truncating it")
            gone += _size(self.path)
            self._open(truncate=True)
        if gone:
            self.dropped += gone
            self._write_dropped()

    def _write_dropped(self) -> None:
        target = dropped_file(self.path)
        tmp = target.with_name(target.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"dropped_bytes": self.dropped, "cap_bytes": self.cap,
                                       "keep": self.keep}) + "\n")
            os.replace(tmp, target)
        except OSError as exc:
            self.tell("dropped", f"cannot write {target}: {exc}")

    def tell(self, kind: str, message: str) -> None:
        if kind not in self._said:
            self._said.add(kind)
            self.on_error(message)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_dropped(path: Path) -> int:
    try:
        return int(json.loads(dropped_file(path).read_text())["dropped_bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def relay(fd: int, log: RotatingLog, chunk: int = CHUNK) -> None:
    """Copy what ``fd`` delivers into ``log`` until its end of file."""
    while True:
        try:
            data = os.read(fd, chunk)
        except OSError as exc:
            _say(f"cannot read the worker's output: {exc}")
            break
        if not data:
            break
        try:
            log.write(data)
        except Exception as exc:  # never stop draining: the worker would block on the pipe
            log.lost += len(data)
            log.tell("bug", f"output lost: {exc!r}")
    log.close()


def spawn(path: Path, cap: int, keep: int, read_fd: int) -> subprocess.Popen[bytes]:
    """Start a relay reading ``read_fd`` into the log at ``path`` (absolute).

    Raises ``OSError`` when it cannot start. It gets no environment of the
    worker (nothing to find it by as a worker) and no file but the pipe.
    """
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(Path(__file__).absolute()), str(cap), str(keep),
         str(path)],
        stdin=read_fd, stdout=subprocess.DEVNULL, env={}, cwd="/", start_new_session=True)


def grow_pipe(fd: int) -> None:
    """Let the pipe at ``fd`` buffer up to ``PIPE_BYTES`` (where the OS allows it)."""
    try:
        import fcntl
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, OSError):
        pass  # another OS, or above the system's limit: the default buffer


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        cap, keep, path = int(argv[0]), int(argv[1]), Path(argv[2])
        log = RotatingLog(path, cap, keep)
    except (IndexError, ValueError) as exc:
        _say(f"usage: logrelay.py CAP_BYTES KEEP PATH ({exc})")
        return 2
    relay(0, log)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
