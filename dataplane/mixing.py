"""Pure mixing rules: which source supplies the next item.

``exact`` is Balinski and Young's quota method, read as earliest deadline
first. With normalized weights ``w_i = a_i / A`` (exact rationals: 0.1 is
1/10) and ``c_i`` units taken from source ``i`` out of ``n`` in all, the next
item of size ``s_i`` may come from ``i`` only while ``c_i < w_i * (n + s_i)``
(it would not pass its upper quota), and among those the one whose virtual
finish ``(c_i + s_i) / w_i`` is earliest goes first (ties to the lower source
index). For unit sizes this keeps every prefix within quota:
``floor(w_i * n) <= c_i <= ceil(w_i * n)``, so ``|c_i - w_i * n| < 1``, and
the counts equal the targets exactly whenever those are integers. The integer
quota of every prefix is carried in the counts themselves (the rounding debt
is ``w_i * n - c_i``), so nothing drifts however long the stream. With sized
units (tokens) the bound is one item's size. All comparisons are integer
cross-multiplications: no float ever decides.

``expected`` draws a seeded categorical at each draw position from a keyed
uniform, so draw ``t``'s source is a pure function of ``(key, t)``: random
access by position, within the binomial bound only.

``greedy_pick`` is the largest-error baseline the benchmark compares against.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from fractions import Fraction
from math import lcm


def integer_weights(weights: Sequence[Fraction]) -> tuple[list[int], int]:
    """``(a, A)`` with ``weights[i] == a[i] / A`` exactly, for the given (normalized) weights."""
    total = sum(weights, Fraction(0))
    if total <= 0:
        raise ValueError("the weights sum to zero")
    norm = [w / total for w in weights]
    denom = lcm(*(w.denominator for w in norm))
    return [int(w * denom) for w in norm], denom


def exact_pick(counts: Sequence[int], sizes: Sequence[int], a: Sequence[int], big_a: int,
               total: int, active: Sequence[bool]) -> int:
    """The source index EDF serves next (see the module docstring).

    ``counts`` and ``total`` are in the counting unit since the mixture was last
    re-anchored; ``sizes`` are the sizes of each source's next item.
    """
    best = -1
    best_num = 0
    best_den = 1
    for i, (c, s, ai, on) in enumerate(zip(counts, sizes, a, active, strict=True)):
        if not on or ai == 0:
            continue
        if c * big_a >= ai * (total + s):  # taking it would pass its upper quota
            continue
        num = c + s  # virtual finish (c + s) / w_i = (c + s) * A / a_i; compare num/ai
        if best < 0 or num * best_den < best_num * ai:
            best, best_num, best_den = i, num, ai
    if best < 0:
        # Unreachable when sum(counts) == total and some active weight is positive:
        # sum(c_i) = n < sum(w_i * (n + s_i)), so some source is below its quota.
        raise ValueError("no source is eligible; counts and total disagree")
    return best


def expected_pick(u: float, cumulative: Sequence[float]) -> int:
    """The categorical draw for ``u`` in [0, 1) against cumulative probabilities."""
    i = bisect.bisect_right(cumulative, u * cumulative[-1])
    return min(i, len(cumulative) - 1)


def cumulative(probabilities: Sequence[float], active: Sequence[bool]) -> list[float]:
    out: list[float] = []
    acc = 0.0
    for p, on in zip(probabilities, active, strict=True):
        acc += p if on else 0.0
        out.append(acc)
    return out


def greedy_pick(counts: Sequence[int], weights: Sequence[float], total: int) -> int:
    """Largest-error blend: the source furthest below ``w_i * (n + 1)`` (float arithmetic)."""
    errs = [w * (total + 1) - c for c, w in zip(counts, weights, strict=True)]
    return max(range(len(errs)), key=errs.__getitem__)


def max_deviation(sequence: Sequence[int], weights: Sequence[Fraction]) -> Fraction:
    """``max_i max_n |c_i(n) - w_i * n|`` over every prefix of a source sequence."""
    counts = [0] * len(weights)
    worst = Fraction(0)
    for n, s in enumerate(sequence, start=1):
        counts[s] += 1
        for i, w in enumerate(weights):
            dev = abs(counts[i] - w * n)
            if dev > worst:
                worst = dev
    return worst
