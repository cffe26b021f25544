"""HTML building blocks of the run report: escaping, number formats, tables, the style sheet.

Everything here is pure string building. Text from the log goes through
:func:`esc` (html.escape, quotes included) unless it is wrapped in :class:`Safe`,
which only this package's own markup builders produce. The page's CSS lives
here too (:data:`CSS`), inline, so the report needs no file and no network.

Tested in tests/queries/test_report.py.
"""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# One colour per ETTR part, shared by the stacked bar, its table and the timeline.
PART_COLORS = {
    "productive": "#2e7d32", "checkpoint": "#1565c0", "lost_work": "#ef6c00",
    "detection": "#c62828", "recovery": "#ad1457", "input_stall": "#f9a825",
    "idle": "#9e9e9e", "resize_stop": "#6a1b9a", "resize_rendezvous": "#8e24aa",
    "resize_restore": "#ba68c8", "other": "#b0bec5",
}
PART_HELP = {
    "productive": "surviving steps, less their input wait",
    "checkpoint": "the loop blocked on a checkpoint",
    "lost_work": "steps a later generation redid",
    "detection": "from the fault to its classification",
    "recovery": "from the classification to the next generation's first step",
    "input_stall": "input wait inside surviving steps",
    "idle": "allocated before the first step and after the last",
    "resize_stop": "a planned elastic resize: the old generation's last step to the new start",
    "resize_rendezvous": "a planned resize: the new start until every member joined",
    "resize_restore": "a planned resize: every member joined until its first step",
    "other": "between steps: logging, reporting, the loop",
}


class Safe(str):
    """Markup built by this package; :func:`esc` passes it through unchanged."""

    __slots__ = ()


def esc(value: object) -> str:
    """Escaped text of any value (Safe markup as is)."""
    if isinstance(value, Safe):
        return str(value)
    return html.escape(str(value), quote=True)


def attrs(values: Mapping[str, object]) -> str:
    """` name="value"` pairs, escaped, skipping None."""
    return "".join(f' {k}="{esc(v)}"' for k, v in values.items() if v is not None)


def num(value: Any, digits: int = 3) -> str:
    """A number for a person: thousands separators, fixed decimals for floats, '-' for none."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != 0 and abs(value) < 10 ** -digits:
            return f"{value:.3g}"
        return f"{value:,.{digits}f}"
    return str(value)


def pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f} s"


def utc(value: dt.datetime | int | None) -> str:
    """A UTC time: DuckDB's epoch_ms() gives naive UTC datetimes, the tables epoch ms."""
    if value is None:
        return "-"
    if isinstance(value, int):
        value = dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def since(value: dt.datetime | None, origin_ms: int | None) -> str:
    """Seconds since admission, the timeline's axis, for a datetime from a query."""
    if value is None or origin_ms is None:
        return "-"
    ms = value.replace(tzinfo=dt.UTC).timestamp() * 1000
    return f"+{(ms - origin_ms) / 1000:,.3f} s"


def counts(value: Any) -> str:
    """A JSON map of per-source counts as `a 1 · b 2`."""
    doc = json.loads(value) if isinstance(value, str) else value
    if not doc:
        return "-"
    return " · ".join(f"{k} {num(v)}" for k, v in sorted(doc.items()))


def code(value: Any) -> Safe:
    """Identifiers (digests, paths, signatures) in monospace."""
    return Safe("-" if value is None else f"<code>{esc(value)}</code>")


def short(value: Any, keep: int = 19) -> Safe:
    """A long identifier cut to ``keep`` characters for a table cell; hover shows it whole."""
    text = "-" if value is None else str(value)
    if len(text) <= keep + 1:
        return code(value)
    return Safe(f'<code title="{esc(text)}">{esc(text[:keep])}…</code>')


def empty(message: str) -> str:
    """What a section says when its query has no rows (it never just disappears)."""
    return f'<p class="empty">{esc(message)}</p>'


@dataclass(frozen=True, slots=True)
class Col:
    key: str
    title: str
    fmt: Callable[[Any], str] = str
    numeric: bool = False


def table(cols: Iterable[Col], rows: Iterable[Mapping[str, Any]], *, table_id: str | None = None,
          row_attrs: Callable[[Mapping[str, Any]], Mapping[str, object]] | None = None,
          cls: str | None = None) -> str:
    """A table whose cells carry ``data-col`` (the query column), for people and tests."""
    cols = list(cols)
    head = "".join(f'<th{attrs({"class": "num" if c.numeric else None})}>{esc(c.title)}</th>'
                   for c in cols)
    body = []
    for row in rows:
        extra = row_attrs(row) if row_attrs else {}
        cells = "".join(
            f'<td{attrs({"data-col": c.key, "class": "num" if c.numeric else None})}>'
            f"{esc(_cell(c, row.get(c.key)))}</td>" for c in cols)
        body.append(f"<tr{attrs(extra)}>{cells}</tr>")
    return (f'<div class="scroll"><table{attrs({"id": table_id, "class": cls})}><thead><tr>'
            f'{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def _cell(col: Col, value: Any) -> str:
    if value is None and col.fmt is str:
        return "-"
    return col.fmt(value)


def facts(pairs: Iterable[tuple[str, object]], *, dl_id: str | None = None) -> str:
    """A definition list of label/value pairs (values escaped unless Safe)."""
    items = "".join(f"<div><dt>{esc(k)}</dt><dd>{esc(v)}</dd></div>" for k, v in pairs)
    return f'<dl{attrs({"id": dl_id, "class": "facts"})}>{items}</dl>'


CSS = """
:root { --ink:#1f2933; --muted:#616e7c; --line:#d9e2ec; --card:#fff; --bg:#f5f7fa;
        --bad:#c62828; --warn:#ef6c00; --good:#2e7d32; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
       font:14px/1.45 "DejaVu Sans", system-ui, -apple-system, "Segoe UI", sans-serif; }
main { max-width:1240px; margin:0 auto; padding:20px 24px 40px; }
header.top { background:#102a43; color:#f0f4f8; padding:18px 24px; }
header.top .inner { max-width:1240px; margin:0 auto; }
header.top h1 { margin:0 0 4px; font-size:22px; font-weight:600; }
header.top p { margin:0; color:#bcccdc; }
section { background:var(--card); border:1px solid var(--line); border-radius:8px;
          padding:14px 18px 16px; margin:16px 0; }
h2 { font-size:17px; margin:0 0 10px; }
h2 small, caption, .note { color:var(--muted); font-weight:normal; font-size:12.5px; }
.note { margin:6px 0 0; }
code { font:12px "DejaVu Sans Mono", ui-monospace, monospace; overflow-wrap:break-word; }
.scroll { overflow-x:auto; }
dl.facts { display:grid; grid-template-columns:repeat(auto-fill, minmax(190px, 1fr));
           gap:10px 18px; margin:0; }
dl.facts div { min-width:0; }
details.chain { margin-top:14px; }
details.chain summary { font-size:13px; }
dl.facts dt { color:var(--muted); font-size:12px; text-transform:uppercase;
              letter-spacing:.04em; }
dl.facts dd { margin:2px 0 0; font-size:16px; font-weight:600; overflow-wrap:anywhere; }
dl.facts dd code { font-size:12.5px; font-weight:normal; overflow-wrap:anywhere; }
table { border-collapse:collapse; width:100%; font-size:13px; }
caption { text-align:left; padding:0 0 6px; }
th, td { padding:5px 8px; border-bottom:1px solid var(--line); text-align:left;
         vertical-align:top; }
th { background:#f0f4f8; font-weight:600; white-space:nowrap; }
td { white-space:nowrap; }
td[data-col=detail], td[data-col=summary], td[data-col=what] { white-space:normal; }
/* A worker's output wraps where it is shown: no horizontal scroll hides an error. */
td[data-col=stderr_tail] { white-space:normal; min-width:320px; }
td pre, section.why pre { white-space:pre-wrap; overflow-wrap:anywhere; margin:0;
                          font:12px "DejaVu Sans Mono", ui-monospace, monospace; }
section.why { border-left:4px solid var(--bad); }
section.why pre { background:#fff5f5; padding:8px 10px; border-radius:4px; margin-top:8px; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
tbody tr:nth-child(even) { background:#fafbfc; }
tfoot td { font-weight:600; border-top:2px solid var(--ink); border-bottom:none; }
tr.flagged td { background:#fff3e0; }
tr.flagged td:first-child { box-shadow:inset 4px 0 var(--warn); }
.badge { display:inline-block; padding:0 7px; border-radius:9px; font-size:12px;
         font-weight:600; color:#fff; background:var(--muted); }
.badge.succeeded, .badge.ok { background:var(--good); }
.badge.failed, .badge.critical, .badge.page { background:var(--bad); }
.badge.cancelled, .badge.warning, .badge.straggler { background:var(--warn); }
.badge.node_fault { background:var(--bad); } .badge.transient { background:var(--good); }
.badge.open, .badge.nondeterministic, .badge.reproduced { background:var(--warn); }
.swatch { display:inline-block; width:11px; height:11px; border-radius:2px;
          margin-right:6px; vertical-align:-1px; box-shadow:inset 0 0 0 1px rgba(0,0,0,.15); }
.empty { color:var(--muted); font-style:italic; margin:4px 0; }
.bar { position:relative; height:10px; background:#eef2f6; border-radius:3px;
       min-width:120px; }
.bar span { position:absolute; left:0; top:0; bottom:0; border-radius:3px; }
.bar .p99 { background:#9fb3c8; } .bar .p50 { background:#334e68; }
tr.flagged .bar .p50 { background:var(--warn); }
.legend { display:flex; flex-wrap:wrap; gap:4px 16px; font-size:12.5px; color:var(--muted);
          margin-top:6px; }
svg { display:block; width:100%; height:auto; }
svg text { font-family:"DejaVu Sans", sans-serif; }
details summary { cursor:pointer; font-weight:600; font-size:15px; }
details[open] summary { margin-bottom:8px; }
.cols { display:grid; grid-template-columns:1fr 1fr; gap:0 16px; }
.cols > section { margin:16px 0 0; }
.curves { display:grid; grid-template-columns:repeat(auto-fit, minmax(340px, 1fr)); gap:8px 16px; }
.curves figure { margin:0; min-width:0; }
.curves figcaption { font-size:13px; color:var(--muted); }
svg.curve { width:100%; height:auto; display:block; }
@media (max-width:900px) { .cols { grid-template-columns:1fr; } }
@media print { body { background:#fff; } section { break-inside:avoid; } }
"""
