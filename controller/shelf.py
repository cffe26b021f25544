"""An immutable map that is cheap to change a few keys at a time: the finished runs.

The controller's model is a value that the loop replaces whole (a metrics
scrape reads it from another thread without a lock), so a change must not
touch the map it came from. Copying one dict of every run ever finished per
change would make a late report to a finished run cost O(finished runs).
A ``Shelf`` splits its keys over ``BUCKETS`` dicts by hash: ``with_`` copies
only the buckets it changes and the tuple that holds them, about
N / BUCKETS + BUCKETS references, whatever the total.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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
        for bucket in self._buckets:
            yield from bucket

    def __len__(self) -> int:
        return self._size

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
