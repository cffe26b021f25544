"""controller/interval.py: Young's interval and its expected waste (docs/architecture.md §7),
and durations read and written. Pure arithmetic, no broker.

The command on top of it, ``runledger interval``, is tests/runledger/commands/test_interval.py.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.interval import (
    assumption_warnings,
    daly_interval_s,
    expected_waste,
    format_duration,
    parse_duration,
    waste_table,
    young_interval_s,
)

# C, M, R, D triples: seconds-scale stalls against hours-to-weeks of MTBF, and odd ones.
CASES = [
    (30.0, 21_600.0, 120.0, 60.0),
    (50.0, 10_000.0, 100.0, 20.0),
    (0.5, 86_400.0, 0.0, 0.0),
    (600.0, 3600.0, 900.0, 300.0),
    (1e-3, 1e9, 1.0, 1.0),
]


def first_order(t: float, c: float, m: float, r: float, d: float) -> float:
    return expected_waste(t, c, m, r, d).total


# --- the pure arithmetic ------------------------------------------------------


@pytest.mark.parametrize(("c", "m", "r", "d"), CASES)
def test_young_interval_is_sqrt_2cm_and_minimises_the_waste(
    c: float, m: float, r: float, d: float
) -> None:
    t = young_interval_s(c, m)
    assert t == pytest.approx(math.sqrt(2 * c * m), rel=1e-15)
    at_t = first_order(t, c, m, r, d)
    for eps in (1e-1, 1e-2, 1e-3):
        for k in (1 - eps, 1 + eps):
            assert at_t <= first_order(t * k, c, m, r, d)
    # at the optimum both T-dependent terms are equal: C/T == T/(2M)
    w = expected_waste(t, c, m, r, d)
    assert w.checkpoint_overhead == pytest.approx(w.lost_work, rel=1e-12)


@given(
    c=st.floats(min_value=1e-3, max_value=1e5),
    m=st.floats(min_value=1.0, max_value=1e9),
    rd=st.floats(min_value=0.0, max_value=1e5),
    k=st.floats(min_value=1e-3, max_value=1e3),
)
def test_no_interval_beats_young(c: float, m: float, rd: float, k: float) -> None:
    t = young_interval_s(c, m)
    best = first_order(t, c, m, rd, 0.0)
    assert best <= first_order(t * k, c, m, rd, 0.0) * (1 + 1e-12)
    # and the closed form of the optimum: sqrt(2C/M) + (R+D)/M
    assert best == pytest.approx(math.sqrt(2 * c / m) + rd / m, rel=1e-9)


def test_the_terms_sum_to_the_total() -> None:
    w = expected_waste(1000.0, 50.0, 10_000.0, 100.0, 20.0)
    assert (w.checkpoint_overhead, w.lost_work, w.recovery) == pytest.approx((0.05, 0.05, 0.012))
    assert w.total == pytest.approx(0.112)
    assert w.total == w.checkpoint_overhead + w.lost_work + w.recovery
    assert w.effective == 1 - w.total
    doc = w.to_json()
    assert doc["total"] == doc["checkpoint_overhead"] + doc["lost_work"] + doc["recovery"]


def test_detect_defaults_to_zero_and_adds_to_restore() -> None:
    assert expected_waste(100.0, 1.0, 1000.0, 50.0).recovery == pytest.approx(0.05)
    assert expected_waste(100.0, 1.0, 1000.0, 30.0, 20.0).recovery == pytest.approx(0.05)


@pytest.mark.parametrize("args", [(0.0, 1.0, 1.0, 0.0), (1.0, 1.0, 0.0, 0.0),
                                  (1.0, -1.0, 1.0, 0.0), (1.0, 1.0, 1.0, -1.0)])
def test_expected_waste_refuses_impossible_inputs(args: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        expected_waste(*args)


def test_daly_against_a_hand_computed_value() -> None:
    # C=50, M=10000: sqrt(2CM)=1000, sqrt(C/2M)/3=0.05/3, C/18M=1/3600
    # 1000*(1 + 1/60 + 1/3600) - 50 = 1000 + 16.666.. + 0.2777.. - 50 = 966 + 17/18
    assert daly_interval_s(50.0, 10_000.0) == pytest.approx(966 + 17 / 18, rel=1e-12)
    # 30 s against 6 h: slightly shorter than Young's 1138.4 s
    assert daly_interval_s(30.0, 21_600.0) == pytest.approx(1118.51, abs=0.01)


def test_daly_needs_c_below_2m_and_tends_to_young() -> None:
    assert daly_interval_s(2.0, 1.0) is None
    assert daly_interval_s(5.0, 1.0) is None
    assert daly_interval_s(1.99, 1.0) is not None
    daly = daly_interval_s(1e-3, 1e9)
    assert daly is not None
    assert daly == pytest.approx(young_interval_s(1e-3, 1e9), rel=1e-4)


def test_the_table_brackets_young_and_marks_it() -> None:
    rows = waste_table(30.0, 21_600.0, 120.0, 60.0)
    t = young_interval_s(30.0, 21_600.0)
    [best] = [r for r in rows if r.optimal]
    assert best.label == "T"
    assert best.interval_s == t
    assert best.waste == expected_waste(t, 30.0, 21_600.0, 120.0, 60.0)
    labels = [r.label for r in rows]
    for multiple in ("T/4", "T/2", "T/sqrt2", "T*sqrt2", "2T", "4T"):
        assert multiple in labels
    # round intervals inside T/4..4T (284.6 s .. 4553.7 s), and none outside
    assert {"5m", "15m", "30m", "1h"} <= set(labels)
    assert "1m" not in labels
    assert "2h" not in labels
    intervals = [r.interval_s for r in rows]
    assert intervals == sorted(intervals)
    assert min(r.waste.total for r in rows) == best.waste.total
    assert best.checkpoints_per_day == pytest.approx(86_400 / t)


def test_a_round_interval_equal_to_t_is_not_repeated() -> None:
    rows = waste_table(1800.0, 3600.0, 0.0)  # T = sqrt(2*1800*3600) = 3600
    assert [r.interval_s for r in rows].count(3600.0) == 1
    assert [r.label for r in rows if r.interval_s == 3600.0] == ["T"]


def test_warnings_where_c_is_not_much_smaller_than_m() -> None:
    assert assumption_warnings(30.0, 21_600.0, 120.0, 60.0) == []
    [rough, no_progress] = assumption_warnings(3600.0, 3600.0, 0.0)
    assert "C << M" in rough
    assert "no progress" in no_progress
    assert any("Daly" in w for w in assumption_warnings(3.0, 1.0, 0.0))


# --- durations -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("1.5", 1.5),
        (" 30 ", 30.0),
        ("0", 0.0),
        (".5", 0.5),
        ("1e3", 1000.0),
        ("500ms", 0.5),
        ("30s", 30.0),
        ("30m", 1800.0),
        ("5min", 300.0),
        ("6h", 21_600.0),
        ("1.5h", 5400.0),
        ("2d", 172_800.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("1d2h3m4s5ms", 86_400 + 7200 + 180 + 4 + 0.005),
        ("2 h", 7200.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("-5", "negative"),
        ("-1h", "negative"),
        ("nan", "finite"),
        ("NaN", "finite"),
        ("inf", "finite"),
        ("1e999", "finite"),
        ("5x", "unknown unit 'x'"),
        ("6H", "unknown unit 'H'"),
        ("2w", "unknown unit 'w'"),
        ("abc", "not a duration"),
        ("h", "not a duration"),
        ("1h30", "needs a unit"),
        ("30m1h", "largest first"),
        ("1h1h", "largest first"),
        ("1m1min", "largest first"),
        ("1,5", "not a duration"),
    ],
)
def test_parse_duration_refuses(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0s"), (0.5, "500ms"), (30.0, "30s"), (1.5, "1.5s"), (60.0, "1m"),
     (1138.42, "18m58s"), (5400.0, "1h30m"), (21_600.0, "6h"), (90_061.0, "1d1h1m1s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.floats(min_value=0.0, max_value=1e10))
def test_format_duration_reads_back(seconds: float) -> None:
    back = parse_duration(format_duration(seconds))
    if seconds >= 60:
        assert abs(back - seconds) <= 0.5  # whole seconds from a minute up
    else:
        assert back == pytest.approx(seconds, rel=5e-3, abs=1e-12)  # three digits below
