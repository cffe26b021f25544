"""Tests for dataplane.permute: bijection, inverse, determinism, uniformity, memory."""

from __future__ import annotations

import hashlib
import itertools
import tracemalloc
from collections import Counter
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.permute import (
    ALGORITHM,
    Permutation,
    derive_key,
    keyed_hash,
    keyed_hash_many,
    keyed_uniform,
    mix64,
    mix64_many,
)

MASK64 = (1 << 64) - 1
KEY = derive_key("test-dataset", ALGORITHM, 1234, "web", 0)

# Chi-square critical values at p = 0.001 (standard tables), by degrees of freedom.
# Every test below uses fixed keys, so each is a deterministic check, not a flaky draw.
CHI2_001 = {4: 18.467, 9: 27.877, 15: 37.697, 81: 126.08}

small = settings(deadline=None, max_examples=60)


def chi2(observed: npt.NDArray[np.int64], expected: npt.NDArray[np.float64]) -> float:
    assert int(observed.sum()) == round(float(expected.sum()))
    return float((((observed - expected) ** 2) / expected).sum())


def bucket_expected(n: int, buckets: int, total: int) -> npt.NDArray[np.float64]:
    """Expected counts when a uniform value in [0, n) is bucketed by ``v * buckets // n``."""
    sizes = np.bincount(np.arange(n) * buckets // n, minlength=buckets)
    return sizes.astype(np.float64) * total / n


# -- bijection ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n", [1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 63, 64, 65, 100, 1000, 4095, 65535, 65536,
          65537, 10**6]
)
def test_bijection_exhaustive(n: int) -> None:
    p = Permutation(n, KEY)
    idx = np.arange(n)
    out = p.many(idx)
    assert out.dtype == np.int64
    assert np.array_equal(np.sort(out), idx)
    assert np.array_equal(p.inverse_many(out), idx)
    assert np.array_equal(out[p.inverse_many(idx)], idx)
    if n <= 4096:
        assert out.tolist() == [p(i) for i in range(n)]
        assert [p.inverse(j) for j in out.tolist()] == list(range(n))


@pytest.mark.parametrize("rounds", [1, 2, 3, 8])
def test_bijection_other_round_counts(rounds: int) -> None:
    p = Permutation(70_000, KEY, rounds=rounds)
    assert np.array_equal(np.sort(p.many(np.arange(70_000))), np.arange(70_000))


@pytest.mark.parametrize("n", [2**40, 2**40 + 3, 10**12, 2**62 - 1, 2**62])
def test_sampled_large_n(n: int) -> None:
    rng = np.random.default_rng(n % 1000)
    idx = np.unique(np.concatenate([rng.integers(0, n, size=100_000, dtype=np.int64), [0, n - 1]]))
    p = Permutation(n, KEY)
    out = p.many(idx)
    assert out.min() >= 0 and out.max() < n
    assert np.unique(out).size == idx.size  # distinct inputs, distinct outputs
    assert np.array_equal(p.inverse_many(out), idx)
    for i in idx[:: max(1, idx.size // 200)].tolist():  # scalar path agrees
        assert p(i) == int(out[np.searchsorted(idx, i)])
        assert p.inverse(p(i)) == i


@small
@given(
    n=st.integers(1, 2**62),
    key=st.integers(0, MASK64),
    rounds=st.integers(1, 8),
    data=st.data(),
)
def test_scalar_equals_vectorised(n: int, key: int, rounds: int, data: st.DataObject) -> None:
    idx = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=50))
    p = Permutation(n, key, rounds)
    out = p.many(np.array(idx, dtype=np.int64))
    assert out.tolist() == [p(i) for i in idx]
    assert all(0 <= j < n for j in out.tolist())
    assert p.inverse_many(out).tolist() == idx
    assert [p.inverse(j) for j in out.tolist()] == idx
    assert p.many(np.array(idx, dtype=np.uint64)).tolist() == out.tolist()


# sha256 (first 16 hex digits) of many() and inverse_many() over 50,000 random indices,
# as the implementation before the compacted cycle walk (#18) computed them: a faster
# vectorised path must give the same order, walk tails and chunk edges included.
PRE_18_DIGESTS = [
    "bc54d385d3cae34c", "93d2d990f89f966a", "555b299607c27728", "1e020702ef64fa90",
    "f2feda7130d0fae0", "5946ae54625b392b", "53183b1ac6db536c", "0d39549777a04b08",
    "c3dccae08636c997", "d57ecf144c626ab1", "9abe5e3f02882d02", "03eb9eaad7aee1af",
]  # fmt: skip


def test_vectorised_equals_the_implementation_before_18() -> None:
    key = derive_key("pin", ALGORITHM, 7, "epoch", 0)
    rng = np.random.default_rng(18)
    digests = []
    for n in (65, 1000, 10**6 + 3, 10**8, 2**40 + 1, 2**62):
        idx = rng.integers(0, n, 50_000, dtype=np.int64)
        p = Permutation(n, key)
        for arr in (p.many(idx), p.inverse_many(idx)):
            digests.append(hashlib.sha256(arr.tobytes()).hexdigest()[:16])
    assert digests == PRE_18_DIGESTS


@settings(deadline=None, max_examples=25)
@given(
    bits=st.integers(7, 40),
    key=st.integers(0, MASK64),
    size=st.integers(1, 40_000),
    seed=st.integers(0, 2**32 - 1),
)
def test_many_equals_scalar_on_large_arrays(bits: int, key: int, size: int, seed: int) -> None:
    # Arrays past one chunk (2**14), so the cross-chunk walk tail is exercised; small
    # and mid-sized n, where cycle walking takes the most passes.
    n = np.random.default_rng(seed).integers(1 << (bits - 1), 1 << bits)
    p = Permutation(int(n), key)
    idx = np.random.default_rng(seed).integers(0, n, size, dtype=np.int64)
    out = p.many(idx)
    sample = np.random.default_rng(seed + 1).integers(0, size, 200)
    assert [int(out[i]) for i in sample] == [p(int(idx[i])) for i in sample]
    assert p.inverse_many(out).tolist() == idx.tolist()


def test_shape_and_dtypes() -> None:
    p = Permutation(1000, KEY)
    grid = np.arange(12, dtype=np.int32).reshape(3, 4)
    out = p.many(grid)
    assert out.shape == (3, 4) and out.dtype == np.int64
    assert out.ravel().tolist() == [p(i) for i in range(12)]
    assert p.many(np.array([], dtype=np.int64)).shape == (0,)
    assert p.many([5, 6]).tolist() == [p(5), p(6)]
    assert p(np.int64(7)) == p(7)
    strided = np.arange(200)[::3]
    assert p.many(strided).tolist() == [p(i) for i in range(0, 200, 3)]


# -- determinism and keys --------------------------------------------------------------


def test_same_key_same_permutation_different_key_different() -> None:
    n = 1000
    a = Permutation(n, derive_key("ds", ALGORITHM, 1, "web", 0)).many(np.arange(n))
    again = Permutation(n, derive_key("ds", ALGORITHM, 1, "web", 0)).many(np.arange(n))
    assert np.array_equal(a, again)
    for other in [
        derive_key("ds", ALGORITHM, 2, "web", 0),  # seed
        derive_key("ds", ALGORITHM, 1, "web", 1),  # epoch
        derive_key("ds2", ALGORITHM, 1, "web", 0),  # dataset
        derive_key("ds", "rl-feistel-v0", 1, "web", 0),  # algorithm
    ]:
        b = Permutation(n, other).many(np.arange(n))
        assert int((a == b).sum()) < 20  # a random pair agrees in ~1 place of 1000


def test_pinned_values() -> None:
    # These pin the order itself. If one changes, every recorded run's sample order changes:
    # that needs a new ALGORITHM name (and the pins recomputed), never a silent edit.
    assert ALGORITHM == "rl-feistel-v1"
    assert derive_key("runledger", ALGORITHM, 0, "web", 1) == 0x175832BB43D56C58
    key = derive_key("pin", ALGORITHM, 7, "epoch", 0)
    assert key == 0x3C5E2BA41732A47F
    assert Permutation(10**6, key).many(np.arange(8)).tolist() == [
        986988, 380565, 239777, 153919, 439517, 816460, 1315, 876144,
    ]  # fmt: skip
    assert Permutation(1000, key).many(np.arange(10)).tolist() == [
        543, 465, 200, 17, 429, 236, 776, 737, 882, 957,
    ]  # fmt: skip
    assert Permutation(2**62, key)(12345) == 1567005361540600700


def test_hash_matches_splitmix64_reference() -> None:
    # keyed_hash(0, i) is the splitmix64 stream from state 0 (mix64(0) == 0); reference
    # outputs from Vigna's splitmix64.c.
    assert [keyed_hash(0, i) for i in range(3)] == [
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
    ]


# -- hashing helpers --------------------------------------------------------------------


@small
@given(st.lists(st.integers(0, MASK64), min_size=1, max_size=40))
def test_mix64_many_matches_scalar(xs: list[int]) -> None:
    arr = np.array(xs, dtype=np.uint64)
    assert mix64_many(arr).tolist() == [mix64(x) for x in xs]
    assert arr.tolist() == xs  # input untouched


@small
@given(st.integers(0, MASK64), st.lists(st.integers(0, MASK64), min_size=1, max_size=40))
def test_keyed_hash_many_matches_scalar(key: int, xs: list[int]) -> None:
    out = keyed_hash_many(key, np.array(xs, dtype=np.uint64))
    assert out.dtype == np.uint64
    assert out.tolist() == [keyed_hash(key, x) for x in xs]


def test_signed_inputs_wrap_like_64_bit() -> None:
    xs = [-1, -(2**63), 0, 2**63 - 1]
    arr = np.array(xs, dtype=np.int64)
    assert mix64_many(arr).tolist() == [mix64(x & MASK64) for x in xs]
    assert keyed_hash_many(9, arr).tolist() == [keyed_hash(9, x & MASK64) for x in xs]
    assert keyed_hash(9, -1) == keyed_hash(9, MASK64)


def test_mix64_is_a_bijection_sample() -> None:
    xs = np.arange(200_000, dtype=np.uint64) * np.uint64(0x1000_0001)
    assert np.unique(mix64_many(xs)).size == xs.size


def test_keyed_uniform() -> None:
    us = [keyed_uniform(KEY, i) for i in range(20_000)]
    assert all(0.0 <= u < 1.0 for u in us)
    assert abs(float(np.mean(us)) - 0.5) < 0.01  # sd of the mean ~ 0.002
    counts = np.bincount((np.array(us) * 10).astype(np.int64), minlength=10)
    assert chi2(counts, np.full(10, 2000.0)) < CHI2_001[9]
    assert keyed_uniform(KEY, 3) == (keyed_hash(KEY, 3) >> 11) / 2**53


def test_derive_key() -> None:
    parts = ("ds", ALGORITHM, 1, "web", 0)
    k = derive_key(*parts)
    assert k == derive_key(*parts) and 0 <= k <= MASK64
    variants: list[tuple[str | int, ...]] = [
        ("ds", ALGORITHM, "1", "web", 0),  # "1" vs 1
        ("ds", ALGORITHM, 1, "web", "0"),
        ("ds", ALGORITHM, 2, "web", 0),
        ("ds", ALGORITHM, 1, "web", 1),
        ("dsx", ALGORITHM, 1, "web", 0),
        ("ds", ALGORITHM, 1, "web"),
        ("ds", ALGORITHM, 1, "web", 0, 0),
        ("d", "s", ALGORITHM, 1, "web", 0),  # no concatenation ambiguity
        ("ds", ALGORITHM, 1, "we", "b", 0),
        ("ds", ALGORITHM, -1, "web", 0),
        ("ds", ALGORITHM, 2**64 + 1, "web", 0),
    ]
    keys = {derive_key(*v) for v in variants}
    assert len(keys) == len(variants) and k not in keys
    assert derive_key() != derive_key("")
    with pytest.raises(TypeError):
        derive_key("ds", True)
    with pytest.raises(TypeError):
        derive_key("ds", 1.0)  # type: ignore[arg-type]


# -- errors -----------------------------------------------------------------------------


def test_errors() -> None:
    for bad_n in (0, -5, 2**62 + 1):
        with pytest.raises(ValueError, match="n must be"):
            Permutation(bad_n, KEY)
    with pytest.raises(ValueError, match="key"):
        Permutation(10, -1)
    with pytest.raises(ValueError, match="key"):
        Permutation(10, 2**64)
    with pytest.raises(ValueError, match="rounds"):
        Permutation(10, KEY, rounds=0)
    p = Permutation(10, KEY)
    for bad in (-1, 10, 2**70):
        with pytest.raises(IndexError, match=rf"index {bad} outside \[0, 10\)"):
            p(bad)
        with pytest.raises(IndexError, match=rf"index {bad} outside \[0, 10\)"):
            p.inverse(bad)
    with pytest.raises(ValueError, match=r"index 10 at position 2 outside \[0, 10\)"):
        p.many(np.array([0, 9, 10, 3]))
    with pytest.raises(ValueError, match=r"index -1 at position 1"):
        p.inverse_many(np.array([0, -1]))
    with pytest.raises(ValueError, match=r"index 11 at position 0"):
        p.many(np.array([11], dtype=np.uint64))
    with pytest.raises(TypeError):
        p.many(np.array([1.0, 2.0]))


# -- statistical quality ----------------------------------------------------------------


@pytest.mark.parametrize("n", [5, 16, 1000])
def test_position_uniform_across_keys(n: int) -> None:
    """Over many keys, where a given index lands (and what lands at a given position)
    is uniform: chi-square over min(n, 10) equal-width buckets."""
    keys = 2000
    buckets = min(n, 10)
    perms = [Permutation(n, derive_key("uniformity", k)) for k in range(keys)]
    expected = bucket_expected(n, buckets, keys)
    for i in sorted({0, 1, n // 2, n - 1}):
        for where in ([p(i) for p in perms], [p.inverse(i) for p in perms]):
            counts = np.bincount(np.array(where) * buckets // n, minlength=buckets)
            assert chi2(counts, expected) < CHI2_001[buckets - 1], (n, i)


def test_small_n_all_positions_uniform() -> None:
    """n = 16 (2-bit halves, no cycle walking) over 4000 keys: each index's position."""
    n, keys = 16, 4000
    table = np.array(
        [Permutation(n, derive_key("small", k)).many(np.arange(n)) for k in range(keys)]
    )
    for i in range(n):
        counts = np.bincount(table[:, i], minlength=n)
        assert chi2(counts, np.full(n, keys / n)) < CHI2_001[15], i


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_whole_order_uniform_tiny_n(n: int) -> None:
    """For tiny n every one of the n! orders is equally likely over keys.

    Tiny domains use a keyed Fisher-Yates table: with 2-bit halves (5 <= n <= 16) a
    Feistel network yields only even permutations of its 16 points, and the order it
    induced on [0, 5) measured chi-square 863 on 119 df (200 keys per order)."""
    orders = list(itertools.permutations(range(n)))
    keys = 200 * len(orders)
    seen = Counter(
        tuple(Permutation(n, derive_key("orders", k)).many(np.arange(n)).tolist())
        for k in range(keys)
    )
    assert set(seen) == set(orders)
    counts = np.array([seen[o] for o in orders])
    df = len(orders) - 1
    critical = {1: 10.828, 5: 20.515, 23: 49.728, 119: 172.5}[df]  # chi-square, p = 0.001
    assert chi2(counts, np.full(len(orders), 200.0)) < critical


def test_pairs_across_keys() -> None:
    """(p(0), p(1)) over keys: the gap p(1) - p(0) mod n is uniform on [1, n)."""
    n, keys = 1000, 2000
    gaps = []
    for k in range(keys):
        p = Permutation(n, derive_key("pairs", k))
        gaps.append((p(1) - p(0)) % n - 1)  # in [0, n - 1)
    counts = np.bincount(np.array(gaps) * 10 // (n - 1), minlength=10)
    assert chi2(counts, bucket_expected(n - 1, 10, keys)) < CHI2_001[9]


def test_one_key_joint_uniform() -> None:
    """For one key and n = 10**6: input block vs output block is independent (10 x 10)."""
    n = 10**6
    out = Permutation(n, KEY).many(np.arange(n))
    table = np.zeros((10, 10), dtype=np.int64)
    np.add.at(table, (np.arange(n) * 10 // n, out * 10 // n), 1)
    assert chi2(table.ravel(), np.full(100, n / 100)) < CHI2_001[81]


def test_one_key_consecutive_outputs_uncorrelated() -> None:
    n, m = 10**8, 200_000
    out = Permutation(n, KEY).many(np.arange(m)).astype(np.float64)
    diff = np.diff(out)
    # Ascents of a random sequence: mean (m-1)/2, variance (m+1)/12.
    ascents = int((diff > 0).sum())
    assert abs(ascents - (m - 1) / 2) < 5 * np.sqrt((m + 1) / 12)
    # Neighbouring outputs are uncorrelated (|r| sd ~ 1/sqrt(m)).
    assert abs(float(np.corrcoef(out[:-1], out[1:])[0, 1])) < 5 / np.sqrt(m)
    # Outputs of a contiguous input block spread uniformly, and so do the gaps.
    counts = np.bincount((out * 10 // n).astype(np.int64), minlength=10)
    assert chi2(counts, np.full(10, m / 10)) < CHI2_001[9]
    gaps = (diff.astype(np.int64) % n) * 10 // n
    assert chi2(np.bincount(gaps, minlength=10), np.full(10, (m - 1) / 10)) < CHI2_001[9]
    # Low bit of the output does not follow the low bit of the input.
    same_parity = int(((out.astype(np.int64) & 1) == (np.arange(m) & 1)).sum())
    assert abs(same_parity - m / 2) < 5 * np.sqrt(m / 4)


# -- memory -----------------------------------------------------------------------------


def _peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("n", [10**12, 2**62, 2**60 + 1])
def test_memory_proportional_to_input_only(n: int) -> None:
    m = 100_000
    idx = np.arange(m, dtype=np.int64)
    p = Permutation(n, KEY)
    for peak in (_peak(lambda: p.many(idx)), _peak(lambda: p.inverse_many(idx))):
        assert 8 * m <= peak < 40 * m, (n, peak)  # the int64 result alone is 8 * m


def test_construction_is_constant_memory() -> None:
    assert _peak(lambda: Permutation(2**62, KEY)) < 10_000
    assert _peak(lambda: Permutation(2**62, KEY, rounds=6)(2**62 - 1)) < 10_000
