"""One background thread running jobs in submission order: the worker's job loop.

The asynchronous checkpoint writer (``worker.persist.Persister``) and the tier
copier (``worker.tiers.Replicator``) both hand slow storage work to a thread of
their own and must never let it fail silently. :class:`JobLoop` is that loop,
said once:

- ``submit`` queues an item; one daemon thread runs ``run(item)`` for each, in
  submission order, one at a time.
- A failure (any ``BaseException``, of an item or of the thread's start hook)
  is kept and raised on the caller's thread, once, by the next
  :meth:`~JobLoop.check` (also at the end of :meth:`~JobLoop.drain` and
  :meth:`~JobLoop.wait_below`). The items queued behind it are dropped: each
  builds on the one before (a checkpoint chain, a copy order), so running them
  would hide the gap. The loop itself goes on with later submissions.
- ``release(item)`` is called once for every item the loop is done with: after
  it ran (whether it succeeded or failed), or when a failure dropped it. That is
  where an item's resources go back (a staged host copy to its pool). The loop
  drops its own reference to the item before it says it is idle, so a caller
  that drains finds nothing kept alive here.
- :meth:`~JobLoop.close` lets the thread finish what is queued, then joins it.

Tested in tests/worker/test_jobs.py.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

# How long a waiting caller sleeps between looks at a deadline; changes wake it sooner.
_POLL_S = 0.1
# How long close() waits for the thread to finish the queue.
JOIN_S = 30.0


def _keep(_item: object) -> None:
    """The default release: the item holds nothing to give back."""


def _nothing() -> None:
    """The default start hook."""


class JobLoop(Generic[T]):
    """One daemon thread running ``run(item)`` for each submitted item, in order."""

    def __init__(self, name: str, run: Callable[[T], None], *,
                 release: Callable[[T], None] = _keep,
                 on_start: Callable[[], None] = _nothing,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``name`` names the thread; ``on_start`` runs first on it (its priority, say);
        ``clock`` measures :meth:`drain`'s timeout."""
        self._run_one = run
        self._release = release
        self._on_start = on_start
        self._clock = clock
        self._queue: deque[T] = deque()
        self._running: list[T] = []  # the item being run: none or one
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._stop = False
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def submit(self, item: T) -> None:
        """Queue ``item`` behind every item submitted before it."""
        with self._cond:
            self._queue.append(item)
            self._cond.notify_all()

    def items(self) -> list[T]:
        """The items not yet done: the one running (if any) first, then the queue in order."""
        with self._cond:
            return [*self._running, *self._queue]

    @property
    def pending(self) -> int:
        """Items not yet done: queued plus the one running."""
        with self._cond:
            return len(self._queue) + len(self._running)

    def check(self) -> None:
        """Raise the background failure, once, on the caller's thread."""
        with self._cond:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def wait_below(self, limit: int) -> None:
        """Block until fewer than ``limit`` items are pending, or a failure is kept; then
        :meth:`check`."""
        with self._cond:
            while len(self._queue) + len(self._running) >= limit and self._error is None:
                self._cond.wait(_POLL_S)
        self.check()

    def drain(self, timeout_s: float | None = None) -> None:
        """Block until every item submitted so far is done (run, or dropped after a
        failure) or ``timeout_s`` passed on the clock; then :meth:`check`."""
        deadline = None if timeout_s is None else self._clock() + timeout_s
        with self._cond:
            while self._queue or self._running:
                if deadline is not None and self._clock() > deadline:
                    break
                self._cond.wait(_POLL_S)
        self.check()

    def close(self, join_s: float = JOIN_S) -> None:
        """Stop once the queue is empty (what is queued still runs) and join the thread.
        A failure still kept is left for :meth:`check`."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self.thread.join(join_s)

    def _loop(self) -> None:
        try:
            self._on_start()
        except BaseException as exc:  # a failed start hook is no silent failure either
            with self._cond:
                self._error = exc
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if not self._queue:
                    return
                item = self._queue.popleft()
                self._running.append(item)
            dropped: list[T] = []
            try:
                self._run_one(item)
            except BaseException as exc:  # kept for the caller's thread
                with self._cond:
                    self._error = exc
                    dropped = list(self._queue)
                    self._queue.clear()  # later items would build on a broken one
            finally:
                self._done(item, dropped)
                # Drop every reference to the items (and what their jobs hold, a staged
                # host copy say) before saying they are done: a caller that drains and
                # then frees must find nothing kept alive here while the thread waits.
                del item, dropped
                with self._cond:
                    self._running.clear()
                    self._cond.notify_all()

    def _done(self, item: T, dropped: list[T]) -> None:
        """Release the items dropped behind a failure, then the one that ran (in a frame
        of its own: no loop variable outlives it)."""
        for other in dropped:
            self._release(other)
        self._release(item)
