"""The report's loss and step-time charts (queries/report_curves.py), from query rows."""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from queries.report_curves import (
    CH,
    CW,
    LEFT,
    MAX_POINTS,
    RIGHT,
    chart,
    legend,
    section,
    ticks,
)


def row(gen: int, step: int, loss: float | None, ms: float = 100.0,
        lost: bool = False) -> dict[str, Any]:
    return {"generation": gen, "step": step, "loss": loss, "step_time_ms": ms,
            "input_wait_ms": 1.0, "lost": lost}


def restart_rows() -> list[dict[str, Any]]:
    """g1 steps 1-25 (21-25 redone), g2 steps 21-30: the crash-and-recover run."""
    return ([row(1, s, 4 / (1 + s / 10), lost=s > 20) for s in range(1, 26)]
            + [row(2, s, 4 / (1 + s / 10), ms=120.0) for s in range(21, 31)])


def lines(svg: str) -> list[tuple[str, str, list[tuple[float, float]]]]:
    out = []
    for m in re.finditer(r'<polyline class="([^"]+)" data-generation="(\d+)" points="([^"]+)"',
                         svg):
        pts = [tuple(map(float, p.split(","))) for p in m.group(3).split()]
        out.append((m.group(1), m.group(2), pts))
    return out


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e6, 1e6), st.floats(0, 1e6), st.integers(2, 10))
def test_ticks_cover_the_range_in_round_even_steps(lo: float, width: float, target: int) -> None:
    hi = lo + width
    t = ticks(lo, hi, target)
    assert t[0] <= lo and t[-1] >= hi - 1e-9 * max(1, abs(hi))
    assert 2 <= len(t) <= 3 * target + 2 and t == sorted(set(t))
    step = (t[-1] - t[0]) / (len(t) - 1)
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert min(abs(mantissa - m) for m in (1.0, 2.0, 5.0, 10.0)) < 1e-6, t


def test_a_restart_draws_one_line_per_generation_and_dashes_the_redone_steps() -> None:
    svg = chart(restart_rows(), "loss", chart_id="loss-curve", title="loss", unit="loss",
                missing="none")
    drawn = lines(svg)
    assert [(c, g) for c, g, _ in drawn] == [
        ("curve-line", "1"), ("curve-line lost", "1"), ("curve-line", "2")]
    kept1, lost1, kept2 = (pts for _, _, pts in drawn)
    assert len(kept1) == 20 and len(lost1) == 6 and len(kept2) == 10  # lost starts at 20
    assert lost1[0] == kept1[-1]
    # The loss falls: every line goes down the page (SVG y grows downward).
    for pts in (kept1, kept2):
        assert all(b[1] > a[1] for a, b in itertools.pairwise(pts))
    # g2 resumes where g1's kept line ended (step 21 is just right of step 20).
    assert kept2[0][0] > kept1[-1][0]
    assert 'stroke-dasharray="5 3"' in svg.split('class="curve-line lost"')[1].split(">")[0]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.floats(-1e4, 1e4)), min_size=1, max_size=60))
def test_every_point_lies_inside_the_plot(values: list[tuple[int, float]]) -> None:
    rows = [row(g, i + 1, v) for i, (g, v) in enumerate(sorted(values, key=lambda p: p[0]))]
    svg = chart(rows, "loss", chart_id="c", title="t", unit="u", missing="m")
    for _, _, pts in lines(svg):
        for x, y in pts:
            assert 0 <= x <= CW and 0 <= y <= CH, (x, y)


def test_a_long_run_is_thinned_but_keeps_its_first_and_last_step() -> None:
    rows = [row(1, s, 1.0 / s) for s in range(1, 10_001)]
    (_, _, pts), = lines(chart(rows, "loss", chart_id="c", title="t", unit="u", missing="m"))
    assert len(pts) <= MAX_POINTS + 1
    steps = [x for x, _ in pts]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    # Step 1 sits just right of the axis's 0, step 10,000 at the axis's end.
    assert LEFT < steps[0] < LEFT + 0.1 and steps[-1] == CW - RIGHT


def test_a_job_that_reports_no_loss_is_told_how_to() -> None:
    rows = [row(1, s, None) for s in range(1, 5)]
    html = section(rows)
    assert 'id="loss-curve-empty"' in html and "loss=" in html
    assert 'id="step-time-curve"' in html  # the step times are still drawn
    assert "no steps committed yet" in section([])


def test_the_legend_names_each_generation_only_when_there_are_several() -> None:
    assert legend([row(1, 1, 1.0)]) == ""
    two = legend(restart_rows())
    assert "generation 1" in two and "generation 2" in two and "redone" in two
