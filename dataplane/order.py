"""The order: a pure function from a small state to the next documents and sequences.

Nothing here reads tokens. From the manifest, the seed and record lengths (the
shards' offsets index), :class:`Planner` decides which source supplies the next
document (:mod:`dataplane.mixing`), which record that is (a keyed permutation
per source and epoch, :mod:`dataplane.permute`), what the transforms keep of
it, and how documents pack into fixed-length sequences. Every replica runs the
same planner over the same global stream and then fetches only its own slice,
so the replica count never changes what a global batch holds.

``Planner.plan_batch`` runs its loop in the Rust crate when it is built
(``runledger_native.OrderCore``: the same steps, integers and floats, about 5x
faster); this module's Python is the reference it is held to
(tests/dataplane/test_compiled_order.py) and what runs without the crate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from dataplane.errors import ConfigError, DataPlaneError, SourceExhausted
from dataplane.manifest import DatasetManifest
from dataplane.mixing import cumulative, exact_pick, expected_pick, integer_weights
from dataplane.permute import ALGORITHM, Permutation, derive_key, keyed_hash, keyed_uniform

Lengths = Callable[[int, int], int]
"""``lengths(source, index)``: the token count of a source's record (from the offsets index)."""
Blocks = Callable[[int, int], tuple[int, Any]]
"""``blocks(source, index)``: the token counts of every record of the object holding
``index`` (an int64 array) and the object's first index, for the compiled loop to read
an object's lengths once (``ObjectStore.lengths_block``)."""


@dataclass(frozen=True, slots=True)
class Span:
    """Tokens ``[start, stop)`` of one record; ``origin`` is where the kept part begins."""

    source: int
    index: int
    epoch: int
    origin: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


Sequence_ = tuple[Span, ...]


@dataclass(frozen=True, slots=True)
class OrderState:
    """Where the global stream stands. Small, and everything the next item depends on."""

    position: int  # sequences emitted
    draws_total: int  # records drawn from all sources
    draws: tuple[int, ...]  # records drawn per source (epoch = draws // records)
    units: tuple[int, ...]  # per-source counts in the mixture's unit (tokens for packed_sequences)
    base_units: tuple[int, ...]  # units when the mixture was last re-anchored (renormalize)
    active: tuple[bool, ...]
    residue: Span | None  # the rest of a record that the last sequence split
    finished: bool = False


class _Doc:
    """A drawn record: what the transforms keep of it, and whether the filters pass it.

    ``counted`` and ``peek`` are its size in the mixture's unit once drawn and
    while it waits as a source's next item (``Planner._unit_size``), computed
    once here because the exact mixture asks for them on every pick.
    """

    __slots__ = ("accepted", "counted", "epoch", "index", "origin", "peek", "source", "stop")

    def __init__(self, source: int, index: int, epoch: int, origin: int, stop: int,
                 accepted: bool) -> None:
        self.source, self.index, self.epoch = source, index, epoch
        self.origin, self.stop, self.accepted = origin, stop, accepted
        self.counted = 0
        self.peek = 1

    @property
    def size(self) -> int:
        return self.stop - self.origin


class _Work:
    """A mutable copy of an :class:`OrderState` for the length of one planning call.

    Planning thousands of records per batch through frozen copies cost more
    than the planning itself; the state handed out is still frozen.
    """

    __slots__ = ("active", "base_units", "draws", "draws_total", "finished", "position",
                 "residue", "units")

    def __init__(self, st: OrderState) -> None:
        self.position = st.position
        self.draws_total = st.draws_total
        self.draws = list(st.draws)
        self.units = list(st.units)
        self.base_units = list(st.base_units)
        self.active = st.active
        self.residue = st.residue
        self.finished = st.finished

    def freeze(self) -> OrderState:
        return OrderState(position=self.position, draws_total=self.draws_total,
                          draws=tuple(self.draws), units=tuple(self.units),
                          base_units=tuple(self.base_units), active=self.active,
                          residue=self.residue, finished=self.finished)


_BLOCK = 1024  # permutation outputs computed per vectorised call


class Planner:
    """Pure planning over one manifest and seed; caches never change a result.

    ``plan_batch`` runs in compiled code (``runledger_native.OrderCore``, the same
    steps over the same integers and floats) when the crate is built and ``compiled``
    is true; ``next_sequence`` and ``next_document`` always run here.
    """

    def __init__(self, manifest: DatasetManifest, seed: int, lengths: Lengths, *,
                 compiled: bool = True, blocks: Blocks | None = None) -> None:
        self.manifest = manifest
        self.seed = seed
        self._lengths = lengths
        self.names = [s.name for s in manifest.sources]
        self.records = [s.records for s in manifest.sources]
        mix = manifest.mixture
        fr = mix.fractions()
        self.weights = [fr[n] for n in self.names]
        self.unit = mix.unit
        self.seq_len = manifest.packing.seq_len
        ds = manifest.dataset_id
        self._perm_key = [derive_key(ds, ALGORITHM, seed, "order", n) for n in self.names]
        self._draw_key = [derive_key(ds, ALGORITHM, seed, "draw", n) for n in self.names]
        self._crop_key = [derive_key(ds, ALGORITHM, seed, "crop", n) for n in self.names]
        self._mix_key = derive_key(ds, ALGORITHM, seed, "mix")
        self._filters = [[(f.kind, f.value) for f in s.filters] for s in manifest.sources]
        self._crops = [(t.max_tokens, t.mode) for t in manifest.transforms if t.kind == "crop"]
        # Expected mode draws records, so a weight in tokens becomes a record
        # probability through each source's mean record size.
        self._probs = [float(w) / self._mean_size(i) for i, w in enumerate(self.weights)]
        if self.unit not in ("documents", "samples"):
            for src, w in zip(manifest.sources, self.weights, strict=True):
                if w > 0 and src.tokens == 0:
                    # Its count could never grow, so EDF would serve it forever.
                    raise ConfigError(f"source {src.name!r} has weight {w} but no tokens, and"
                                      f" the mixture counts {self.unit}")
        # Each source's next record (its draw number and the record), drawn
        # ahead so the exact mixture can compare sizes; a pure cache.
        self._peek_draw = [-1] * len(self.names)
        self._peek_doc: list[_Doc | None] = [None] * len(self.names)
        self._weights_of: dict[tuple[bool, ...], tuple[list[int], int]] = {}
        self._barren = [0] * len(self.names)
        self._blocks: dict[int, tuple[int, int, list[int]]] = {}
        self._unit_sized = self.unit in ("documents", "samples")
        self._ones = [1] * len(self.names)
        self._without_replacement = not mix.replacement
        self._expected = mix.mode == "expected"
        self._core = _compiled_core(self, blocks) if compiled else None

    @property
    def compiled(self) -> bool:
        """Whether ``plan_batch`` runs in compiled code."""
        return self._core is not None

    # -- state -----------------------------------------------------------------

    def initial(self) -> OrderState:
        k = len(self.names)
        active = tuple(w > 0 for w in self.weights)
        return OrderState(position=0, draws_total=0, draws=(0,) * k, units=(0,) * k,
                          base_units=(0,) * k, active=active, residue=None)

    def epoch(self, st: OrderState) -> int:
        live = [d // n for d, n, on in zip(st.draws, self.records, st.active, strict=True) if on]
        return min(live) if live else max(d // n for d, n in zip(st.draws, self.records,
                                                                  strict=True))

    # -- sequences -------------------------------------------------------------

    def plan_batch(self, st: OrderState, size: int) -> tuple[list[Sequence_], OrderState] | None:
        """The next ``size`` sequences, or None when the stream ends before the batch fills."""
        if self._core is not None:
            return self._compiled_batch(st, size)
        w = _Work(st)
        out: list[Sequence_] = []
        for _ in range(size):
            seq = self._sequence(w)
            if seq is None:
                return None
            out.append(seq)
        return out, w.freeze()

    def _compiled_batch(self, st: OrderState, size: int
                        ) -> tuple[list[Sequence_], OrderState] | None:
        assert self._core is not None
        r = st.residue
        residue = (r.source, r.index, r.epoch, r.origin, r.start, r.stop) if r else None
        got = self._core.plan_batch((st.position, st.draws_total, list(st.draws),
                                     list(st.units), list(st.base_units), list(st.active),
                                     residue, st.finished), size)
        if got is None:
            return None
        if got[0] == "exhausted":
            i, epoch = got[1], got[2]
            raise SourceExhausted(self.names[i], epoch)
        if got[0] == "barren":
            raise DataPlaneError(_barren(self.names[got[1]]))
        if got[0] == "overflow":
            raise DataPlaneError("the exact mixture's counts outgrew 128-bit arithmetic; plan "
                                 "with the Python planner (LoaderConfig(compiled_planner=False))")
        _, seqs, (position, total, draws, units, base, active, res, finished) = got
        return seqs, OrderState(position=position, draws_total=total, draws=tuple(draws),
                                units=tuple(units), base_units=tuple(base),
                                active=tuple(active), residue=Span(*res) if res else None,
                                finished=finished)

    def next_sequence(self, st: OrderState) -> tuple[Sequence_ | None, OrderState]:
        w = _Work(st)
        seq = self._sequence(w)
        return seq, w.freeze()

    def next_document(self, st: OrderState) -> tuple[_Doc | None, OrderState]:
        w = _Work(st)
        doc = self._document(w)
        return doc, w.freeze()

    def _sequence(self, w: _Work) -> Sequence_ | None:
        if self.manifest.packing.mode == "none":
            while True:
                doc = self._document(w)
                if doc is None:
                    return None
                if doc.stop > doc.origin:
                    w.position += 1
                    return (Span(doc.source, doc.index, doc.epoch, doc.origin, doc.origin,
                                 min(doc.stop, doc.origin + self.seq_len)),)
        spans: list[Span] = []
        fill = 0
        residue = w.residue
        while fill < self.seq_len:
            if residue is None:
                doc = self._document(w)
                if doc is None:
                    return None
                if doc.stop == doc.origin:
                    continue
                residue = Span(doc.source, doc.index, doc.epoch, doc.origin, doc.origin, doc.stop)
            take = min(self.seq_len - fill, residue.stop - residue.start)
            if take == residue.stop - residue.start:
                spans.append(residue)
                residue = None
            else:
                cut = residue.start + take
                spans.append(Span(residue.source, residue.index, residue.epoch, residue.origin,
                                  residue.start, cut))
                residue = Span(residue.source, residue.index, residue.epoch, residue.origin,
                               cut, residue.stop)
            fill += take
        w.residue = residue
        w.position += 1
        return tuple(spans)

    # -- documents -------------------------------------------------------------

    def _document(self, w: _Work) -> _Doc | None:
        while True:
            if w.finished:
                return None
            i = self._pick(w)
            if i is None:
                w.finished = True
                return None
            n = self.records[i]
            if self._without_replacement and w.draws[i] >= n:
                policy = self.manifest.mixture.exhaustion
                if policy == "error":
                    raise SourceExhausted(self.names[i], w.draws[i] // n - 1)
                if policy == "stop":
                    w.finished = True
                    return None
                if policy == "renormalize":
                    w.active = tuple(on and j != i for j, on in enumerate(w.active))
                    w.base_units = list(w.units)
                    continue
                # "repeat": the next draw opens the source's next epoch.
            peeked = self._peek_doc[i]
            doc = (peeked if peeked is not None and self._peek_draw[i] == w.draws[i]
                   else self._doc(i, w.draws[i]))
            w.units[i] += doc.counted
            w.draws[i] += 1
            w.draws_total += 1
            # A source whose every record is filtered out or empty would be
            # drawn forever. Without replacement, 2n useless draws in a row hold a
            # whole epoch (a run can straddle two epochs); with replacement, 64n
            # in a row has odds below e^-64 unless nothing in the source is usable.
            useful = doc.accepted and doc.stop > doc.origin
            self._barren[i] = 0 if useful else self._barren[i] + 1
            if self._barren[i] >= (64 * n if self.manifest.mixture.replacement else 2 * n):
                raise DataPlaneError(_barren(self.names[i]))
            if doc.accepted:
                return doc

    def _pick(self, w: _Work) -> int | None:
        if True not in w.active:
            return None
        if self._expected:
            u = keyed_uniform(self._mix_key, w.draws_total)
            return expected_pick(u, self._cumulative(w.active))
        # Called once per drawn record: plain loops over short lists, no helpers.
        active = w.active
        weights = self._weights_of.get(active)
        if weights is None:
            weights = self._weights_of[active] = integer_weights(
                [x if on else Fraction(0) for x, on in zip(self.weights, active, strict=True)])
        units, base, draws = w.units, w.base_units, w.draws
        counts = []
        total = 0
        sized = not self._unit_sized
        sizes = [] if sized else self._ones
        peek_draw, peek_doc = self._peek_draw, self._peek_doc
        for i, on in enumerate(active):
            c = units[i] - base[i]
            counts.append(c)
            if not on:
                if sized:
                    sizes.append(0)
                continue
            total += c
            if sized:
                doc = peek_doc[i]
                if doc is None or peek_draw[i] != draws[i]:
                    doc = peek_doc[i] = self._doc(i, draws[i])
                    peek_draw[i] = draws[i]
                sizes.append(doc.peek)
        return exact_pick(counts, sizes, weights[0], weights[1], total, active)

    @lru_cache(maxsize=64)  # noqa: B019 - as above
    def _cumulative(self, active: tuple[bool, ...]) -> list[float]:
        return cumulative(self._probs, active)

    def _unit_size(self, doc: _Doc, counted: bool) -> int:
        unit = self.unit
        if unit == "documents":
            return 1
        if not doc.accepted and counted:
            return 0
        if unit == "samples":
            return 1
        if unit == "loss_tokens":
            return max(doc.size - 1, 0)
        return doc.size  # tokens, packed_sequences (in tokens: 1/seq_len of a sequence each)

    def _doc(self, i: int, draw: int) -> _Doc:
        n = self.records[i]
        epoch, k = divmod(draw, n)
        if self.manifest.mixture.replacement:
            index = keyed_hash(self._draw_key[i], draw) % n
        else:
            index = self._permuted(i, epoch, k)
        length = self._lengths(i, index)
        origin, stop = 0, length
        for max_tokens, mode in self._crops:
            if stop - origin > max_tokens:
                if mode == "random":
                    span = stop - origin - max_tokens + 1
                    origin += keyed_hash(self._crop_key[i] ^ epoch, index) % span
                stop = origin + max_tokens
        accepted = True
        for kind, value in self._filters[i]:
            if (kind == "min_tokens" and length < value) or (kind == "max_tokens"
                                                             and length > value):
                accepted = False
        doc = _Doc(i, index, epoch, origin, stop, accepted)
        # _unit_size's two readings, inlined: this runs once per drawn record
        unit = self.unit
        if unit == "documents":
            doc.counted = 1
        elif unit == "samples":
            doc.counted = 1 if accepted else 0
        else:
            size = stop - origin - 1 if unit == "loss_tokens" else stop - origin
            size = max(size, 0)
            doc.counted = size if accepted else 0
            doc.peek = max(size, 1)
        return doc

    def _permuted(self, i: int, epoch: int, k: int) -> int:
        """Position ``k`` of source ``i``'s epoch order, computed a block at a time."""
        block = self._blocks.get(i)
        if block is None or block[0] != epoch or not block[1] <= k < block[1] + len(block[2]):
            start = k - k % _BLOCK
            stop = min(start + _BLOCK, self.records[i])
            perm = Permutation(self.records[i], derive_key(self._perm_key[i], epoch))
            block = (epoch, start, perm.many(np.arange(start, stop, dtype=np.int64)).tolist())
            self._blocks[i] = block
        index: int = block[2][k - block[1]]
        return index

    def _mean_size(self, i: int) -> float:
        src = self.manifest.sources[i]
        if self.unit in ("documents", "samples"):
            return 1.0
        tokens = src.tokens - (src.records if self.unit == "loss_tokens" else 0)
        return max(tokens / src.records, 1.0)



def _barren(name: str) -> str:
    return (f"source {name!r}: no record passes its filters with a token left (a whole epoch"
            " of draws was unusable)")


def _compiled_core(planner: Planner, blocks: Blocks | None) -> Any:
    """The planner's loop in compiled code, over this planner's keys and callbacks; None
    when ``runledger_native`` is not built (an install without ``native/``)."""
    try:
        from runledger_native import OrderCore
    except ImportError:
        return None
    m = planner.manifest
    perm_key = planner._perm_key
    names = planner.names

    def weights_of(active: tuple[bool, ...]) -> tuple[list[int], int]:
        return integer_weights([x if on else Fraction(0)
                                for x, on in zip(planner.weights, active, strict=True)])

    return OrderCore(
        planner.records, planner.seq_len, m.packing.mode == "none", planner.unit,
        m.mixture.replacement, m.mixture.exhaustion, planner._expected, planner._draw_key,
        planner._crop_key, planner._mix_key,
        [(max_tokens, mode == "random") for max_tokens, mode in planner._crops],
        [[(kind == "min_tokens", value) for kind, value in planner._filters[i]]
         for i in range(len(names))],
        planner._probs, planner._lengths, lambda i, epoch: derive_key(perm_key[i], epoch),
        weights_of, Span, blocks=blocks)
