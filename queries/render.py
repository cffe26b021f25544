"""Query results as aligned text for a terminal (JSON output lives in the CLI).

Tested in tests/runledger/commands/test_query.py.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from queries.runner import Result

MAX_CELL = 60


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e-3 or abs(value) >= 1e6 else f"{value:,.3f}"
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if isinstance(value, dict | list):
        value = json.dumps(value, separators=(",", ":"))
    text = str(value)
    lines = [ln.strip() for ln in text.replace("\t", " ").splitlines() if ln.strip()]
    # One row per record: a traceback keeps its last line, the error itself (the whole
    # text is in --json, and in `runledger logs`).
    text = lines[-1] if lines else ""
    more = f" (last of {len(lines)} lines)" if len(lines) > 1 else ""
    room = MAX_CELL - len(more)
    return (text if len(text) <= room else text[:room - 1] + "…") + more


def table(result: Result) -> str:
    if not result.rows:
        return f"({result.name}: no rows for run {result.run_id})"
    cells = [[cell(v) for v in row] for row in result.rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(result.columns)]
    numeric = [all(isinstance(row[i], int | float) and not isinstance(row[i], bool)
                   for row in result.rows if row[i] is not None)
               for i in range(len(result.columns))]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    out = [line(result.columns), line(["-" * w for w in widths])]
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def plain(value: Any) -> Any:
    """A JSON-ready value: timestamps as ISO 8601, JSON text columns parsed."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
