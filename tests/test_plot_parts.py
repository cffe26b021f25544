"""bench/plot_parts.py, which draws ``bench/scale.py --growth``: pure.

The growth run itself is a benchmark (minutes, a real stack); what is tested
here is that the picture says what the figures say.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from bench.plot_parts import H, Panel, small_multiples
from bench.scale import GROWTH, GROWTH_PANELS, _figure, _ratio

NS = "{http://www.w3.org/2000/svg}"


def test_every_panel_labels_its_points_and_its_goal_and_skips_the_unmeasured(
        tmp_path: Path) -> None:
    panels = [Panel("lag p99", (10.0, 200.0, 3_000.0)),
              Panel("report -> fact p99 (ms)", (40.0, None, 900.0), goal=100.0),
              Panel("never measured", (None, None, None))]
    svg = small_multiples(tmp_path / "g.svg", "growth", (1_000, 10_000, 100_000), panels,
                          note="2 cores")
    root = ET.parse(svg).getroot()  # well-formed, or this raises
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert {"growth", "2 cores", "lag p99", "report -> fact p99 (ms)", "never measured"} \
        <= set(texts)
    assert {"10", "200", "3,000", "40", "900", "goal 100"} <= set(texts)
    assert texts.count("100,000") == 3  # every panel's x axis
    assert len(list(root.iter(f"{NS}circle"))) == 5  # the None points are not drawn
    assert len(list(root.iter(f"{NS}polyline"))) == 2  # a panel with no point: no line
    # Two rows of three panels at most: the height follows the panels.
    assert int(root.get("height") or 0) == H + 44


def test_the_growth_figures_are_read_from_the_fleets_results() -> None:
    results = [{"ranks": n, "lag_p99": n / 10, "report_to_fact": {"p99_ms": 50.0 * i + 50},
                "detected_s": None} for i, n in enumerate(GROWTH)]
    assert _figure(results[0], "report_to_fact.p99_ms") == 50.0
    assert _figure(results[0], "status_s") is None
    assert _ratio(results, "lag_p99") == 100.0
    assert _ratio(results, "report_to_fact.p99_ms") == 3.0
    assert _ratio(results, "detected_s") is None
    # Every panel names a figure the fleet reports, and a goal only where #37 sets one.
    assert {key for _, key, *_ in GROWTH_PANELS} <= {
        "offered_per_s", "controller_cpu_share_steady", "lag_p99", "report_to_fact.p99_ms",
        "detected_s", "next_generation_s", "status_s", "projector_lag_p99",
        "controller_peak_rss_mb"}
