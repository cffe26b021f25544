"""The order: a pure function from a small state to the next documents and sequences.

Nothing here reads tokens. From the manifest, the seed and record lengths (the
shards' offsets index), :class:`Planner` decides which source supplies the next
document (:mod:`dataplane.mixing`), which record that is (a keyed permutation
per source and epoch, :mod:`dataplane.permute`), what the transforms keep of
it, and how documents pack into fixed-length sequences. Every replica runs the
same planner over the same global stream and then fetches only its own slice,
so the replica count never changes what a global batch holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache

from dataplane.errors import ConfigError, DataPlaneError, SourceExhausted
from dataplane.manifest import DatasetManifest
from dataplane.mixing import cumulative, exact_pick, expected_pick, integer_weights
from dataplane.permute import ALGORITHM, Permutation, derive_key, keyed_hash, keyed_uniform

Lengths = Callable[[int, int], int]
"""``lengths(source, index)``: the token count of a source's record (from the offsets index)."""


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


@dataclass(frozen=True, slots=True)
class _Doc:
    source: int
    index: int
    epoch: int
    origin: int
    stop: int
    accepted: bool

    @property
    def size(self) -> int:
        return self.stop - self.origin


class Planner:
    """Pure planning over one manifest and seed; caches never change a result."""

    def __init__(self, manifest: DatasetManifest, seed: int, lengths: Lengths) -> None:
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
        self._peeked: dict[int, tuple[int, _Doc]] = {}
        self._barren = [0] * len(self.names)

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
        out: list[Sequence_] = []
        for _ in range(size):
            seq, st = self.next_sequence(st)
            if seq is None:
                return None
            out.append(seq)
        return out, st

    def next_sequence(self, st: OrderState) -> tuple[Sequence_ | None, OrderState]:
        if self.manifest.packing.mode == "none":
            while True:
                doc, st = self.next_document(st)
                if doc is None:
                    return None, st
                if doc.size:
                    span = Span(doc.source, doc.index, doc.epoch, doc.origin, doc.origin,
                                min(doc.stop, doc.origin + self.seq_len))
                    return (span,), replace(st, position=st.position + 1)
        spans: list[Span] = []
        fill = 0
        residue = st.residue
        while fill < self.seq_len:
            if residue is None:
                doc, st = self.next_document(st)
                if doc is None:
                    return None, st
                if not doc.size:
                    continue
                residue = Span(doc.source, doc.index, doc.epoch, doc.origin, doc.origin, doc.stop)
            take = min(self.seq_len - fill, residue.size)
            spans.append(replace(residue, stop=residue.start + take))
            fill += take
            residue = None if take == residue.size else replace(residue,
                                                                start=residue.start + take)
        return tuple(spans), replace(st, residue=residue, position=st.position + 1)

    # -- documents -------------------------------------------------------------

    def next_document(self, st: OrderState) -> tuple[_Doc | None, OrderState]:
        while True:
            if st.finished:
                return None, st
            i = self._pick(st)
            if i is None:
                return None, replace(st, finished=True)
            n = self.records[i]
            if not self.manifest.mixture.replacement and st.draws[i] >= n:
                policy = self.manifest.mixture.exhaustion
                if policy == "error":
                    raise SourceExhausted(self.names[i], st.draws[i] // n - 1)
                if policy == "stop":
                    return None, replace(st, finished=True)
                if policy == "renormalize":
                    active = tuple(on and j != i for j, on in enumerate(st.active))
                    st = replace(st, active=active, base_units=st.units)
                    continue
                # "repeat": the next draw opens the source's next epoch.
            doc = self._doc(i, st.draws[i])
            units = list(st.units)
            counted = self._unit_size(doc, counted=True)
            units[i] += counted
            st = replace(st, draws_total=st.draws_total + 1,
                         draws=_bump(st.draws, i), units=tuple(units))
            # A whole epoch of draws that count nothing (filtered out, or empty
            # under a token unit) would let the mixer serve this source forever.
            self._barren[i] = 0 if counted else self._barren[i] + 1
            if self._barren[i] > n:
                raise DataPlaneError(
                    f"source {self.names[i]!r}: a whole epoch of records passes no filter or"
                    f" holds no {self.unit}")
            if doc.accepted:
                return doc, st

    def _pick(self, st: OrderState) -> int | None:
        if not any(st.active):
            return None
        mix = self.manifest.mixture
        if mix.mode == "expected":
            u = keyed_uniform(self._mix_key, st.draws_total)
            return expected_pick(u, cumulative(self._probs, st.active))
        a, big_a = self._integer_weights(st.active)
        counts = [u - b for u, b in zip(st.units, st.base_units, strict=True)]
        total = sum(c for c, on in zip(counts, st.active, strict=True) if on)
        sizes = [self._peek_size(st, i) if on else 0 for i, on in enumerate(st.active)]
        return exact_pick(counts, sizes, a, big_a, total, st.active)

    @lru_cache(maxsize=64)  # noqa: B019 - one planner per loader; a handful of masks
    def _integer_weights(self, active: tuple[bool, ...]) -> tuple[list[int], int]:
        ws = [w if on else Fraction(0) for w, on in zip(self.weights, active, strict=True)]
        return integer_weights(ws)

    def _peek_size(self, st: OrderState, i: int) -> int:
        if self.unit in ("documents", "samples"):
            return 1
        draw = st.draws[i]
        hit = self._peeked.get(i)
        if hit is None or hit[0] != draw:
            hit = (draw, self._doc(i, draw))
            self._peeked[i] = hit
        return max(self._unit_size(hit[1], counted=False), 1)

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
            index = self._permutation(i, epoch)(k)
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
        return _Doc(i, index, epoch, origin, stop, accepted)

    @lru_cache(maxsize=256)  # noqa: B019 - bounded; a permutation is a few ints
    def _permutation(self, i: int, epoch: int) -> Permutation:
        return Permutation(self.records[i], derive_key(self._perm_key[i], epoch))

    def _mean_size(self, i: int) -> float:
        src = self.manifest.sources[i]
        if self.unit in ("documents", "samples"):
            return 1.0
        tokens = src.tokens - (src.records if self.unit == "loss_tokens" else 0)
        return max(tokens / src.records, 1.0)


def _bump(values: tuple[int, ...], i: int) -> tuple[int, ...]:
    out = list(values)
    out[i] += 1
    return tuple(out)
