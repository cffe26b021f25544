"""Physical reads: manifest objects through fsspec, checked before they serve a record.

An object is opened once per process: its URL must lie in the access scope, it
must exist, its size and header must match the manifest entry, and (with
``verify="digest"``) its SHA-256 must too. Its offsets index then stays in a
small LRU, which the planner reads record lengths from. Local files are
memory-mapped; any other store is read by byte range. Transient I/O errors are
retried a bounded number of times; a mismatch is a :class:`DataFault` at once.

Tested in tests/dataplane/test_loader.py.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import fsspec
import numpy as np

from dataplane.errors import DataFault
from dataplane.manifest import DatasetManifest, ObjectEntry, in_scope
from dataplane.order import Span
from dataplane.shards import (
    DTYPES,
    HEADER_BYTES,
    Header,
    Offsets,
    ShardFormatError,
    Tokens,
    file_digest,
    parse_header,
    parse_offsets,
)

Verify = Literal["digest", "size"]


@dataclass
class StoreCounters:
    bytes_read: int = 0
    records_read: int = 0
    retries: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    index_lookups: int = 0  # record lengths (or objects' lengths) the planner read from indexes
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **deltas: int) -> None:
        with self.lock:
            for k, v in deltas.items():
                setattr(self, k, getattr(self, k) + v)


@dataclass(frozen=True, slots=True)
class _Open:
    header: Header
    offsets: Offsets
    lengths: np.ndarray[Any, np.dtype[np.int64]]
    tokens: np.ndarray[Any, Any] | None  # a memmap for local files


class ObjectStore:
    """Reads the manifest's objects; thread-safe; one instance per loader."""

    def __init__(self, manifest: DatasetManifest, *, verify: Verify = "digest",
                 cache_objects: int = 64, retries: int = 3, retry_backoff_s: float = 0.05) -> None:
        self.manifest = manifest
        self.verify = verify
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.counters = StoreCounters()
        self._cache: OrderedDict[tuple[int, int], _Open] = OrderedDict()
        self._cache_size = cache_objects
        self._lock = threading.Lock()
        self._opening: dict[tuple[int, int], threading.Lock] = {}
        self._verified: set[tuple[int, int]] = set()
        self._firsts = [[o.first for o in s.objects] for s in manifest.sources]
        self._records = [s.records for s in manifest.sources]

    # -- lookups ---------------------------------------------------------------

    def locate(self, source: int, index: int) -> tuple[int, int]:
        """``(object number, record within it)`` for a source's logical index."""
        if not 0 <= index < self._records[source]:
            src = self.manifest.sources[source]
            raise DataFault(src.name, "-", f"logical index {index} is outside the source's"
                            f" range [0, {src.records})")
        firsts = self._firsts[source]
        k = bisect.bisect_right(firsts, index) - 1
        return k, index - firsts[k]

    def length(self, source: int, index: int) -> int:
        """A record's token count. Called for every planned record, so a cached
        index is read without taking the lock (a dict lookup is atomic)."""
        k, r = self.locate(source, index)
        opened = self._cache.get((source, k)) or self._open(source, k)
        self.counters.index_lookups += 1  # the planner's thread is its only writer
        return int(opened.lengths[r])

    def lengths_block(self, source: int, index: int
                      ) -> tuple[int, np.ndarray[Any, np.dtype[np.int64]]]:
        """The token counts of every record of the object holding ``index``, and the
        object's first logical index: the compiled planner reads them once per object."""
        k, _ = self.locate(source, index)
        opened = self._cache.get((source, k)) or self._open(source, k)
        self.counters.index_lookups += 1
        return self._firsts[source][k], opened.lengths

    def read_many(self, spans: Sequence[Span]) -> list[Tokens]:
        """The tokens of each span, in order (one row's worth). Local objects come
        back as read-only views of their mapping: the caller copies once, when it
        assembles the row, instead of once per span."""
        out = []
        hits = 0
        cache = self._cache
        for span in spans:
            # A cached object is read without the lock (a dict lookup is atomic);
            # a row has a dozen spans, so the lock per span cost more than the copy.
            k, r = self.locate(span.source, span.index)
            opened = cache.get((span.source, k))
            if opened is None:
                opened = self._open(span.source, k)
            else:
                hits += 1
            out.append(self._slice(opened, span, k, r, view=True))
        self.counters.add(bytes_read=sum(a.nbytes for a in out), records_read=len(out),
                          cache_hits=hits)
        return out

    def read(self, span: Span) -> Tokens:
        """The tokens of one span, as a fresh array (never a view into a mapping)."""
        out = self._read(span, view=False)
        self.counters.add(bytes_read=out.nbytes, records_read=1)
        return out

    def _read(self, span: Span, view: bool) -> Tokens:
        k, r = self.locate(span.source, span.index)
        return self._slice(self._open(span.source, k), span, k, r, view)

    def _slice(self, opened: _Open, span: Span, k: int, r: int, view: bool) -> Tokens:
        base = int(opened.offsets[r])
        end = int(opened.offsets[r + 1])
        if span.stop > end - base:
            src = self.manifest.sources[span.source]
            raise DataFault(src.name, src.objects[k].path,
                            f"record {r} has {end - base} tokens; a span asks for [{span.start},"
                            f" {span.stop})")
        lo, hi = base + span.start, base + span.stop
        if opened.tokens is not None:
            piece = opened.tokens[lo:hi]
            out: Tokens = piece if view else np.array(piece)
        else:
            item = opened.header.itemsize
            raw = self._retrying(span.source, k, lambda: self._range(
                span.source, k, opened.header.tokens_at + lo * item,
                opened.header.tokens_at + hi * item))
            out = np.frombuffer(raw, dtype=np.dtype(DTYPES[item]).newbyteorder("<")).copy()
        return out

    # -- opening ---------------------------------------------------------------

    def _open(self, source: int, k: int) -> _Open:
        key = (source, k)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.counters.add(cache_hits=1)
                return hit
            gate = self._opening.setdefault(key, threading.Lock())
        with gate:  # one opener per object; the others wait and then hit the cache
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self.counters.add(cache_hits=1)
                    return hit
            self.counters.add(cache_misses=1)
            opened: _Open = self._retrying(source, k, lambda: self._load(source, k))
            with self._lock:
                self._cache[key] = opened
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            return opened

    def _load(self, source: int, k: int) -> _Open:
        src = self.manifest.sources[source]
        entry = src.objects[k]
        url = self.manifest.url(entry)
        fault = _Fault(src.name, entry)
        if not in_scope(url, self.manifest.access):
            raise fault(f"{url} is outside the access scope {self.manifest.access}")
        fs, path = fsspec.core.url_to_fs(url)
        try:
            size = int(fs.size(path))
        except FileNotFoundError:
            raise fault(f"the object is missing at {url}") from None
        if size != entry.bytes:
            raise fault(f"size mismatch: the store has {size} bytes, the manifest {entry.bytes}")
        if self.verify == "digest" and (source, k) not in self._verified:
            digest = file_digest(fs, path)
            if digest != entry.digest:
                raise fault(f"digest mismatch: the store has {digest}, the manifest"
                            f" {entry.digest}")
            self._verified.add((source, k))
        try:
            header = parse_header(fs.cat_file(path, 0, HEADER_BYTES))
            offsets = parse_offsets(fs.cat_file(path, header.offsets_at, header.tokens_at),
                                    header)
        except ShardFormatError as exc:
            raise fault(f"not a valid rltok-v1 shard: {exc}") from None
        if header.records != entry.records or header.tokens != entry.tokens:
            raise fault(f"the object holds {header.records} records and {header.tokens} tokens,"
                        f" the manifest says {entry.records} and {entry.tokens}")
        if header.size != size:
            raise fault(f"the header implies {header.size} bytes, the object has {size}")
        tokens = None
        if "file" in _protocols(fs):
            dtype = np.dtype(DTYPES[header.itemsize]).newbyteorder("<")
            # A plain ndarray over the mapping (it keeps the mapping alive): slicing
            # an np.memmap runs Python-level hooks per slice, a dozen slices a row.
            tokens = np.memmap(path, dtype=dtype, mode="r", offset=header.tokens_at,
                               shape=(header.tokens,)).view(np.ndarray) if header.tokens \
                else np.zeros(0, dtype)
        lengths = np.diff(offsets.astype(np.int64)).astype(np.int64)
        return _Open(header=header, offsets=offsets, lengths=lengths, tokens=tokens)

    def _range(self, source: int, k: int, start: int, end: int) -> bytes:
        entry = self.manifest.sources[source].objects[k]
        fs, path = fsspec.core.url_to_fs(self.manifest.url(entry))
        data: bytes = fs.cat_file(path, start, end)
        if len(data) != end - start:
            raise _Fault(self.manifest.sources[source].name, entry)(
                f"short read: asked bytes [{start}, {end}), got {len(data)}")
        return data

    def _retrying(self, source: int, k: int, action: Any) -> Any:
        attempt = 0
        while True:
            try:
                return action()
            except DataFault:
                raise
            except FileNotFoundError:
                src = self.manifest.sources[source]
                raise _Fault(src.name, src.objects[k])("the object disappeared") from None
            except OSError as exc:
                attempt += 1
                if attempt > self.retries:
                    src = self.manifest.sources[source]
                    raise _Fault(src.name, src.objects[k])(
                        f"still failing after {self.retries} retries: {exc}") from exc
                self.counters.add(retries=1)
                time.sleep(self.retry_backoff_s * attempt)


class _Fault:
    def __init__(self, source: str, entry: ObjectEntry) -> None:
        self.source, self.path = source, entry.path

    def __call__(self, detail: str) -> DataFault:
        return DataFault(self.source, self.path, detail)


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)
