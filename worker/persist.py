"""Async checkpointing: an immutable host copy now, the write in the background.

``stage`` copies every tensor of the state to fresh CPU memory (and every
other value deeply), so later optimizer steps can never leak into what is
persisted. ``StagingPool`` does the same into host buffers kept from an
earlier checkpoint whose write has finished: allocating and first-touching a
fresh copy of the whole state was most of the training stall (README,
Performance), and a buffer is never handed out while a write still reads it.
On CUDA the buffers are pinned and the copies are asynchronous, synchronised
once. The copy goes into a bounded backlog that one background thread drains
in order, running the whole commit protocol per item (``worker.jobs.JobLoop``,
the loop the tier copier runs on too); host memory is bounded by ``backlog``
staged copies, which the pool keeps for reuse. A failure in the background is
kept and raised on the training thread at its next call, never swallowed, and
the writes queued behind it are dropped (their copies go back to the pool).

Tested in tests/worker/test_persist.py.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from worker.jobs import JobLoop

Signature = tuple[tuple[tuple[int, ...], torch.dtype, bool], ...]


def _poolable(t: torch.Tensor) -> bool:
    """Plain dense tensors only; anything else (sparse, subclasses) is copied afresh."""
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided


def _leaves(value: Any) -> Iterator[torch.Tensor]:
    """The poolable tensors of a nested state, in the order ``_rebuild`` consumes them."""
    if isinstance(value, torch.Tensor):
        if _poolable(value):
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)


def _fresh(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", copy=True)


def _rebuild(value: Any, buffers: Iterator[torch.Tensor]) -> Any:
    """A deep copy of ``value`` with each poolable tensor replaced by the next of
    ``buffers`` (already holding its values) and every other tensor copied afresh."""
    if isinstance(value, torch.Tensor):
        return next(buffers) if _poolable(value) else _fresh(value)
    if isinstance(value, dict):
        return {k: _rebuild(v, buffers) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebuild(v, buffers) for v in value]
    if isinstance(value, tuple):
        return tuple(_rebuild(v, buffers) for v in value)
    return copy.deepcopy(value)


def stage(value: Any) -> Any:
    """A deep, CPU-resident, independent copy of a (nested) state dict."""
    return _rebuild(value, (_fresh(t) for t in _leaves(value)))


@dataclass(eq=False)
class _Slot:
    signature: Signature
    buffers: list[torch.Tensor]


@dataclass(eq=False)
class Staged:
    """A staged copy; ``value`` is immutable until it goes back to its pool."""

    value: Any
    slot: _Slot | None = field(default=None, repr=False)


class StagingPool:
    """Host buffers for staged copies, reused once the write that read them is done.

    A slot matches a state with the same tensors (shape, dtype, on CUDA or not,
    in order); a state of another shape gets fresh buffers and the old slot is
    dropped. At most ``keep`` free slots are held.
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._free: list[_Slot] = []
        self._lock = threading.Lock()

    def stage(self, value: Any) -> Staged:
        leaves = list(_leaves(value))
        signature: Signature = tuple((tuple(t.shape), t.dtype, t.is_cuda) for t in leaves)
        slot = self._take(signature)
        if slot is None:
            slot = _Slot(signature, [torch.empty(shape, dtype=dtype, pin_memory=cuda)
                                     for shape, dtype, cuda in signature])
        on_cuda = False
        with torch.no_grad():
            for buf, t in zip(slot.buffers, leaves, strict=True):
                buf.copy_(t.detach(), non_blocking=t.is_cuda)
                on_cuda |= t.is_cuda
        if on_cuda:
            torch.cuda.synchronize()  # the copies were queued; the step must not race them
        return Staged(_rebuild(value, iter(slot.buffers)), slot)

    def release(self, staged: Staged) -> None:
        """The write of ``staged`` is over (done or abandoned): its buffers may be reused."""
        slot, staged.slot, staged.value = staged.slot, None, None
        if slot is None:
            return
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append(slot)

    def clear(self) -> None:
        """Let the free buffers go (the pool's owner is closing)."""
        with self._lock:
            self._free.clear()

    @property
    def free(self) -> int:
        with self._lock:
            return len(self._free)

    def _take(self, signature: Signature) -> _Slot | None:
        with self._lock:
            for i, slot in enumerate(self._free):
                if slot.signature == signature:
                    return self._free.pop(i)
            self._free.clear()  # another shape: the old buffers will not fit again
            return None


def nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(nbytes(v) for v in value)
    return 0


# A job and the staged copy it writes (None: it writes no pooled copy).
_Write = tuple[Callable[[], None], Staged | None]


def _write(write: _Write) -> None:
    write[0]()


class Persister:
    """One background thread running ``job()`` for each submitted item, in order
    (a :class:`~worker.jobs.JobLoop`), with the pool its staged copies come from."""

    def __init__(self, backlog: int) -> None:
        self.backlog = backlog
        self.staging = StagingPool(keep=backlog)
        self._jobs: JobLoop[_Write] = JobLoop("rl-persist", _write, release=self._release)

    @property
    def pending(self) -> int:
        """Staged copies alive: queued plus the one being written."""
        return self._jobs.pending

    def submit(self, job: Callable[[], None], staged: Staged | None = None) -> None:
        """Queue ``job``; ``staged`` (what it writes) goes back to the pool once it has run."""
        self.check()
        self._jobs.submit((job, staged))

    def wait_for_room(self) -> None:
        """Block until fewer than ``backlog`` copies are alive (the delay policy)."""
        self._jobs.wait_below(self.backlog)

    def drain(self) -> None:
        self._jobs.drain()

    def check(self) -> None:
        """Raise the background failure, once, on the caller's thread."""
        self._jobs.check()

    def close(self) -> None:
        self._jobs.close()
        self.staging.clear()

    def _release(self, write: _Write) -> None:
        # Run, failed or dropped behind a failure: its buffers may be reused either way.
        staged = write[1]
        if staged is not None:
            self.staging.release(staged)
