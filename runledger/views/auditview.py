"""What ``runledger audit verify`` prints: ``events.signed.audit``'s report as lines or JSON. Pure.

One line names the trust anchor (and whether ``--trust`` pinned it), one
judges the keys log, then one verdict line per run: ``ok`` with its fact
count and head, or ``FAILED`` followed by one indented line per problem,
each naming where it is (``topic[partition]@offset``) and the reason.
:func:`document` is the same as one JSON object (``--json``), whose runs'
``head`` digests a later ``audit verify --heads FILE`` takes back to notice a
run whose last facts were removed (``events.signed.audit``'s ``truncated``).

Tested in tests/runledger/views/test_auditview.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from events.signed.audit import AuditReport, Problem, RunVerdict
from events.signed.signing import GENESIS, is_digest
from runledger.errors import RunledgerError, UsageError

SHORT = 16  # hex characters of a digest shown on a verdict line


class AuditFailed(RunledgerError):
    """The log did not verify; the verdict lines say where and why."""


def selected(report: AuditReport, run: str | None) -> tuple[RunVerdict, ...]:
    """The verdicts to show: every run's, or the one asked for (an error if it has none)."""
    if run is None:
        return report.runs
    chosen = tuple(v for v in report.runs if v.run_id == run)
    if not chosen:
        raise RunledgerError(f"run {run!r} has no facts in the log that was read; "
                             "`runledger runs` lists the runs")
    return chosen


def lines(report: AuditReport, runs: tuple[RunVerdict, ...], keys_records: int) -> list[str]:
    out = [_anchor_line(report)]
    if report.keys:
        out.append(f"keys FAILED: {keys_records} records, {_count(len(report.keys))}")
        out += [f"  {_where(p)}" for p in report.keys]
    else:
        out.append(f"keys ok: {keys_records} records, {len(report.ring.keys)} keys")
    for verdict in runs:
        if verdict.ok:
            out.append(f"run {verdict.run_id}: ok, {verdict.records} facts, head "
                       f"{verdict.head[:SHORT]}")
            continue
        out.append(f"run {verdict.run_id}: FAILED, {verdict.records} facts, "
                   f"{_count(len(verdict.problems))}")
        out += [f"  {_where(p)}" for p in verdict.problems]
    return out


def document(report: AuditReport, runs: tuple[RunVerdict, ...], keys_records: int,
             source: str) -> dict[str, Any]:
    return {
        "ok": passed(report, runs),
        "source": source,
        "anchor": report.anchor,
        "trust": report.trust,
        "keys": {"records": keys_records, "registered": len(report.ring.keys),
                 "problems": [_problem(p) for p in report.keys]},
        "runs": [{"run_id": v.run_id, "ok": v.ok, "records": v.records, "head": v.head,
                  "problems": [_problem(p) for p in v.problems]} for v in runs],
    }


def passed(report: AuditReport, runs: tuple[RunVerdict, ...]) -> bool:
    return not report.keys and all(v.ok for v in runs)


def failure(report: AuditReport, runs: tuple[RunVerdict, ...]) -> AuditFailed:
    bad = [v for v in runs if not v.ok]
    problems = len(report.keys) + sum(len(v.problems) for v in bad)
    keys = f"the keys log and {len(bad)}" if report.keys else f"{len(bad)}"
    return AuditFailed(f"the log does not verify: {_count(problems)} in {keys} of "
                       f"{len(runs)} run(s), each named above with where it is")


def heads_from(text: str, where: str) -> dict[str, str]:
    """Run heads from an earlier ``audit verify --json`` (or a plain ``{run: head}`` object)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--heads {where} is not JSON ({exc})") from None
    pairs: Mapping[Any, Any]
    if isinstance(doc, dict) and isinstance(doc.get("runs"), list):
        pairs = {r.get("run_id"): r.get("head") for r in doc["runs"] if isinstance(r, dict)}
    elif isinstance(doc, dict):
        pairs = doc
    else:
        raise UsageError(f"--heads {where}: expected `audit verify --json` output or an "
                         "object of run ids and head digests")
    bad = [k for k, v in pairs.items() if not (isinstance(k, str) and isinstance(v, str)
                                               and is_digest(v))]
    if bad:
        raise UsageError(f"--heads {where}: {bad[0]!r:.80} has no 64-hex head digest")
    return {k: v for k, v in pairs.items() if v != GENESIS}


def _anchor_line(report: AuditReport) -> str:
    if report.anchor is None:
        return "trust anchor: none (no admin key anchors the keys log)"
    entry = report.ring.get(report.anchor)
    who = f" ({entry.principal}'s admin key)" if entry is not None else ""
    if report.trust is None:
        pin = f"; not pinned: --trust {report.anchor} requires it"
    elif report.trust == report.anchor:
        pin = "; pinned by --trust"
    else:
        pin = f"; NOT the pinned {report.trust}"
    return f"trust anchor {report.anchor}{who}{pin}"


def _where(p: Problem) -> str:
    run = f" {p.run_id}" if p.run_id else ""
    return f"{p.where}{run}: {p.reason} ({p.detail})"


def _problem(p: Problem) -> dict[str, str]:
    return {"where": p.where, "run_id": p.run_id, "reason": p.reason, "detail": p.detail}


def _count(n: int) -> str:
    return f"{n} problem" + ("" if n == 1 else "s")
