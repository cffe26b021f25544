"""Every process a test run starts dies with the test run, even when it is killed.

Tests start brokers, controllers, agents and workers in sessions of their own
(``start_new_session``), so that Ctrl-C reaches only pytest and the fixtures
stop them in order. A test run that is killed outright (SIGKILL, an OOM kill, a
CI timeout) runs no fixture teardown, and those processes used to live on:
private Kafka JVMs holding ports and memory, agents still obeying commands.

:func:`start` marks this process's environment with a token that every
descendant inherits (``subprocess`` passes ``os.environ`` on, the agent passes
its environment to its workers, the stack to its JVMs), and starts a reaper
process that holds the read end of a pipe whose write end only this process
has. When this process ends, however it ends, the kernel closes the write end;
the reaper reads end-of-file and SIGKILLs every process that still carries the
token. A broker that ``make test`` started outside pytest carries no token and
is left alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

MARK = "RUNLEDGER_TEST_RUN"


def start() -> str:
    """Mark this process's descendants and start their reaper; returns the token."""
    token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.environ[MARK] = token
    read_end, write_end = os.pipe()  # both close-on-exec: no child inherits the write end
    subprocess.Popen([sys.executable, __file__, token], stdin=read_end,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)
    os.close(read_end)
    # Kept open, deliberately never closed: its closing at exit is the signal.
    _keep.append(write_end)
    return token


_keep: list[int] = []


def marked(token: str, *, exclude: int) -> list[int]:
    """Pids of the processes whose environment carries ``MARK=token``."""
    needle = f"{MARK}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == exclude:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone already, or not ours to read
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def reap(token: str, *, exclude: int, rounds: int = 10) -> list[int]:
    """SIGKILL every marked process, again until none is left (a dying agent may
    still have launched a worker); returns every pid it signalled."""
    killed: list[int] = []
    for _ in range(rounds):
        pids = marked(token, exclude=exclude)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    return killed


def _main(token: str) -> None:
    sys.stdin.buffer.read()  # returns at end-of-file: the test run has ended
    reap(token, exclude=os.getpid())


if __name__ == "__main__":
    _main(sys.argv[1])
