"""An immutable map that is cheap to change a few keys at a time. Pure.

Folded state is a value that each record replaces whole (the controller's model
is read by a metrics scrape from another thread without a lock; a replay keeps
every version it is handed), so a change must not touch the map it came from.
Copying a dict per change makes one change cost O(keys), and some maps are
large: the finished runs (``controller.model``), the last heartbeat and the
exit of every member of a 100,000-rank generation (``events.state``), the
nodes of a 12,500-node cluster (``controller.inventory``). Copying them per
heartbeat made a heartbeat cost O(ranks) (bench/scale.py measured 2,900
heartbeats/s at 10^5 ranks).

A ``Shelf`` splits its keys over ``BUCKETS`` dicts by hash: ``with_`` copies
only the buckets it changes and the tuple that holds them, about
N / BUCKETS + BUCKETS references, whatever the total. It is a ``Mapping``, so
it compares equal to a dict of the same items. Keys are strings: the hash of
a ``str`` is salted per process, which changes which bucket a key is in, never
what the map holds or the order a caller sorts it in.

Tested in tests/events/test_shelf.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import chain
from typing import Generic, TypeVar

V = TypeVar("V")
BUCKETS = 256
_EMPTY: dict[str, object] = {}  # shared by every empty bucket; never written


class Shelf(Mapping[str, V], Generic[V]):
    """A read-only mapping; :meth:`with_` returns a changed copy."""

    __slots__ = ("_buckets", "_size")

    def __init__(self) -> None:
        self._buckets: tuple[dict[str, V], ...] = (_EMPTY,) * BUCKETS  # type: ignore[assignment]
        self._size = 0

    def __getitem__(self, key: str) -> V:
        return self._buckets[hash(key) % BUCKETS][key]

    def get(self, key: str, default: V | None = None) -> V | None:  # type: ignore[override]
        return self._buckets[hash(key) % BUCKETS].get(key, default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._buckets[hash(key) % BUCKETS]

    def __iter__(self) -> Iterator[str]:
        if not self._size:  # the usual shelf of exits: no walk of the buckets at all
            return
        for bucket in self._buckets:
            if bucket:
                yield from bucket

    def __len__(self) -> int:
        return self._size

    def each_value(self) -> Iterator[V]:
        """Every value, bucket by bucket, at the dicts' speed (``values()`` looks each key
        up again): what a scan of 10^5 members' heartbeats per tick can afford."""
        if not self._size:
            return iter(())
        return chain.from_iterable(bucket.values() for bucket in self._buckets if bucket)

    @classmethod
    def of(cls, items: Mapping[str, V]) -> Shelf[V]:
        """A shelf holding ``items`` (itself, when it is a shelf already)."""
        if isinstance(items, Shelf):
            return items
        return cls().with_(items)

    def __repr__(self) -> str:
        return f"Shelf({dict(self)!r})"

    def with_(self, changes: Mapping[str, V]) -> Shelf[V]:
        """A copy with ``changes`` set (added or replaced); ``self`` is unchanged."""
        if not changes:
            return self
        buckets = list(self._buckets)
        copied: set[int] = set()
        size = self._size
        for key, value in changes.items():
            i = hash(key) % BUCKETS
            if i not in copied:
                buckets[i] = dict(buckets[i])
                copied.add(i)
            size += key not in buckets[i]
            buckets[i][key] = value
        new: Shelf[V] = Shelf.__new__(Shelf)
        new._buckets, new._size = tuple(buckets), size
        return new
