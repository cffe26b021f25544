"""One run as a self-contained HTML postmortem (``runledger report RUN --html FILE``).

:func:`gather` reads everything from a projection through the package's
queries (``timeline``, ``ettr``, ``goodput``, ``stragglers``, ``mixture``,
``incidents``, ``alerts``, ``audit``, ``provenance``, ``recovery``, ``curves``) plus one small
lookup for
the header; :func:`render` turns that into the page, a pure function of the
data, so the same projection always gives the same bytes; :func:`render_text`
into the text form (the header, why a failed run failed, and the
silent-data-corruption section). A failed run's page opens with why
(``report_why``). The data
(``ReportData``) and the sections live in ``report_sections``, their building
blocks in ``report_html`` (tables, formats, CSS), ``report_svg`` (the
timeline and ETTR charts) and ``report_curves`` (loss and step time). The
page loads nothing: inline CSS and SVG, no script, every string from the log
escaped.
"""

from __future__ import annotations

import duckdb

from queries import report_sections as sections
from queries.ettr import ettr
from queries.recovery import recovery
from queries.report_html import CSS, esc
from queries.report_sdc import text_section
from queries.report_sections import ReportData, Rows
from queries.report_why import why, why_lines
from queries.runner import check_run, run_query

_SUMMARY = """
SELECT r.dataset_id, r.world_size, r.principal, r.submitted_at,
       (SELECT min(occurred_at) FROM events WHERE run_id = r.run_id
          AND topic = 'runledger.runs' AND event_type = 'RunAdmitted') AS admitted_at,
       (SELECT count(*) FROM generations WHERE run_id = r.run_id) AS generations,
       (SELECT max(step) FROM steps WHERE run_id = r.run_id) AS final_step,
       (SELECT json_extract_string(json_extract_string(payload, '$.spec_json'),
                                   '$.code_version')
          FROM events WHERE topic = r.topic AND part = r.part AND ofs = r.ofs) AS code_version,
       (SELECT json_extract(json_extract_string(payload, '$.spec_json'), '$.sdc')::VARCHAR
          FROM events WHERE topic = r.topic AND part = r.part AND ofs = r.ofs) AS sdc_spec,
       (SELECT outcome FROM endings WHERE run_id = r.run_id
          ORDER BY occurred_at DESC LIMIT 1) AS outcome,
       (SELECT reason FROM endings WHERE run_id = r.run_id
          ORDER BY occurred_at DESC LIMIT 1) AS reason
FROM runs r WHERE r.run_id = ? ORDER BY r.submitted_at LIMIT 1
"""


def gather(con: duckdb.DuckDBPyConnection, run_id: str, *, audit: bool = True) -> ReportData:
    """Run every query the page needs (the audit trail's only with ``audit``); QueryError
    for an unknown run."""
    check_run(con, run_id)
    cur = con.cursor()
    try:
        cur.execute(_SUMMARY, [run_id])
        cols = [d[0] for d in cur.description or []]
        row = cur.fetchone()
    finally:
        cur.close()
    summary = dict(zip(cols, row, strict=True)) if row else {}

    def q(name: str) -> Rows:
        return run_query(con, name, run_id).records()

    goodput = q("goodput")
    return ReportData(run_id, summary, ettr(con, run_id), q("timeline"),
                      goodput[0] if goodput else None, q("stragglers"), q("mixture"),
                      q("incidents"), q("alerts"), q("audit") if audit else [], q("provenance"),
                      recovery(con, run_id).records(), q("curves"))


def report(con: duckdb.DuckDBPyConnection, run_id: str, *, max_audit_rows: int = 2000,
           freshness: str | None = None) -> str:
    """The HTML page for ``run_id``; ``freshness``: how far behind the log the projection
    is (``queries.source.Freshness.line``), shown in the header."""
    return render(gather(con, run_id), max_audit_rows=max_audit_rows, freshness=freshness)


def text(con: duckdb.DuckDBPyConnection, run_id: str, *, freshness: str | None = None) -> str:
    """The report's text form for a terminal (``runledger report RUN --text``)."""
    return render_text(gather(con, run_id), freshness=freshness)


def render_text(data: ReportData, *, freshness: str | None = None) -> str:
    """So far the header and the silent-data-corruption section; the page has the rest."""
    s = data.summary
    head = (f"Run {data.run_id}: {s.get('outcome') or 'live'}"
            f"{f' ({r})' if (r := s.get('reason')) else ''}; {s.get('generations') or 0}"
            f" generation(s), final step {s.get('final_step') or 0}\n")
    lag = f"{freshness}\n" if freshness else ""
    failed = "".join(f"{line}\n" for line in why_lines(s.get("outcome"), data.incidents))
    return f"{head}{failed}{lag}\n{text_section(s.get('sdc_spec'), data.incidents)}"


def render(data: ReportData, *, max_audit_rows: int = 2000,
           freshness: str | None = None) -> str:
    """The page for gathered data; the audit table keeps both ends of a longer trail."""
    # A failed run opens with why: the failure it ended on, its log and last lines.
    body = [why(data.run_id, data.summary.get("outcome"), data.summary.get("reason"),
                data.incidents),
            *sections.body(data, max_audit_rows)]
    outcome = data.summary.get("outcome") or "live"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # No network: forbid every fetch, so an escaped-but-odd string can never load anything.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'\">"
        f"<title>runledger report: {esc(data.run_id)}</title><style>{CSS}</style></head>"
        f'<body><header class="top"><div class="inner"><h1 id="run-id">Run '
        f"{esc(data.run_id)}</h1><p>postmortem from the event log · {esc(outcome)}"
        f"{_reason(data)}</p>{_freshness(freshness)}</div></header>\n<main>\n"
        + "\n".join(body) +
        '\n<p class="note">Every number on this page comes from the projection of the event'
        " log: <code>runledger query NAME RUN</code> reproduces each section (timeline, ettr,"
        " curves, goodput, stragglers, mixture, incidents, recovery, alerts, audit, provenance);"
        " the silent-data-corruption section is <code>incidents</code> plus the spec.</p>"
        "\n</main></body></html>\n")


def sections_html(data: ReportData) -> str:
    """The page's sections without its shell or the audit trail: what the live view
    (``runledger ui``) shows of a run from the projection, under its live header."""
    return "\n".join([why(data.run_id, data.summary.get("outcome"), data.summary.get("reason"),
                           data.incidents), *sections.body(data, 0, audit=False)])


def _freshness(line: str | None) -> str:
    return "" if line is None else f'<p class="lag" id="projection-lag">{esc(line)}</p>'


def _reason(data: ReportData) -> str:
    reason = data.summary.get("reason")
    return f" ({esc(reason)})" if reason else ""
