"""Async checkpointing: an immutable host copy now, the write in the background.

``stage`` copies every tensor of the state to fresh CPU memory (and every
other value deeply), so later optimizer steps can never leak into what is
persisted. The copy goes into a bounded backlog that one background thread
drains in order, running the whole commit protocol per item; host memory is
bounded by ``backlog`` staged copies. A failure in the background is kept and
raised on the training thread at its next call, never swallowed.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import torch


def stage(value: Any) -> Any:
    """A deep, CPU-resident, independent copy of a (nested) state dict."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: stage(v) for k, v in value.items()}
    if isinstance(value, list):
        return [stage(v) for v in value]
    if isinstance(value, tuple):
        return tuple(stage(v) for v in value)
    return copy.deepcopy(value)


def nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(nbytes(v) for v in value)
    return 0


class Persister:
    """One background thread running ``job()`` for each submitted item, in order."""

    def __init__(self, backlog: int) -> None:
        self.backlog = backlog
        self._jobs: deque[Callable[[], None]] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="rl-persist", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Staged copies alive: queued plus the one being written."""
        with self._cond:
            return len(self._jobs) + (1 if self._busy else 0)

    def submit(self, job: Callable[[], None]) -> None:
        self.check()
        with self._cond:
            self._jobs.append(job)
            self._cond.notify_all()

    def wait_for_room(self) -> None:
        """Block until fewer than ``backlog`` copies are alive (the delay policy)."""
        with self._cond:
            while len(self._jobs) + (1 if self._busy else 0) >= self.backlog:
                if self._error is not None:
                    break
                self._cond.wait(0.1)
        self.check()

    def drain(self) -> None:
        with self._cond:
            while (self._jobs or self._busy) and self._error is None:
                self._cond.wait(0.1)
        self.check()

    def check(self) -> None:
        """Raise the background failure, once, on the caller's thread."""
        with self._cond:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(30)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._stop:
                    self._cond.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
                self._busy = True
            try:
                job()
            except BaseException as exc:  # kept for the training thread
                with self._cond:
                    self._error = exc
                    self._jobs.clear()  # later saves would build on a broken chain
            finally:
                # Drop the job (and the staged copy it holds) before going idle,
                # or a full host copy would outlive its write.
                del job
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
