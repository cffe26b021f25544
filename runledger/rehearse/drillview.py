"""What ``runledger drill`` prints: the fault matrix as a table, JSON or one HTML file. Pure.

Every view shows, per fault, the verdict, RPO and RTO (seconds, "-" when not
measured) and the first failed expectation or the reason for a skip; JSON and
HTML add every check row. The HTML file is self-contained (inline style, no
script, every value escaped).

Tested in tests/runledger/rehearse/test_drill.py.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from events.model import DrillCompleted

FAIL = "fail"


def verdict(results: Sequence[DrillCompleted]) -> str:
    """``fail`` when an applicable fault failed, else ``pass`` (skips do not fail)."""
    return FAIL if any(r.verdict == FAIL for r in results) else "pass"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def lines(results: Sequence[DrillCompleted]) -> list[str]:
    out = [f"{'FAULT':<16} {'VERDICT':<7} {'RPO s':>8} {'RTO s':>8}  RUN / REASON"]
    for r in results:
        out.append(f"{r.fault:<16} {r.verdict.upper():<7} {_secs(r.rpo_s):>8}"
                   f" {_secs(r.rto_s):>8}  {r.drill_run_id or '-'}: {r.reason}")
    return out


def document(digest: str, results: Sequence[DrillCompleted]) -> dict[str, Any]:
    return {"spec_digest": digest, "verdict": verdict(results), "faults": [
        {"fault": r.fault, "verdict": r.verdict, "drill_run_id": r.drill_run_id,
         "rpo_s": r.rpo_s, "rto_s": r.rto_s, "reason": r.reason,
         "event_id": r.header.event_id, "checks": [asdict(c) for c in r.checks]}
        for r in results]}


_STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}"
          ".pass{background:#dfd}.fail{background:#fdd}.skip{background:#eee}"
          "details{margin:.3em 0}")


def page(digest: str, spec_name: str, results: Sequence[DrillCompleted]) -> str:
    """The matrix and, per fault, its check rows, as one HTML document."""
    e = html.escape
    rows = "".join(
        f"<tr class='{e(r.verdict)}'><td>{e(r.fault)}</td><td>{e(r.verdict)}</td>"
        f"<td>{_secs(r.rpo_s)}</td><td>{_secs(r.rto_s)}</td><td>{e(r.drill_run_id)}</td>"
        f"<td>{e(r.reason)}</td></tr>" for r in results)
    details = "".join(
        f"<details><summary>{e(r.fault)}: {e(r.verdict)}</summary><table><tr><th>check</th>"
        "<th>verdict</th><th>figure</th><th>threshold</th><th>reason</th></tr>"
        + "".join(f"<tr class='{e(c.verdict)}'><td>{e(c.check)}</td><td>{e(c.verdict)}</td>"
                  f"<td>{'' if c.figure is None else f'{c.figure:g}'} {e(c.unit)}</td>"
                  f"<td>{'' if c.threshold is None else f'{c.threshold:g}'}</td>"
                  f"<td>{e(c.reason)}</td></tr>" for c in r.checks)
        + "</table></details>" for r in results)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>drill {e(spec_name)}"
            f"</title><style>{_STYLE}</style></head><body><h1>Drill of {e(spec_name)}:"
            f" {verdict(results)}</h1><p>spec {e(digest)}</p><table><tr><th>fault</th>"
            "<th>verdict</th><th>RPO s</th><th>RTO s</th><th>drill run</th><th>reason</th>"
            f"</tr>{rows}</table><h2>Checks</h2>{details}</body></html>\n")
