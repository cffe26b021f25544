"""Inline SVG charts of the run report: the timeline and the ETTR stacked bar.

Pure functions from query rows to SVG text (no JavaScript, no fonts or images
to fetch). The timeline reads the ``timeline`` query's marks: x is seconds since
admission, y the step; hover titles (``<title>``) carry the details.

Tested in tests/queries/test_report.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from queries.report_html import PART_COLORS, attrs, esc, pct
from queries.report_labels import Lanes, Placed

W, H = 1180, 344
LEFT, RIGHT, TOP, BOTTOM = 62, 18, 48, 48
LANE = 17  # px between two lanes of labels: a 12 px label's box is about 14 px tall
MAX_POINTS = 1500  # per polyline: enough for the eye, small enough for a long run
_BANDS = ("#e8f0fb", "#f4f6f8")
Point = tuple[float, float]  # (seconds since admission, step)


def nice_ticks(hi: float, target: int = 8) -> list[float]:
    """0..hi in steps of 1, 2 or 5 times a power of ten, about ``target`` of them."""
    if hi <= 0:
        return [0.0]
    raw = hi / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(hi / step + 1e-9) + 1)]


def _fmt_tick(v: float) -> str:
    return f"{v:,.0f}" if v == int(v) else f"{v:g}"


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_POINTS:
        return points
    stride = math.ceil(len(points) / MAX_POINTS)
    return points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])


def timeline(marks: Sequence[Mapping[str, Any]]) -> str:
    """The run as one picture: generation bands, the step line (lost work in orange),
    checkpoints (blue diamonds), faults (red), recoveries (shaded) and the end."""
    if not marks:
        return ""
    ends = [m["t_end_s"] for m in marks if m["t_end_s"] is not None]
    t_max = max([m["t_s"] for m in marks] + ends) or 1.0
    steps = [m for m in marks if m["kind"] == "step"]
    s_max = max([m["step"] or 0 for m in marks if m["kind"] in ("step", "checkpoint")] + [1])
    xt, yt = nice_ticks(t_max), nice_ticks(s_max, 5)
    t_hi, s_hi = max(t_max, xt[-1]), max(s_max, yt[-1])
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(t: float) -> float:
        return round(LEFT + pw * t / t_hi, 2)

    def y(s: float) -> float:
        return round(TOP + ph * (1 - s / s_hi), 2)

    out = [f'<svg id="timeline-svg" viewBox="0 0 {W} {H}" role="img" '
           'aria-label="run timeline">']
    # Labels share lanes so that none overlaps another: generations above the plot,
    # faults along its top, the end and the recoveries along its bottom.
    above = Lanes(2, 0.0, W - RIGHT)
    top = Lanes(3, LEFT, W - RIGHT, bold=True)
    bottom = Lanes(2, LEFT, W - RIGHT, bold=True)
    out.extend(_bands([m for m in marks if m["kind"] == "generation"], x, t_max, ph, above))
    ends = [m for m in marks if m["kind"] == "end"]
    end_at = {id(m): bottom.put((str(m["label"]),), (("end", x(m["t_s"]) - 5),
                                                       ("start", x(m["t_s"]) + 5)))
              for m in ends}
    for m in marks:
        if m["kind"] == "recovery":
            out.append(_recovery(m, x, t_max, ph, bottom))
    out.extend(_axes(xt, yt, x, y, pw, ph))
    # Where each generation resumed training: (its first step's start, the resume step).
    resumed: dict[Any, Point] = {}
    for m in marks:
        if m["kind"] == "recovery" and m["t_end_s"] is not None:
            nxt = next((s["generation"] for s in steps if s["generation"] > m["generation"]),
                       None)
            if nxt is not None:
                resumed[nxt] = (m["t_end_s"], m["step"] or 0)
    out.extend(_step_lines(steps, resumed, x, y))
    for m in marks:
        if m["kind"] == "checkpoint":
            out.append(_checkpoint(m, x(m["t_s"]), y(m["step"] or 0)))
        elif m["kind"] == "failure":
            out.append(_failure(m, x(m["t_s"]), y(m["step"] or 0), ph, top))
        elif m["kind"] == "end":
            xe = x(m["t_s"])
            out.append(f'<line class="end" x1="{xe}" y1="{TOP}" x2="{xe}" y2="{TOP + ph}" '
                       f'stroke="#102a43" stroke-width="2"><title>{esc(m["label"])} at '
                       f'{m["t_s"]:.3f} s</title></line>')
            out.append(_text(end_at[id(m)], TOP + ph - 8, -LANE, "end-label",
                             'font-size="12" font-weight="bold" fill="#102a43"'))
    out.append("</svg>")
    return "\n".join(out)


def _bands(gens: Sequence[Mapping[str, Any]], x: Any, t_max: float, ph: int,
           lanes: Lanes) -> list[str]:
    """A band per generation, labelled above the plot with why it started."""
    out = []
    for i, g in enumerate(gens):
        x0, x1 = x(g["t_s"]), x(g["t_end_s"] if g["t_end_s"] is not None else t_max)
        label = f"g{g['generation']} {g['label'] or ''}".strip()
        if g["step"]:
            label += f" from step {g['step']}"
        out.append(f'<rect class="band" data-generation="{esc(g["generation"])}" x="{x0}" '
                   f'y="{TOP}" width="{max(x1 - x0, 0.5)}" height="{ph}" '
                   f'fill="{_BANDS[i % 2]}"><title>{esc(label)}: {g["t_s"]:.3f}-'
                   f'{g["t_end_s"] or t_max:.3f} s</title></rect>')
        placed = lanes.put((label, f"g{g['generation']}"), (("start", x0 + 4),))
        out.append(_text(placed, TOP - 8, -LANE, "gen-label", 'font-size="12" fill="#334e68"'))
    return out


def _text(placed: Placed | None, y0: float, dy: float, cls: str, style: str) -> str:
    """A placed label on its lane (lane 0 at ``y0``, each next one ``dy`` further);
    '' for one that fitted nowhere (its mark's hover title still says it)."""
    if placed is None:
        return ""
    return (f'<text class="label {cls}" x="{placed.x}" y="{y0 + dy * placed.lane}" '
            f'text-anchor="{placed.anchor}" {style}>{esc(placed.text)}</text>')


def _axes(xt: list[float], yt: list[float], x: Any, y: Any, pw: int, ph: int) -> list[str]:
    out = [f'<line x1="{LEFT}" y1="{TOP + ph}" x2="{LEFT + pw}" y2="{TOP + ph}" stroke="#52606d"/>',
           f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + ph}" stroke="#52606d"/>']
    for t in xt:
        out.append(f'<line x1="{x(t)}" y1="{TOP + ph}" x2="{x(t)}" y2="{TOP + ph + 5}" '
                   f'stroke="#52606d"/><text class="xtick" x="{x(t)}" y="{TOP + ph + 18}" '
                   f'font-size="11" text-anchor="middle" fill="#52606d">{_fmt_tick(t)}</text>')
    for s in yt:
        out.append(f'<line x1="{LEFT}" y1="{y(s)}" x2="{LEFT + pw}" y2="{y(s)}" '
                   f'stroke="#d9e2ec" stroke-dasharray="2 3"/><text x="{LEFT - 6}" '
                   f'y="{y(s) + 4}" font-size="11" text-anchor="end" fill="#52606d">'
                   f"{_fmt_tick(s)}</text>")
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 8}" font-size="12" text-anchor="middle" '
               'fill="#334e68">seconds since admission</text>')
    out.append(f'<text transform="translate(16 {TOP + ph / 2}) rotate(-90)" font-size="12" '
               'text-anchor="middle" fill="#334e68">step</text>')
    return out


def _step_lines(steps: Sequence[Mapping[str, Any]], resumed: Mapping[Any, Point],
                x: Any, y: Any) -> list[str]:
    """One polyline per run of steps of the same generation and fate (kept / lost)."""
    runs: list[tuple[tuple[Any, bool], list[Point], list[Point]]] = []  # key, lead-in, steps
    for m in steps:
        key = (m["generation"], bool(m["lost"]))
        if not runs or runs[-1][0] != key:
            # Lost steps continue the generation's line from its last kept step;
            # a new generation's line starts where it resumed (its recovery's end).
            same_gen = bool(runs) and runs[-1][0][0] == key[0]
            lead = runs[-1][2][-1:] if same_gen else [resumed[key[0]]] if key[0] in resumed else []
            runs.append((key, list(lead), []))
        runs[-1][2].append((m["t_s"], m["step"]))
    out = []
    for (gen, lost), lead, pts in runs:
        color = PART_COLORS["lost_work" if lost else "productive"]
        coords = " ".join(f"{x(t)},{y(s)}" for t, s in lead + _thin(pts))
        fate = "lost (redone later)" if lost else "kept"
        out.append(f'<polyline class="steps{" lost" if lost else ""}" '
                   f'data-generation="{esc(gen)}" points="{coords}" fill="none" '
                   f'stroke="{color}" stroke-width="2.2"'
                   f'{attrs({"stroke-dasharray": "5 3" if lost else None})}>'
                   f"<title>g{esc(gen)} steps {pts[0][1]}-{pts[-1][1]}: {fate}</title>"
                   "</polyline>")
        if len(pts) <= 60:  # few steps: show each one
            out.extend(f'<circle cx="{x(t)}" cy="{y(s)}" r="2.2" fill="{color}"/>'
                       for t, s in pts)
    return out


def _checkpoint(m: Mapping[str, Any], cx: float, cy: float) -> str:
    r = 6.5
    revoked = bool(m["lost"])
    fill = "#fff" if revoked else PART_COLORS["checkpoint"]
    what = "revoked checkpoint" if revoked else "committed checkpoint"
    return (f'<path class="checkpoint" data-step="{esc(m["step"])}" '
            f'd="M{cx} {cy - r}L{cx + r} {cy}L{cx} {cy + r}L{cx - r} {cy}Z" fill="{fill}" '
            f'stroke="{PART_COLORS["checkpoint"]}" stroke-width="1.8"><title>{what} step '
            f'{esc(m["step"])} (g{esc(m["generation"])}) at {m["t_s"]:.3f} s '
            f'{esc(m["label"])}</title></path>')


def _failure(m: Mapping[str, Any], cx: float, cy: float, ph: int, lanes: Lanes) -> str:
    red = PART_COLORS["detection"]
    classified = m["t_end_s"]
    tip = (f"fault in g{m['generation']} at {m['t_s']:.3f} s, classified at "
           f"{classified:.3f} s: {m['label']}" if classified is not None else m["label"])
    return (f'<g class="failure" data-generation="{esc(m["generation"])}">'
            f'<line x1="{cx}" y1="{TOP}" x2="{cx}" y2="{TOP + ph}" stroke="{red}" '
            f'stroke-width="1.5" stroke-dasharray="4 3"/>'
            f'<circle cx="{cx}" cy="{cy}" r="7" fill="{red}" stroke="#fff" stroke-width="1.5"/>'
            f'<path d="M{cx - 3} {cy - 3}L{cx + 3} {cy + 3}M{cx + 3} {cy - 3}L{cx - 3} {cy + 3}" '
            f'stroke="#fff" stroke-width="1.8"/>'
            # The class along the plot's top, beside the fault's dashed line.
            + _text(lanes.put((str(m["label"]).split(" ")[0],), (("start", cx + 5),
                                                                 ("end", cx - 5))),
                    TOP + 14, LANE, "fault-label",
                    f'font-size="12" fill="{red}" font-weight="bold"')
            + f"<title>{esc(tip)}</title></g>")


def _recovery(m: Mapping[str, Any], x: Any, t_max: float, ph: int, lanes: Lanes) -> str:
    end = m["t_end_s"]
    x0, x1 = x(m["t_s"]), x(end if end is not None else t_max)
    what = (f"recovery {end - m['t_s']:.3f} s (fault to first step of the next generation,"
            f" resumed from step {m['step']})" if end is not None
            else "no recovery: no later generation trained")
    return (f'<g class="recovery" data-generation="{esc(m["generation"])}">'
            f'<rect x="{x0}" y="{TOP}" width="{max(x1 - x0, 1.0)}" height="{ph}" '
            f'fill="{PART_COLORS["recovery"]}" fill-opacity="0.16"/>'
            + _text(lanes.put(("recovery",), (("start", x0 + 3), ("end", x1 - 3))),
                    TOP + ph - 8, -LANE, "recovery-label",
                    f'font-size="11" fill="{PART_COLORS["recovery"]}"')
            + f"<title>{esc(what)}</title></g>")


def stacked_bar(parts: Mapping[str, float], allocated: float) -> str:
    """The allocation as one bar, a segment per non-empty ETTR part."""
    if allocated <= 0:
        return ""
    bw, bh = 1000, 40
    out = [f'<svg id="ettr-bar" viewBox="0 0 {bw} {bh}" role="img" '
           'aria-label="ETTR breakdown">']
    at = 0.0
    for part, secs in parts.items():
        if secs <= 0:
            continue
        width = bw * secs / allocated
        out.append(f'<rect data-part="{esc(part)}" x="{at:.2f}" y="0" width="{width:.2f}" '
                   f'height="{bh}" fill="{PART_COLORS.get(part, "#888")}" stroke="#fff" '
                   f'stroke-width="1"><title>{esc(part)}: {secs:.3f} s '
                   f'({pct(secs / allocated)})</title></rect>')
        label = f"{part} {pct(secs / allocated)}"
        if width > 7.2 * len(label):  # only where the label fits inside the segment
            out.append(f'<text x="{at + width / 2:.2f}" y="{bh / 2 + 5}" font-size="13" '
                       f'text-anchor="middle" fill="#fff">{esc(label)}</text>')
        at += width
    out.append("</svg>")
    return "".join(out)
