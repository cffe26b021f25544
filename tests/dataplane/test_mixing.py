"""The mixing rules as pure functions: exact bounds at every prefix, expected within its bound."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.mixing import (
    cumulative,
    exact_pick,
    expected_pick,
    greedy_pick,
    integer_weights,
    max_deviation,
)

weights_st = st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=7).filter(
    lambda ws: sum(ws) > 0)


def run_exact(raw: list[int], n: int, sizes: list[list[int]] | None = None) -> list[int]:
    a, big_a = integer_weights([Fraction(w) for w in raw])
    k = len(raw)
    counts = [0] * k
    total = 0
    out = []
    active = [True] * k
    for t in range(n):
        size = [1] * k if sizes is None else [sizes[i][t % len(sizes[i])] for i in range(k)]
        i = exact_pick(counts, size, a, big_a, total, active)
        counts[i] += size[i]
        total += size[i]
        out.append(i)
    return out


@settings(max_examples=400, deadline=None)
@given(weights_st, st.integers(min_value=1, max_value=1500))
def test_exact_stays_within_quota_at_every_prefix(raw: list[int], n: int) -> None:
    a, big_a = integer_weights([Fraction(w) for w in raw])
    seq = run_exact(raw, n)
    counts = [0] * len(raw)
    for m, s in enumerate(seq, start=1):
        counts[s] += 1
        for i in range(len(raw)):
            # floor(w_i m) <= c_i <= ceil(w_i m), i.e. |c_i - (a_i/A) m| < 1, in integers
            assert abs(counts[i] * big_a - a[i] * m) < big_a, (raw, m, i, counts)
        assert raw[s] > 0, "a zero-weight source was served"


@settings(max_examples=80, deadline=None)
@given(weights_st, st.integers(min_value=2, max_value=800), st.data())
def test_exact_any_window_is_within_two(raw: list[int], n: int, data: st.DataObject) -> None:
    seq = run_exact(raw, n)
    ws = [Fraction(w, sum(raw)) for w in raw]
    lo = data.draw(st.integers(min_value=0, max_value=n - 1))
    hi = data.draw(st.integers(min_value=lo + 1, max_value=n))
    window = seq[lo:hi]
    for i, w in enumerate(ws):
        assert abs(window.count(i) - w * (hi - lo)) <= 2


@settings(max_examples=60, deadline=None)
@given(weights_st, st.integers(min_value=1, max_value=40), st.randoms(use_true_random=False))
def test_exact_with_sized_units_is_within_one_item(raw: list[int], biggest: int,
                                                   rnd: random.Random) -> None:
    k = len(raw)
    sizes = [[rnd.randint(1, biggest) for _ in range(17)] for _ in range(k)]
    a, big_a = integer_weights([Fraction(w) for w in raw])
    counts = [0] * k
    total = 0
    for t in range(600):
        size = [sizes[i][t % 17] for i in range(k)]
        i = exact_pick(counts, size, a, big_a, total, [True] * k)
        counts[i] += size[i]
        total += size[i]
        for j in range(k):
            assert abs(counts[j] * big_a - a[j] * total) <= biggest * big_a


def test_decimal_weights_are_exact_rationals() -> None:
    a, big_a = integer_weights([Fraction("0.1"), Fraction("0.2"), Fraction("0.7")])
    assert (a, big_a) == ([1, 2, 7], 10)
    seq = run_exact([1, 2, 7], 1000)
    assert max_deviation(seq, [Fraction(1, 10), Fraction(2, 10), Fraction(7, 10)]) < 1
    # at every multiple of 10 the counts are exactly the quotas: no rounding debt left
    for m in range(10, 1001, 10):
        prefix = seq[:m]
        assert [prefix.count(i) for i in range(3)] == [m // 10, 2 * m // 10, 7 * m // 10]


def test_inactive_and_zero_weight_sources_are_never_served() -> None:
    # the planner renormalizes over the active sources (source 1 was dropped)
    a, big_a = integer_weights([Fraction(1), Fraction(0), Fraction(0)])
    counts = [0, 0, 0]
    for total in range(50):
        i = exact_pick(counts, [1, 1, 1], a, big_a, total, [True, False, True])
        assert i == 0
        counts[i] += 1


def test_expected_mode_is_within_its_binomial_bound() -> None:
    probs = [0.5, 0.3, 0.15, 0.05]
    cum = cumulative(probs, [True] * 4)
    rnd = random.Random(7)
    n = 40_000
    counts = [0] * 4
    for _ in range(n):
        counts[expected_pick(rnd.random(), cum)] += 1
    for c, p in zip(counts, probs, strict=True):
        sigma = math.sqrt(n * p * (1 - p))
        assert abs(c - p * n) <= 5 * sigma


def test_expected_pick_edges() -> None:
    cum = cumulative([0.25, 0.0, 0.75], [True, True, True])
    assert expected_pick(0.0, cum) == 0
    assert expected_pick(0.2499, cum) == 0
    assert expected_pick(0.25, cum) == 2  # the zero-probability source is skipped
    assert expected_pick(0.999999, cum) == 2
    assert expected_pick(0.1, cumulative([0.25, 0.0, 0.75], [False, True, True])) == 2


def test_greedy_baseline_is_a_valid_blend() -> None:
    ws = [0.61, 0.3, 0.09]
    counts = [0, 0, 0]
    seq = []
    for total in range(3000):
        i = greedy_pick(counts, ws, total)
        counts[i] += 1
        seq.append(i)
    exact = run_exact([61, 30, 9], 3000)
    fr = [Fraction(61, 100), Fraction(30, 100), Fraction(9, 100)]
    assert max_deviation(exact, fr) < 1
    # the benchmark's baseline must be a sensible blend, or the comparison means nothing
    assert max_deviation(seq, fr) < 2


def test_zero_weights_are_refused() -> None:
    with pytest.raises(ValueError):
        integer_weights([Fraction(0), Fraction(0)])
