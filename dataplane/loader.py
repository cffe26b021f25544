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
from dataplane.planahead import PlanAhead
from dataplane.rows import Chunk, Rows, assemble
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
    # The planner's loop in compiled code (runledger_native.OrderCore, when built);
    # False: the pure-Python planner, the reference.
    compiled_planner: bool = True
    # Without the compiled loop: plan the batches ahead in a process of its own
    # (dataplane.planahead), so this process only assembles rows; False: on the
    # loader's own thread. The compiled loop always plans on the loader's thread.
    plan_process: bool = True

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
        for name in ("compiled_planner", "plan_process"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name} must be true or false, got {getattr(self, name)!r}")
        if problems:
            raise ConfigError("loader config: " + "; ".join(problems))




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
        self.planner = Planner(manifest, config.seed, self.store.length,
                               compiled=config.compiled_planner,
                               blocks=self.store.lengths_block)
        # A store given by the caller may be one no other process can open: then the
        # batches are planned here; so are they by the compiled loop, which plans a
        # batch in about 0.4 ms (a child's pipe and pickles would cost more).
        self._plans: Planner | PlanAhead = (
            PlanAhead(self.planner, config.global_batch_size, verify=config.verify,
                      retries=config.retries)
            if config.plan_process and store is None and not self.planner.compiled
            else self.planner)
        self.seq_len = manifest.packing.seq_len
        self._pad = manifest.packing.pad_id
        self._names = tuple(s.name for s in manifest.sources)
        self._records = tuple(s.records for s in manifest.sources)
        b = config.global_batch_size
        self._lo = replica * b // replicas
        self._hi = (replica + 1) * b // replicas
        self.metrics = Metrics()
        # Rows are fetched in chunks of consecutive local sequences, as many as
        # both bounds allow: one thread hand-off and one vectorised assembly
        # per chunk instead of per row (the per-row hand-off cost more than the
        # copy, under the GIL). The bounds still count rows and bytes.
        row_bytes = self.seq_len * _BYTES_PER_POSITION
        self._chunk = max(1, min(self._hi - self._lo, config.max_items,
                                 config.max_bytes // row_bytes))
        self._fetcher: OrderedFetcher[Chunk, Rows] = OrderedFetcher(
            self._assemble, lambda c: len(c) * row_bytes,
            Bounds(config.max_items, config.max_bytes), config.workers, self.metrics,
            units_of=len)
        self._durable = self._cursor(0, self.planner.initial())
        self._reset(self._durable)

    # -- the iterator ------------------------------------------------------------

    def __iter__(self) -> DataLoader:
        return self

    def __next__(self) -> Batch:
        self._fill()
        if not self._batches:
            raise StopIteration
        index, cursor, plans, chunks = self._batches[0]
        parts = []
        for _ in range(chunks):
            parts.append(self._fetcher.take())
            self._fill()
        self._batches.popleft()
        self._handed = cursor
        if len(parts) == 1:
            rows = parts[0]
        else:
            rows = Rows(*(np.concatenate([getattr(r, f) for r in parts]) for f in
                          ("tokens", "segment_ids", "positions", "loss_mask")))
        return Batch(index=index, tokens=rows.tokens, segment_ids=rows.segment_ids,
                     positions=rows.positions, loss_mask=rows.loss_mask,
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
        if isinstance(self._plans, PlanAhead):
            self._plans.close()

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
        self._batches: deque[tuple[int, Cursor, list[Sequence_], int]] = deque()
        self._planned = cursor  # the plan frontier
        self._handed = cursor
        self._queue: deque[Chunk] = deque()  # planned local chunks not yet submitted
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
        planned = self._plans.plan_batch(self._planned.order, self.config.global_batch_size)
        if planned is None:
            self._ended = True
            return
        sequences, order = planned
        cursor = self._cursor(self._planned.batch + 1, order)
        local = sequences[self._lo:self._hi]
        chunks = [tuple(local[i:i + self._chunk]) for i in range(0, len(local), self._chunk)]
        self._batches.append((self._planned.batch, cursor, local, len(chunks)))
        self._queue.extend(chunks)
        self._planned = cursor

    def _assemble(self, chunk: Chunk) -> Rows:
        return assemble(self.store, chunk, self.seq_len, self._pad)
