"""Inline SVG charts of the run report's curves: loss and step time against the step.

Pure functions from the ``curves`` query's rows to SVG text (no script, no fonts
or images to fetch). Each generation is its own line in its own colour, so a
restart shows as a new line from the step it resumed at; steps a later
generation redid are dashed, as on the timeline. A chart with nothing to draw
says why instead (no loss reported: the job's ``session.step`` got
``loss=None``).

Tested in tests/queries/test_report_curves.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from queries.report_html import esc

CW, CH = 580, 270
LEFT, RIGHT, TOP, BOTTOM = 62, 14, 16, 44
MAX_POINTS = 800  # per line: enough for the eye at this width
# One colour per generation, cycling: distinguishable, and none the timeline's red.
GEN_COLORS = ("#2f6fb2", "#2e7d32", "#8e44ad", "#b7791f", "#00838f", "#5d4037")
Scale = Callable[[float], float]


def ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round ticks covering [lo, hi]: steps of 1, 2 or 5 times a power of ten. A range
    too narrow to tell from its ends (a flat line) is widened around it."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    scale = max(abs(lo), abs(hi))
    if hi - lo <= max(1e-9 * scale, 1e-12):  # centred, so the line is not on an axis
        pad = max(0.05 * scale, 1e-12)
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step)
    first -= first * step > lo  # a product rounded up past lo
    last = math.ceil(hi / step)
    last += last * step < hi
    count = last - first
    return [(first + i) * step for i in range(count + 1)]


def _label(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    return f"{v:.4g}"


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_POINTS:
        return points
    stride = math.ceil(len(points) / MAX_POINTS)
    return points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])


def gen_color(generation: int) -> str:
    return GEN_COLORS[generation % len(GEN_COLORS)]


def chart(rows: Sequence[Mapping[str, Any]], column: str, *, chart_id: str, title: str,
          unit: str, missing: str) -> str:
    """One chart of ``column`` against the step, a line per (generation, fate) run."""
    pts = [r for r in rows if r[column] is not None and math.isfinite(r[column])]
    if not pts:
        return f'<p class="empty" id="{chart_id}-empty">{esc(missing)}</p>'
    xs = [float(r["step"]) for r in pts]
    ys = [float(r[column]) for r in pts]
    xt, yt = ticks(min(xs), max(xs), 6), ticks(min(ys), max(ys), 5)
    pw, ph = CW - LEFT - RIGHT, CH - TOP - BOTTOM
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]

    def x(v: float) -> float:
        return round(LEFT + pw * (v - x0) / ((x1 - x0) or 1.0), 2)

    def y(v: float) -> float:
        return round(TOP + ph * (1 - (v - y0) / ((y1 - y0) or 1.0)), 2)

    out = [f'<svg id="{chart_id}" class="curve" viewBox="0 0 {CW} {CH}" role="img" '
           f'aria-label="{esc(title)}">']
    out.extend(_axes(xt, yt, x, y, pw, ph, unit))
    out.extend(_lines(pts, column, x, y))
    out.append("</svg>")
    return "".join(out)


def _axes(xt: list[float], yt: list[float], x: Scale, y: Scale, pw: int, ph: int,
          unit: str) -> list[str]:
    base = TOP + ph
    out = [f'<line x1="{LEFT}" y1="{base}" x2="{LEFT + pw}" y2="{base}" stroke="#52606d"/>',
           f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}" stroke="#52606d"/>']
    for t in xt:
        out.append(f'<text x="{x(t)}" y="{base + 16}" font-size="11" text-anchor="middle" '
                   f'fill="#52606d">{_label(t)}</text>')
    for v in yt:
        out.append(f'<line x1="{LEFT}" y1="{y(v)}" x2="{LEFT + pw}" y2="{y(v)}" '
                   f'stroke="#d9e2ec" stroke-dasharray="2 3"/><text x="{LEFT - 6}" '
                   f'y="{y(v) + 4}" font-size="11" text-anchor="end" fill="#52606d">'
                   f"{_label(v)}</text>")
    out.append(f'<text x="{LEFT + pw / 2}" y="{CH - 8}" font-size="12" text-anchor="middle" '
               'fill="#334e68">step</text>')
    out.append(f'<text transform="translate(14 {TOP + ph / 2}) rotate(-90)" font-size="12" '
               f'text-anchor="middle" fill="#334e68">{esc(unit)}</text>')
    return out


def _lines(pts: Sequence[Mapping[str, Any]], column: str, x: Scale, y: Scale) -> list[str]:
    """A polyline per consecutive run of rows with the same generation and fate."""
    runs: list[tuple[tuple[int, bool], list[tuple[float, float]]]] = []
    for r in pts:
        key = (int(r["generation"]), bool(r["lost"]))
        if not runs or runs[-1][0] != key:
            # A generation's lost tail continues from its last kept point.
            lead = runs[-1][1][-1:] if runs and runs[-1][0][0] == key[0] else []
            runs.append((key, list(lead)))
        runs[-1][1].append((float(r["step"]), float(r[column])))
    out = []
    for (gen, lost), line in runs:
        color = gen_color(gen)
        coords = " ".join(f"{x(s)},{y(v)}" for s, v in _thin(line))
        fate = "redone later (lost work)" if lost else "kept"
        dash = ' stroke-dasharray="5 3"' if lost else ""
        out.append(f'<polyline class="curve-line{" lost" if lost else ""}" '
                   f'data-generation="{gen}" points="{coords}" fill="none" stroke="{color}" '
                   f'stroke-width="1.8"{dash}><title>g{gen} steps {_label(line[0][0])}-'
                   f"{_label(line[-1][0])}: {fate}</title></polyline>")
        if len(line) == 1:  # a single step is a point, not a line
            s, v = line[0]
            out.append(f'<circle cx="{x(s)}" cy="{y(v)}" r="2.5" fill="{color}"/>')
    return out


def legend(rows: Sequence[Mapping[str, Any]]) -> str:
    """The generations drawn, each with its colour; '' when there is one."""
    gens = sorted({int(r["generation"]) for r in rows})
    if len(gens) < 2:
        return ""
    swatch = '<span><span class="swatch" style="background:{}"></span>generation {}</span>'
    items = "".join(swatch.format(gen_color(g), g) for g in gens)
    return f'<div class="legend" id="curves-legend">{items}<span>dashed: redone later</span></div>'


def section(rows: Sequence[Mapping[str, Any]]) -> str:
    """The report's "Curves" section: loss and step time side by side (stacked when
    the page is narrow), or what is missing."""
    if not rows:
        inner = '<p class="empty">no steps committed yet</p>'
    else:
        loss = chart(rows, "loss", chart_id="loss-curve", title="loss by step", unit="loss",
                     missing="no loss reported: the job's session.step(..., loss=...) was"
                             " given None")
        times = chart(rows, "step_time_ms", chart_id="step-time-curve",
                      title="step time by step", unit="step time (ms)",
                      missing="no step times reported")
        inner = (f'<div class="curves"><figure><figcaption>loss</figcaption>{loss}</figure>'
                 f"<figure><figcaption>step time (ms, the coordinator's)</figcaption>{times}"
                 f"</figure></div>{legend(rows)}")
    return ('<section id="curves"><h2>Curves <small>per generation, against the step;'
            f" hover a line for its steps</small></h2>{inner}</section>")
