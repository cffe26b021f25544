"""The resumable loader a training rank iterates: plan, fetch, assemble, hand out, commit.

Every replica plans the same global batches (:class:`~dataplane.order.Planner`)
and fetches only its slice ``[floor(r*B/R), floor((r+1)*B/R))``, so changing
the replica count keeps every global batch's samples. Each batch carries a
provisional :class:`~dataplane.state.Cursor`; the durable cursor, which
``state_dict`` returns, moves only when the trainer calls :meth:`commit` with
one (the checkpoint does, when the step that consumed the batch commits).
``load_state_dict`` drops every prefetched sample and plans again from the state.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dataplane.errors import ConfigError, StateError
from dataplane.manifest import DatasetManifest
from dataplane.order import OrderState, Planner, Sequence_
from dataplane.permute import ALGORITHM
from dataplane.pipeline import Bounds, Metrics, OrderedFetcher
from dataplane.state import Cursor, load_cursor
from dataplane.store import ObjectStore, Verify

# Bytes one assembled sequence position holds: int64 token, int32 segment and
# position, bool loss mask.
_BYTES_PER_POSITION = 8 + 4 + 4 + 1


@dataclass(frozen=True, slots=True)
class LoaderConfig:
    """What a rank's loader needs beyond the manifest. Order depends only on
    ``seed`` and ``global_batch_size``; the rest is throughput and memory."""

    seed: int
    global_batch_size: int
    workers: int = 4
    max_items: int = 64  # reorder-buffer bound, in sequences (running + done + head)
    max_bytes: int = 256 << 20
    verify: Verify = "digest"
    retries: int = 3

    def __post_init__(self) -> None:
        problems = []
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            problems.append(f"seed must be a non-negative integer, got {self.seed!r}")
        for name in ("global_batch_size", "workers", "max_items", "max_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append(f"{name} must be a positive integer, got {value!r}")
        if self.verify not in ("digest", "size"):
            problems.append(f"verify must be 'digest' or 'size', got {self.verify!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            problems.append(f"retries must be a non-negative integer, got {self.retries!r}")
        if problems:
            raise ConfigError("loader config: " + "; ".join(problems))


@dataclass(frozen=True, slots=True)
class Sample:
    tokens: npt.NDArray[np.int64]
    segment_ids: npt.NDArray[np.int32]  # 1.. per record piece, 0 for padding
    positions: npt.NDArray[np.int32]  # position within the record's kept part
    loss_mask: npt.NDArray[np.bool_]  # 1 where the next token is the same record's next token


@dataclass(frozen=True, slots=True)
class Batch:
    index: int  # the global batch number
    tokens: npt.NDArray[np.int64]  # [local batch, seq_len]
    segment_ids: npt.NDArray[np.int32]
    positions: npt.NDArray[np.int32]
    loss_mask: npt.NDArray[np.bool_]
    samples: tuple[Sequence_, ...]  # what each row holds: (source, index, epoch, token range)
    cursor: Cursor  # provisional: where the stream stands after this global batch

    @property
    def loss_tokens(self) -> int:
        return int(self.loss_mask.sum())


class DataLoader:
    def __init__(self, manifest: DatasetManifest, config: LoaderConfig, *, replica: int = 0,
                 replicas: int = 1, store: ObjectStore | None = None) -> None:
        if not 1 <= replicas <= config.global_batch_size:
            raise ConfigError(f"replicas must be 1..global_batch_size"
                              f" ({config.global_batch_size}), got {replicas}")
        if not 0 <= replica < replicas:
            raise ConfigError(f"replica must be in 0..{replicas - 1}, got {replica}")
        self.manifest = manifest
        self.config = config
        self.replica = replica
        self.replicas = replicas
        self.store = store or ObjectStore(manifest, verify=config.verify, retries=config.retries)
        self.planner = Planner(manifest, config.seed, self.store.length)
        self.seq_len = manifest.packing.seq_len
        self._pad = manifest.packing.pad_id
        self._names = tuple(s.name for s in manifest.sources)
        self._records = tuple(s.records for s in manifest.sources)
        b = config.global_batch_size
        self._lo = replica * b // replicas
        self._hi = (replica + 1) * b // replicas
        self.metrics = Metrics()
        self._fetcher: OrderedFetcher[Sequence_, Sample] = OrderedFetcher(
            self._assemble, lambda _: self.seq_len * _BYTES_PER_POSITION,
            Bounds(config.max_items, config.max_bytes), config.workers, self.metrics)
        self._durable = self._cursor(0, self.planner.initial())
        self._reset(self._durable)

    # -- the iterator ------------------------------------------------------------

    def __iter__(self) -> DataLoader:
        return self

    def __next__(self) -> Batch:
        self._fill()
        if not self._batches:
            raise StopIteration
        index, cursor, plans = self._batches[0]
        rows = []
        for _ in plans:
            rows.append(self._fetcher.take())
            self._fill()
        self._batches.popleft()
        self._handed = cursor
        return Batch(
            index=index,
            tokens=np.stack([r.tokens for r in rows]),
            segment_ids=np.stack([r.segment_ids for r in rows]),
            positions=np.stack([r.positions for r in rows]),
            loss_mask=np.stack([r.loss_mask for r in rows]),
            samples=tuple(plans), cursor=cursor)

    # -- durable cursor ------------------------------------------------------------

    def commit(self, cursor: Cursor) -> None:
        """Make ``cursor`` durable: the step that consumed its batches has committed."""
        if (cursor.dataset_id, cursor.seed, cursor.global_batch_size) != (
                self._durable.dataset_id, self.config.seed, self.config.global_batch_size):
            raise StateError("commit of a cursor from another dataset, seed or batch size")
        if cursor.batch < self._durable.batch:
            raise StateError(f"commit of batch {cursor.batch} is behind the durable cursor"
                             f" (batch {self._durable.batch})")
        if cursor.batch > self._handed.batch:
            raise StateError(f"commit of batch {cursor.batch}, but only batches before"
                             f" {self._handed.batch} were handed out")
        self._durable = cursor

    @property
    def durable(self) -> Cursor:
        return self._durable

    def state_dict(self) -> dict[str, Any]:
        """The durable (committed) cursor; never the prefetched or handed-out position."""
        return self._durable.state_dict()

    def load_state_dict(self, state: Any) -> None:
        cursor = load_cursor(state, dataset_id=self.manifest.dataset_id, algorithm=ALGORITHM,
                             seed=self.config.seed,
                             global_batch_size=self.config.global_batch_size,
                             names=self._names, records=self._records)
        self._durable = cursor
        self._reset(cursor)

    def stats(self) -> dict[str, float | int]:
        out = self.metrics.snapshot(time.monotonic())
        c = self.store.counters
        out.update(bytes_read=c.bytes_read, records_read=c.records_read, retries=c.retries,
                   cache_hits=c.cache_hits, cache_misses=c.cache_misses,
                   index_lookups=c.index_lookups)
        return out

    def close(self) -> None:
        self._fetcher.close()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------

    def _cursor(self, batch: int, order: OrderState) -> Cursor:
        return Cursor(dataset_id=self.manifest.dataset_id, algorithm=ALGORITHM,
                      seed=self.config.seed, global_batch_size=self.config.global_batch_size,
                      batch=batch, epoch=self.planner.epoch(order), order=order,
                      names=self._names, records=self._records)

    def _reset(self, cursor: Cursor) -> None:
        self._fetcher.drop()
        self._batches: deque[tuple[int, Cursor, list[Sequence_]]] = deque()
        self._planned = cursor  # the plan frontier
        self._handed = cursor
        self._queue: deque[Sequence_] = deque()  # planned local sequences not yet submitted
        self._ended = False

    def _fill(self) -> None:
        """Plan global batches and submit local sequences while the bound has room."""
        while True:
            if not self._queue and not self._ended:
                self._plan_one()
            if not self._queue or not self._fetcher.room(self._queue[0]):
                return
            self._fetcher.submit(self._queue.popleft())

    def _plan_one(self) -> None:
        # Plan at most one batch ahead of what the fetcher can hold, so a stop
        # never leaves a large planned-but-unread tail.
        if len(self._batches) > 1 + self.config.max_items // max(self._hi - self._lo, 1):
            return
        planned = self.planner.plan_batch(self._planned.order, self.config.global_batch_size)
        if planned is None:
            self._ended = True
            return
        sequences, order = planned
        cursor = self._cursor(self._planned.batch + 1, order)
        local = sequences[self._lo:self._hi]
        self._batches.append((self._planned.batch, cursor, local))
        self._queue.extend(local)
        self._planned = cursor

    def _assemble(self, plan: Sequence_) -> Sample:
        n = self.seq_len
        pieces = self.store.read_many(plan)
        sizes = [p.size for p in pieces]
        used = sum(sizes)
        tokens = np.full(n, self._pad, dtype=np.int64)
        segments = np.zeros(n, dtype=np.int32)
        positions = np.zeros(n, dtype=np.int32)
        mask = np.zeros(n, dtype=np.bool_)
        if used:
            tokens[:used] = np.concatenate(pieces)
            segments[:used] = np.repeat(np.arange(1, len(plan) + 1, dtype=np.int32), sizes)
            # position within the record's kept part: a running index restarted per span
            starts = np.cumsum([0, *sizes[:-1]])
            first = np.array([s.start - s.origin for s in plan], dtype=np.int32)
            positions[:used] = (np.arange(used, dtype=np.int32)
                                - np.repeat(starts, sizes) + np.repeat(first, sizes))
            mask[:used] = True
            ends = np.cumsum(sizes) - 1
            mask[ends[np.asarray(sizes) > 0]] = False  # a span's last token has no target here
        return Sample(tokens, segments, positions, mask)
