"""Report to fact: how long a report waits before what the controller made of it is in the log.

For each report the controller takes in (a record of ``runledger.reports``:
heartbeats, steps, checkpoint proposals, worker exits, agents' offers), the
time from its ``header.occurred_at`` (the sender's clock, ms) to the moment the
transaction that carries its consequences (the facts and commands its cycle
produced, and the report's consumed offset) committed. The service observes
it (``controller.service``), on the loop thread, right after the commit;
``controller.metrics`` exposes it as the histogram
``runledger_controller_report_to_fact_seconds``. A clock ahead of the
controller's would read as a negative wait: it counts as 0.

:class:`Histogram` is thread-safe: the loop observes, scrape threads read a
consistent :meth:`Histogram.snapshot`. :func:`report_delays` is pure.

Tested in tests/controller/test_metrics.py.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from events.record import Record
from events.topics import REPORTS

# Upper bounds (seconds) from 1 ms to a minute: a healthy loop commits within a tick
# (0.25 s by default) plus the transaction; tens of seconds mean a stuck controller,
# a lagging consumer or a sender's clock far behind.
BUCKETS_S: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True, slots=True)
class Counts:
    """A histogram as one scrape reads it: cumulative counts per upper bound."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]  # per bound, then +Inf (== count)
    sum: float

    @property
    def count(self) -> int:
        return self.cumulative[-1]


class Histogram:
    """Observations in fixed buckets, their sum and count; safe across threads."""

    def __init__(self, bounds: Sequence[float] = BUCKETS_S) -> None:
        self.bounds = tuple(sorted(bounds))
        self._counts = [0] * (len(self.bounds) + 1)  # per bucket, the last one +Inf
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        value = max(0.0, seconds)
        slot = bisect_left(self.bounds, value)  # the first bound >= value: le is inclusive
        with self._lock:
            self._counts[slot] += 1
            self._sum += value

    def observe_all(self, values: Iterable[float]) -> None:
        for value in values:
            self.observe(value)

    def snapshot(self) -> Counts:
        with self._lock:
            counts, total = list(self._counts), self._sum
        running, cumulative = 0, []
        for n in counts:
            running += n
            cumulative.append(running)
        return Counts(self.bounds, tuple(cumulative), total)


def report_delays(records: Iterable[Record], now_ms: int) -> list[float]:
    """Seconds from each report's ``occurred_at`` to ``now_ms`` (requests are not reports);
    negative (a sender's clock ahead) is 0."""
    return [max(0, now_ms - r.event.header.occurred_at) / 1000
            for r in records if r.topic == REPORTS]
