"""Rows of a batch from planned sequences: one read and one vectorised pass per chunk.

:func:`assemble` is what the loader's fetch threads run for one fetch item: a
pure function of the chunk and the stored bytes, kept apart from the loader
so that another executor (worker processes) can run it unchanged.

Tested in tests/dataplane/test_loader.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dataplane.order import Sequence_
from dataplane.store import ObjectStore

Chunk = tuple[Sequence_, ...]
"""Consecutive sequences of one replica's batch: one fetch item."""


@dataclass(frozen=True, slots=True)
class Rows:
    """Consecutive rows of one local batch, assembled together (one fetch item)."""

    tokens: npt.NDArray[np.int64]  # [rows, seq_len]
    segment_ids: npt.NDArray[np.int32]  # 1.. per record piece, 0 for padding
    positions: npt.NDArray[np.int32]  # position within the record's kept part
    loss_mask: npt.NDArray[np.bool_]  # 1 where the next token is the same record's next token


def assemble(store: ObjectStore, chunk: Chunk, seq_len: int, pad: int) -> Rows:
    """The rows of ``chunk``: every span's tokens read once into one flat run,
    the per-token columns computed over the whole run, then one slice copy
    per row and column into preallocated arrays."""
    k, n = len(chunk), seq_len
    spans = [span for plan in chunk for span in plan]
    pieces = store.read_many(spans)
    tokens = np.full((k, n), pad, dtype=np.int64)
    segments = np.zeros((k, n), dtype=np.int32)
    positions = np.zeros((k, n), dtype=np.int32)
    mask = np.zeros((k, n), dtype=np.bool_)
    if not pieces:
        return Rows(tokens, segments, positions, mask)
    per_row = [len(plan) for plan in chunk]
    sizes = np.fromiter((p.size for p in pieces), dtype=np.int64, count=len(pieces))
    ends = np.cumsum(sizes)
    starts = ends - sizes
    flat = np.concatenate(pieces)
    # segment = the span's number within its row, from 1
    first_span = np.repeat(np.cumsum([0, *per_row[:-1]]), per_row)
    seg = np.arange(1, len(spans) + 1, dtype=np.int64) - first_span
    first = np.fromiter((s.start - s.origin for s in spans), dtype=np.int64,
                        count=len(spans))
    flat_seg = np.repeat(seg, sizes)
    # position within the record's kept part: a running index restarted per span
    flat_pos = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(first - starts, sizes)
    flat_mask = np.ones(int(ends[-1]), dtype=np.bool_)
    flat_mask[ends[sizes > 0] - 1] = False  # a span's last token has no target here
    row_ends = np.concatenate([[0], ends])[np.cumsum(per_row)]
    used = np.diff(row_ends, prepend=0)
    lo = 0
    for r, u in enumerate(used.tolist()):
        tokens[r, :u] = flat[lo:lo + u]
        segments[r, :u] = flat_seg[lo:lo + u]
        positions[r, :u] = flat_pos[lo:lo + u]
        mask[r, :u] = flat_mask[lo:lo + u]
        lo += u
    return Rows(tokens, segments, positions, mask)
