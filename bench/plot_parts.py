"""Small-multiple line plots as SVG, with nothing but the standard library.

``bench/scale.py --growth`` draws how each figure grows with the ranks: one
panel per figure, the ranks on a log axis, each point labelled with its value,
and where an issue sets a goal, the goal as a dashed line. Plain SVG so that it
renders on GitHub and in any browser, and no plotting library joins the
project's dependencies for one picture.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

W, H = 300, 190  # one panel
LEFT, RIGHT, TOP, BOTTOM = 46, 30, 34, 34
COLUMNS = 3


@dataclass(frozen=True)
class Panel:
    title: str
    ys: tuple[float | None, ...]  # one per x; None: not measured
    goal: float | None = None  # a dashed line, labelled "goal"
    digits: int = 0


def _fmt(v: float, digits: int) -> str:
    return f"{v:,.0f}" if v == int(v) and abs(v) >= 10 else f"{v:,.{digits}f}"


def _panel(p: Panel, xs: Sequence[int], ox: int, oy: int) -> list[str]:
    known = [y for y in p.ys if y is not None and math.isfinite(y)]
    top = max([*known, p.goal or 0.0, 1e-9]) * 1.2
    lx = [math.log10(x) for x in xs]
    span = (max(lx) - min(lx)) or 1.0

    def px(i: int) -> float:
        return ox + LEFT + (lx[i] - min(lx)) / span * (W - LEFT - RIGHT)

    def py(y: float) -> float:
        return oy + H - BOTTOM - y / top * (H - TOP - BOTTOM)

    out = [f'<text x="{ox + 8}" y="{oy + 18}" font-size="12" font-weight="bold">'
           f'{escape(p.title)}</text>',
           f'<line x1="{ox + LEFT}" y1="{py(0):.1f}" x2="{ox + W - RIGHT}" y2="{py(0):.1f}"'
           ' stroke="#888"/>',
           f'<line x1="{ox + LEFT}" y1="{py(0):.1f}" x2="{ox + LEFT}" y2="{oy + TOP}"'
           ' stroke="#888"/>']
    for i, x in enumerate(xs):
        out.append(f'<text x="{px(i):.1f}" y="{oy + H - 14}" font-size="10"'
                   f' text-anchor="middle">{x:,}</text>')
    if p.goal is not None:
        out.append(f'<line x1="{ox + LEFT}" y1="{py(p.goal):.1f}" x2="{ox + W - RIGHT}"'
                   f' y2="{py(p.goal):.1f}" stroke="#c33" stroke-dasharray="4 3"/>'
                   f'<text x="{ox + W - RIGHT}" y="{py(p.goal) - 3:.1f}" font-size="9"'
                   f' fill="#c33" text-anchor="end">goal {_fmt(p.goal, p.digits)}</text>')
    pts = [(px(i), py(y), y) for i, y in enumerate(p.ys) if y is not None and math.isfinite(y)]
    if len(pts) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="#36c" stroke-width="2"/>')
    for x, y, v in pts:
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#36c"/>'
                   f'<text x="{x:.1f}" y="{y - 7:.1f}" font-size="10" text-anchor="middle">'
                   f'{_fmt(v, p.digits)}</text>')
    return out


def small_multiples(path: Path, title: str, xs: Sequence[int], panels: Sequence[Panel],
                    note: str = "") -> Path:
    """Write ``panels`` (each one y per x in ``xs``) as one SVG at ``path``."""
    rows = math.ceil(len(panels) / COLUMNS)
    width, height = COLUMNS * W, rows * H + 44
    body = [f'<rect width="{width}" height="{height}" fill="white"/>',
            f'<text x="8" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    if note:
        body.append(f'<text x="8" y="36" font-size="10" fill="#555">{escape(note)}</text>')
    for k, p in enumerate(panels):
        body.extend(_panel(p, xs, (k % COLUMNS) * W, 44 + (k // COLUMNS) * H))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
                    f' font-family="sans-serif">\n' + "\n".join(body) + "\n</svg>\n")
    return path
