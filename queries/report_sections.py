"""The sections of the run report (``queries.report``), each from its query's rows.

Every section is a ``<section>`` with a stable id (summary, timeline, curves
(``report_curves``), ettr,
incidents, sdc (``report_sdc``), recovery, goodput, mixture, stragglers, alerts,
provenance, audit), and says what is missing ("no failures", "no alerts")
rather than disappearing. Tables carry ``data-*`` attributes (``data-part``,
``data-member``, ``data-col``...) so tests and scripts can read the values a
person sees.

Tested in tests/queries/test_report.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from queries import consumed
from queries.ettr import PARTS, Ettr
from queries.report_curves import section as curves_section
from queries.report_html import (
    PART_COLORS,
    PART_HELP,
    Col,
    Safe,
    code,
    counts,
    empty,
    esc,
    facts,
    num,
    pct,
    seconds,
    short,
    since,
    table,
    utc,
)
from queries.report_sdc import html_section as sdc_section
from queries.report_svg import stacked_bar, timeline

Rows = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ReportData:
    """Everything the page shows, straight from the queries (one dict per row)."""

    run_id: str
    summary: dict[str, Any]
    ettr: Ettr
    timeline: Rows
    goodput: dict[str, Any] | None
    stragglers: Rows
    mixture: Rows
    incidents: Rows
    alerts: Rows
    audit: Rows
    provenance: Rows
    recovery: Rows = field(default_factory=list)
    curves: Rows = field(default_factory=list)

    @property
    def origin_ms(self) -> int:
        """Time zero of the page: admission (submission while the run waits)."""
        admitted = self.summary.get("admitted_at")
        return int(admitted if admitted is not None else self.summary["submitted_at"])



def body(data: ReportData, max_audit_rows: int, *, audit: bool = True) -> list[str]:
    """The sections in reading order: what happened, what it cost, then the evidence
    (the audit trail last; the live view leaves it out)."""
    return [_summary(data), _timeline(data), curves_section(data.curves), _ettr(data),
            _incidents(data),
            sdc_section(data.summary.get("sdc_spec"), data.incidents, data.origin_ms),
            _recovery(data),
            f'<div class="cols">{_goodput(data)}{_mixture(data)}</div>',
            _stragglers(data), _alerts(data), _provenance(data),
            *([_audit(data, max_audit_rows)] if audit else [])]


def _d1(value: Any) -> str:
    """Milliseconds and target counts: one decimal is what a reader can use."""
    return num(value, 1)


def _section(sid: str, title: str, inner: str, sub: str = "") -> str:
    small = f" <small>{esc(sub)}</small>" if sub else ""
    return f'<section id="{sid}"><h2>{esc(title)}{small}</h2>{inner}</section>'


def _summary(data: ReportData) -> str:
    s, e = data.summary, data.ettr
    outcome = s.get("outcome") or "live"
    status = Safe(f'<span class="badge {esc(outcome)}" id="status">{esc(outcome)}</span>')
    ratio = e.ratio
    pairs: list[tuple[str, object]] = [
        ("status", status), ("generations", num(s.get("generations"))),
        ("final step", num(s.get("final_step"))),
        ("ETTR", Safe(f'<span id="ettr-ratio">{"-" if ratio is None else f"{ratio:.3f}"}'
                      "</span>")),
        ("allocated time", seconds(e.allocated_s) if e.allocated_s else "not admitted"),
        ("world size", num(s.get("world_size"))),
        ("dataset", code(s.get("dataset_id"))), ("code version", code(s.get("code_version"))),
        ("submitted", utc(s.get("submitted_at"))), ("admitted", utc(s.get("admitted_at"))),
        ("principal", s.get("principal") or "-")]
    return _section("summary", "Summary", facts(pairs, dl_id="summary-facts"))


def _timeline(data: ReportData) -> str:
    if not any(m["kind"] == "generation" for m in data.timeline):
        return _section("timeline", "Timeline", empty("no generation started yet"))
    swatch = '<span class="swatch" style="background:{}"></span>{}'
    legend = "".join(f"<span>{swatch.format(c, esc(t))}</span>" for c, t in (
        (PART_COLORS["productive"], "steps (kept)"),
        (PART_COLORS["lost_work"], "steps redone later (lost work)"),
        (PART_COLORS["checkpoint"], "committed checkpoint"),
        (PART_COLORS["detection"], "fault"),
        (PART_COLORS["recovery"], "recovery: fault to the next generation's first step"),
        ("#e8f0fb", "generation")))
    return _section("timeline", "Timeline", timeline(data.timeline)
                    + f'<div class="legend">{legend}</div>',
                    "step against seconds since admission; hover for details")


def _ettr(data: ReportData) -> str:
    e = data.ettr
    if e.allocated_s <= 0:
        return _section("ettr", "ETTR", empty("no allocated time yet: the run was not admitted"))
    rows = []
    for part in PARTS:
        secs = e.parts_s[part]
        share = secs / e.allocated_s
        rows.append(
            f'<tr data-part="{part}"><td data-col="part"><span class="swatch" '
            f'style="background:{PART_COLORS[part]}"></span>{part}</td>'
            f'<td data-col="what">{esc(PART_HELP[part])}</td>'
            f'<td data-col="seconds" class="num">{secs:,.3f}</td>'
            f'<td data-col="share" class="num">{pct(share)}</td></tr>')
    total = sum(e.parts_s.values())
    foot = (f'<tr data-part="allocated"><td data-col="part">allocated</td>'
            f'<td data-col="what">admission to the end; the parts above sum to it</td>'
            f'<td data-col="seconds" class="num">{e.allocated_s:,.3f}</td>'
            f'<td data-col="share" class="num">100.0%</td></tr>')
    tab = ('<table id="ettr-table"><thead><tr><th>part</th><th>what it is</th>'
           '<th class="num">seconds</th><th class="num">share</th></tr></thead>'
           f'<tbody>{"".join(rows)}</tbody><tfoot>{foot}</tfoot></table>')
    ratio = e.ratio or 0.0
    note = (f'<p class="note" id="ettr-sum">parts sum to {total:,.3f} s of {e.allocated_s:,.3f} s'
            f" allocated; ETTR = productive / allocated = {ratio:.3f}</p>")
    return _section("ettr", f"ETTR {ratio:.3f}", stacked_bar(e.parts_s, e.allocated_s)
                    + tab + note, "effective training time ratio: where the allocation went")


def _goodput(data: ReportData) -> str:
    g = data.goodput
    if not g or not g.get("accepted_steps"):
        return _section("goodput", "Goodput", empty("no steps committed yet"))
    cost = g.get("cost_per_loss_token")
    pairs: list[tuple[str, object]] = [
        ("loss tokens / s", num(g["loss_tokens_per_s"], 1)),
        ("accepted steps", num(g["accepted_steps"])),
        ("accepted loss tokens", num(g["accepted_loss_tokens"])),
        ("discarded loss tokens", num(g["discarded_loss_tokens"])),
        ("end to end", seconds(g["end_to_end_s"])),
        _device_hours(g.get("devices"), g["gpu_hours"]),
        ("price / hour", num(g["price_per_gpu_hour"], 2)),
        ("cost / 1M loss tokens", "-" if cost is None else num(cost * 1e6, 4))]
    return _section("goodput", "Goodput", facts(pairs, dl_id="goodput-facts"),
                    "accepted loss-bearing tokens per end-to-end second")


def _device_hours(devices: str | None, hours: float | None) -> tuple[str, str]:
    """Allocated slot hours, named for the devices the ranks said they stepped on."""
    if not devices:
        return "slot hours", f"{num(hours, 4)} (devices not reported)"
    kinds = {d.split(" x ", 1)[-1].split(":", 1)[0].strip() for d in devices.split(", ")}
    label = {frozenset({"cpu"}): "CPU hours",
             frozenset({"cuda"}): "GPU hours"}.get(frozenset(kinds), "device hours")
    return label, f"{num(hours, 4)} ({devices})"


def _mixture(data: ReportData) -> str:
    if not data.mixture:
        return _section("mixture", "Mixture", empty("no committed data cursor yet"))
    last = max((r["step"], r["generation"]) for r in data.mixture)
    rows = [r for r in data.mixture if (r["step"], r["generation"]) == last]
    head = rows[0]
    cols = [Col("source", "source"), Col("count", "count", num, True),
            Col("share", "share", pct, True), Col("target", "target", pct, True),
            Col("target_count", "target count", _d1, True),
            Col("drift", "drift", _d1, True), Col("drift_share", "drift share", pct, True)]
    return _section("mixture", "Mixture", table(
        cols, rows, table_id="mixture-table",
        row_attrs=lambda r: {"data-source": r["source"]}),
        f"counts served vs targets at the latest committed cursor: step {head['step']},"
        f" generation {head['generation']}, position {head['position']:,}")


def _stragglers(data: ReportData) -> str:
    if not data.stragglers:
        return _section("stragglers", "Per-rank step times",
                        empty("no per-rank step times reported"))
    top = max((r["p99_ms"] or 0 for r in data.stragglers), default=0) or 1

    def bar(r: dict[str, Any]) -> str:
        p50, p99 = (100 * (r[k] or 0) / top for k in ("p50_ms", "p99_ms"))
        return Safe(f'<div class="bar"><span class="p99" style="width:{p99:.1f}%"></span>'
                    f'<span class="p50" style="width:{p50:.1f}%"></span></div>')

    flag = Safe('<span class="badge straggler">straggler</span>')
    rows = [{**r, "bar": bar(r), "flag": flag if r["straggler"] else ""}
            for r in data.stragglers]
    cols = [Col("member", "rank"), Col("node", "node"), Col("steps", "steps", num, True),
            Col("p50_ms", "p50 ms", _d1, True), Col("p99_ms", "p99 ms", _d1, True),
            Col("max_ms", "max ms", _d1, True),
            Col("input_wait_share", "input wait", pct, True),
            Col("vs_others", "p50 vs others", lambda v: f"{num(v, 2)}x", True),
            Col("bar", "p50 (dark) / p99", lambda v: v), Col("flag", "", lambda v: v)]
    flagged = sum(1 for r in rows if r["straggler"])
    return _section("stragglers", "Per-rank step times", table(
        cols, rows, table_id="stragglers-table",
        row_attrs=lambda r: {"data-member": r["member"],
                             "class": "flagged" if r["straggler"] else None}),
        f"generation {rows[0]['generation']} (the latest that reported);"
        f" {flagged} flagged: median over 1.5x the other ranks'")


def _output(value: Any) -> Safe:
    """A worker's last lines of output, with their line breaks."""
    return Safe(f"<pre>{esc(value)}</pre>") if value else Safe("-")


def _consequences(v: object) -> str:
    """A lost node's consequences (JSON list) as one line; '' for other failures."""
    return "; ".join(json.loads(v)) if isinstance(v, str) and v else ""


def _incidents(data: ReportData) -> str:
    if not data.incidents:
        return _section("incidents", "Incidents", empty("no failures"))
    origin = data.origin_ms
    cols = [Col("generation", "gen", num, True),
            Col("fault_at", "fault at", lambda v: since(v, origin), True),
            Col("failure_class", "class"), Col("signature", "signature", code),
            Col("member", "member"), Col("node", "node"),
            Col("lost_node", "lost node", lambda v: v or "-"), Col("action", "action"),
            Col("attempt", "try", num, True), Col("detection_s", "detection s", num, True),
            Col("rto_s", "RTO s", num, True),
            Col("steps", "last → resumed", str, True),
            Col("restored_tier", "tier", lambda v: v or "-"),
            Col("rpo_steps", "RPO steps", num, True), Col("rpo_s", "RPO s", num, True),
            Col("detail", "detail"),
            Col("consequences", "consequences, not causes", _consequences),
            Col("log_path", "log", code),
            Col("stderr_tail", "last output", _output)]
    rows = [{**r, "steps": f"{num(r['last_step'])} → {num(r['resumed_from'])}"}
            for r in data.incidents]
    return _section("incidents", "Incidents", table(
        cols, rows, table_id="incidents-table",
        row_attrs=lambda r: {"data-generation": r["generation"]}),
        "detection: fault to classification; RTO: fault to the next generation's first step;"
        " RPO: work lost to the restart")


def _recovery(data: ReportData) -> str:
    title = "Recovery per failure domain"
    if not data.recovery:
        return _section("recovery", title, empty("no progress or checkpoints yet"))
    origin = data.origin_ms
    cols = [Col("at", "at", lambda v: since(v, origin), True), Col("event_type", "after"),
            Col("domain", "domain"), Col("committed_step", "committed", num, True),
            Col("recoverable_step", "recoverable", num, True),
            Col("rpo_steps", "RPO steps", num, True), Col("rpo_s", "RPO s", num, True),
            Col("rpo_target_steps", "target", num, True),
            Col("violated", "violated", lambda v: Safe(
                '<span class="badge critical">violated</span>') if v else "no"),
            Col("incidents", "incidents", num, True), Col("rto_s", "last RTO s", num, True),
            Col("node", "failed node", lambda v: v or "")]
    return _section("recovery", title, table(
        cols, data.recovery, table_id="recovery-table",
        row_attrs=lambda r: {"data-domain": r["domain"]}),
        "per domain, the newest step a loss of it would fall back to (a verified copy on a"
        " tier that survives it), against checkpoint.rpo; RTO of that domain's incidents"
        " (infrastructure: host; other classes: process)")


def _alerts(data: ReportData) -> str:
    if not data.alerts:
        return _section("alerts", "Alerts", empty("no alerts"))
    origin = data.origin_ms
    cols = [Col("raised_at", "raised", lambda v: since(v, origin), True),
            Col("alert", "alert"), Col("subject", "subject"),
            Col("severity", "severity",
                lambda v: Safe(f'<span class="badge {esc(v)}">{esc(v)}</span>')),
            Col("owner", "owner"), Col("threshold", "threshold"),
            Col("value", "value", num, True), Col("detail", "detail"),
            Col("resolved_at", "resolved",
                lambda v: "open" if v is None else since(v, origin), True),
            Col("runbook", "runbook", code)]
    return _section("alerts", "Alerts", table(
        cols, data.alerts, table_id="alerts-table",
        row_attrs=lambda r: {"data-alert": r["alert"]}), "newest first")


def _n(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _dataset(head: dict[str, Any]) -> object:
    ds = consumed.dataset(head)
    if not ds["known"]:
        return ds["reason"]
    if ds["recorded_by"] == "cursor":
        return code(ds["id"])
    return Safe(f"{code(ds['id'])} (as submitted: the job loads its own data)")


def _positions(chain: Rows) -> str:
    pos = consumed.positions(chain)
    if not pos["known"]:
        return f"{pos['reason']}; {len(chain)} segment(s)"
    return f"[0, {pos['to']:,}) in {pos['segments']} segment(s)"


def _link_positions(row: dict[str, Any]) -> str:
    pos = consumed.segment_positions(row)
    return f"[{_n(pos['from'])}, {_n(pos['to'])})" if pos["known"] else "not recorded"


def _provenance(data: ReportData) -> str:
    if not data.provenance:
        return _section("provenance", "Provenance of the final checkpoint",
                        empty("no committed checkpoint"))
    head = data.provenance[0]
    pairs: list[tuple[str, object]] = [
        ("checkpoint", f"step {head['step']:,} (g{head['generation']})"),
        ("manifest digest", code(head["manifest_digest"])),
        ("manifest", code(head["manifest_path"])),
        ("dataset", _dataset(head)),
        ("code version", code(head["code_version"]) if head["code_version"] else consumed.NO_CODE),
        ("positions consumed", _positions(data.provenance)),
        ("per-source counts", counts(c["counts"]) if (c := consumed.source_counts(head))["known"]
         else c["reason"]),
        ("committed", utc(head["committed_at"]))]
    cols = [Col("depth", "depth", num, True), Col("generation", "gen", num, True),
            Col("steps", "steps (from, to]"), Col("positions", "positions [from, to)"),
            Col("source_delta", "per-source since parent", counts),
            Col("manifest_digest", "checkpoint", short), Col("parent_digest", "parent", short)]
    rows = [{**r, "steps": f"({_n(r['step_from'])}, {_n(r['step'])}]",
             "positions": _link_positions(r)}
            for r in data.provenance]
    chain = table(cols, rows, table_id="provenance-table", cls="chain",
                  row_attrs=lambda r: {"data-step": r["step"]})
    # A long run checkpoints hundreds of times: the chain folds away past a screenful.
    fold = " open" if len(rows) <= 12 else ""
    return _section("provenance", "Provenance of the final checkpoint",
                    facts(pairs, dl_id="provenance-facts")
                    + f'<details class="chain"{fold}><summary>lineage: {len(rows):,}'
                    f" checkpoint(s) back to the start</summary>{chain}</details>",
                    "the chain of checkpoints its weights were trained from")


def _audit(data: ReportData, limit: int) -> str:
    rows = data.audit
    origin = data.origin_ms
    cols = [Col("log_offset", "offset", num, True),
            Col("occurred_at", "at", lambda v: since(v, origin), True),
            Col("generation", "gen", num, True), Col("event_type", "fact"),
            Col("producer", "producer"), Col("summary", "summary")]
    shown = rows
    if len(rows) > limit:  # a long run has a fact per step: keep both ends, say what is cut
        half = limit // 2
        gap = {"log_offset": None, "occurred_at": None, "generation": None,
               "event_type": f"{len(rows) - 2 * half:,} facts omitted",
               "producer": "", "summary": f"the full trail: runledger query audit {data.run_id}"}
        shown = [*rows[:half], gap, *rows[-half:]]
    inner = (table(cols, shown, table_id="audit-table",
                   row_attrs=lambda r: {"data-type": r["event_type"]})
             if rows else empty("no facts recorded"))
    return (f'<section id="audit"><details><summary>Audit trail: {len(rows):,} facts in log'
            f" order</summary>{inner}</details></section>")
