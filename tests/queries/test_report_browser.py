"""The run report as a person sees it: a succeeded and a failed run's page in headless
Chromium at a laptop's and a narrow window's width, measured in the browser.

Each page is rendered twice: once as written, for a screenshot kept under
``$RUNLEDGER_TEST_ARTIFACTS`` (default ``test-artifacts/`` in the checkout, ignored
by git), and once as a copy with a measuring script appended (and the page's
no-script policy lifted for it), whose findings Chromium writes into the DOM it
dumps: the boxes of the why section, the curves and every chart label as laid
out. The assertions are what a user must see: why a failed run failed on the
first screen with its output wrapped, the loss curve, no label on another, and
no page wider than the window.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest

from queries.report import report
from tests.queries.test_report import SlowR1, browse, png_rows
from tests.queries.timeline import Timeline, crash_and_recover, project

WIDTHS = {"laptop": (1366, 900), "narrow": (800, 1000)}
ARTIFACTS = Path(os.environ.get("RUNLEDGER_TEST_ARTIFACTS")
                 or Path(__file__).resolve().parents[2] / "test-artifacts") / "report"

_MEASURE = """<script>
(() => {
  const box = e => { if (!e) return null; const b = e.getBoundingClientRect();
                     return [b.left, b.top, b.right, b.bottom]; };
  const id = i => document.getElementById(i);
  const out = {
    viewport: [innerWidth, innerHeight],
    page_width: document.documentElement.scrollWidth,
    sections: [...document.querySelectorAll('main > section, main > div > section')]
                .map(s => s.id),
    why: box(id('why')), why_output: box(id('why-output')),
    why_output_clipped: id('why-output') ?
      id('why-output').scrollWidth > id('why-output').clientWidth + 1 : null,
    loss: box(id('loss-curve')),
    loss_lines: document.querySelectorAll('#loss-curve polyline').length,
    step_time_lines: document.querySelectorAll('#step-time-curve polyline').length,
    labels: [...document.querySelectorAll('#timeline-svg text')]
              .map(t => ({text: t.textContent, cls: t.getAttribute('class') || '',
                          box: box(t)})),
    devices: id('goodput-facts') ? id('goodput-facts').textContent : null,
  };
  const pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def crowded_failed_run() -> Timeline:
    """Four generations a few steps each, restarts in quick succession, the last
    crash escalated: labels that once sat on one another; the run ends failed."""
    tl = Timeline(run_id="run-f")
    tl.submit()
    tl.admit()
    step = 0
    for gen in range(1, 5):
        tl.start(gen, resume=step if gen > 1 else None,
                 reason="restart after worker_crash" if gen > 1 else None)
        tl.confirm(gen)
        for _ in range(3):
            step += 1
            tl.step(gen, step, ms=40)
        tl.exit(gen)
        tl.advance(15)
        tl.fail(gen, action="restart" if gen < 4 else "escalate")
        tl.advance(20)
    tl.finish(4, outcome="failed")
    return tl


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("pages")
    succeeded = SlowR1()
    crash_and_recover(succeeded)
    written = {}
    for name, tl in (("succeeded", succeeded), ("failed", crowded_failed_run())):
        con = duckdb.connect()
        project(con, tl)
        written[name] = out / f"{name}.html"
        written[name].write_text(report(con, tl.run_id), encoding="utf-8")
        con.close()
    return written


def measure(page: Path, tmp: Path, size: tuple[int, int]) -> dict[str, Any]:
    html = page.read_text(encoding="utf-8")
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
    probe = tmp / f"probe-{page.stem}-{size[0]}.html"
    probe.write_text(html.replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    dom = browse(probe, tmp, "--dump-dom", f"--window-size={size[0]},{size[1]}").stdout
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, f"the measuring script did not run: {dom[-500:]}"
    text = found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
    return dict(json.loads(text.replace("&amp;", "&")))


def overlaps(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.parametrize("width", sorted(WIDTHS))
@pytest.mark.parametrize("name", ["succeeded", "failed"])
def test_what_a_person_sees_first(pages: dict[str, Path], tmp_path: Path, name: str,
                                  width: str) -> None:
    size = WIDTHS[width]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"{name}-{width}.png"
    browse(pages[name], tmp_path, f"--screenshot={shot}", f"--window-size={size[0]},2400")
    w, h, rows = png_rows(shot.read_bytes(), 40)
    assert (w, h) == (size[0], 2400) and len({px for r in rows for px in r}) > 2

    seen = measure(pages[name], tmp_path, size)
    vw, vh = seen["viewport"]
    assert seen["page_width"] <= vw, f"the page scrolls sideways at {vw} px"
    if name == "failed":
        assert seen["sections"][0] == "why", seen["sections"]
        # Why it failed, and its last output, on the first screen, wrapped in the window.
        assert seen["why"][1] < vh / 2 and seen["why_output"][1] < vh, seen["why_output"]
        assert seen["why_output"][2] <= vw and seen["why_output_clipped"] is False
    else:
        assert "why" not in seen["sections"]
    # A loss curve with a line per generation, inside the window.
    gens = 2 if name == "succeeded" else 4
    assert seen["loss_lines"] >= gens and seen["step_time_lines"] >= gens
    left, _, right, _ = seen["loss"]
    assert 0 <= left < right <= vw
    # Every label of the timeline as Chromium laid it out: none on another.
    labels = [lab for lab in seen["labels"] if "label" in lab["cls"].split()]
    assert len(labels) >= (3 if name == "succeeded" else 5), labels
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            assert not overlaps(a["box"], b["box"]), (a, b)
    assert "CPU hours" in seen["devices"] and "2 x cpu" in seen["devices"]
