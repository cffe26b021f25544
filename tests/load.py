"""A saturated machine on demand: busy processes that a test starts and stops.

A GPU node's host CPU is busy while it feeds its devices (data loading,
kernel launches, the collectives' progress threads), and a record that is only
true on a quiet machine is not true. :func:`saturate` starts ``per_core``
processes for every core, each spinning in a tight loop at the same priority
as everything else the test runs, so the controller, agents and workers get a
small share of the CPU, as they would on a loaded node. The processes are
this test run's own (``tests.reaper`` kills them if the run itself dies) and
are stopped when the block ends, however it ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# The figure: load 12-30 on 2 cores. Four spinners per core keep the
# run queue at least that long (load ~ 8 on 2 cores plus the test's own work).
PER_CORE = 4
_SPIN = "while True:\n    pass\n"


@dataclass(frozen=True, slots=True)
class Load:
    cores: int
    pids: tuple[int, ...]

    def __str__(self) -> str:
        return f"{len(self.pids)} busy processes on {self.cores} cores"


def cores() -> int:
    """The cores this process may run on (a CI runner may be given fewer than it has)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextmanager
def saturate(per_core: int = PER_CORE) -> Iterator[Load]:
    """``per_core`` spinning processes per core for the block's duration."""
    n = cores()
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
             for _ in range(per_core * n)]
    try:
        yield Load(n, tuple(p.pid for p in procs))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait(30)


def busy(load: Load) -> int:
    """How many of ``load``'s processes are still spinning (the test asserts all of them)."""
    alive = 0
    for pid in load.pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        alive += state in ("R", "S")
    return alive
