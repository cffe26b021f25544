"""Bounded parallel fetch with in-order emission, and the metrics it keeps.

Items are numbered in logical order and fetched on a thread pool; results
wait in a reorder buffer until every earlier item has been taken. An item
may stand for several units (the loader submits a chunk of sequences as one
item, so a thread hand-off costs once per chunk, not once per row); the bound
counts the units of everything submitted and not yet taken (running,
done-but-early, and the head), and their bytes, so a slow object stalls submission
(backpressure) instead of growing memory. Randomness never depends on which
thread finishes first: fetches are pure functions of their plan.

Tested in tests/dataplane/test_loader.py.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

P = TypeVar("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Bounds:
    items: int
    bytes: int

    def __post_init__(self) -> None:
        if self.items < 1:
            raise ValueError("the reorder buffer must hold at least one item")
        if self.bytes < 1:
            raise ValueError("the byte bound must be positive")


class Metrics:
    """Counters and a bounded latency reservoir; ``snapshot`` is what gets reported."""

    def __init__(self, reservoir: int = 4096) -> None:
        self._lock = threading.Lock()
        self._latency: deque[float] = deque(maxlen=reservoir)
        self.fetched = 0
        self.failed = 0
        self.input_wait_s = 0.0
        self.waits = 0
        self.max_depth = 0
        self.max_bytes = 0
        self.depth = 0
        self.reserved = 0
        self.head_since: float | None = None

    def fetched_in(self, seconds: float, units: int = 1) -> None:
        with self._lock:
            self._latency.append(seconds)
            self.fetched += units

    def quantiles(self) -> dict[str, float]:
        with self._lock:
            data = sorted(self._latency)
        if not data:
            return {"p50": 0.0, "p90": 0.0, "p99": 0.0}
        def pick(q: float) -> float:
            return data[min(len(data) - 1, int(q * len(data)))]

        return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99)}

    def snapshot(self, now: float) -> dict[str, float | int]:
        q = self.quantiles()
        age = 0.0 if self.head_since is None else now - self.head_since
        return {
            "fetch_p50_s": q["p50"], "fetch_p90_s": q["p90"], "fetch_p99_s": q["p99"],
            "fetched": self.fetched, "failed": self.failed, "queue_depth": self.depth,
            "queue_bytes": self.reserved, "max_queue_depth": self.max_depth,
            "max_queue_bytes": self.max_bytes, "head_age_s": age,
            "input_wait_s": self.input_wait_s, "input_waits": self.waits,
        }


class OrderedFetcher(Generic[P, R]):
    """``submit`` plans in logical order; ``take`` returns results in that same order."""

    def __init__(self, fetch: Callable[[P], R], size_of: Callable[[P], int], bounds: Bounds,
                 workers: int, metrics: Metrics | None = None,
                 units_of: Callable[[P], int] | None = None) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self._fetch = fetch
        self._size_of = size_of
        self._units_of = units_of or (lambda _: 1)
        self.bounds = bounds
        self.metrics = metrics or Metrics()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rl-fetch")
        self._pending: deque[tuple[Future[R], int, int, float]] = deque()
        self._closed = False

    def room(self, item: P) -> bool:
        """Whether ``item`` fits under both bounds now (an empty buffer always admits one)."""
        if not self._pending:
            return True
        m = self.metrics
        return (m.depth + self._units_of(item) <= self.bounds.items
                and m.reserved + self._size_of(item) <= self.bounds.bytes)

    def submit(self, item: P) -> None:
        if self._closed:
            raise RuntimeError("the fetcher is closed")
        if not self.room(item):
            raise RuntimeError("submit past the bound; call room() first")
        size = self._size_of(item)
        units = self._units_of(item)
        future = self._pool.submit(self._timed, item, units)
        m = self.metrics
        self._pending.append((future, size, units, time.monotonic()))
        m.depth += units
        m.reserved += size
        m.max_depth = max(m.max_depth, m.depth)
        m.max_bytes = max(m.max_bytes, m.reserved)

    def __len__(self) -> int:
        return len(self._pending)

    def take(self) -> R:
        """The oldest submitted item's result, waiting for it if needed."""
        future, size, units, submitted = self._pending[0]
        m = self.metrics
        m.head_since = submitted
        if not future.done():
            start = time.monotonic()
            try:
                future.exception()  # waits without raising
            finally:
                m.input_wait_s += time.monotonic() - start
                m.waits += 1
        self._pending.popleft()
        m.depth -= units
        m.reserved -= size
        m.head_since = self._pending[0][3] if self._pending else None
        return future.result()

    def drop(self) -> None:
        """Forget everything submitted (a reset); running fetches finish unobserved."""
        for future, *_ in self._pending:
            future.cancel()
        self._pending.clear()
        self.metrics.depth = 0
        self.metrics.reserved = 0
        self.metrics.head_since = None

    def close(self) -> None:
        self.drop()
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _timed(self, item: P, units: int) -> R:
        start = time.monotonic()
        try:
            out = self._fetch(item)
        except BaseException:
            self.metrics.failed += 1
            raise
        self.metrics.fetched_in(time.monotonic() - start, units)
        return out
