"""``runledger report RUN --html FILE``: one run as a self-contained HTML postmortem.

The page itself is built by :mod:`queries.report` from the DuckDB projection
(``runledger project``); this module only finds the projection (the live file, or
a running projector's snapshot: ``queries.source``) and writes the file. How far
behind the log the projection was goes into the page's header and onto stderr.

Tested in tests/runledger/commands/test_report.py and
tests/runledger/commands/test_live_queries.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from queries.report import report as build_report
from queries.source import open_projection
from runledger import config
from runledger.config import Db, ProjectedRun
from runledger.errors import RunledgerError

Html = Annotated[Path, typer.Option("--html", help="Write the page to this file.",
                                    dir_okay=False)]


def register(app: typer.Typer) -> None:
    app.command()(report)


def report(run: ProjectedRun, html: Html, db: Db = None) -> None:
    """Write a run's postmortem as one HTML file: timeline, ETTR, incidents, provenance.

    The page needs no network and no script: open it in any browser, or attach it
    to the incident ticket.
    """
    con, fresh = open_projection(db or config.default_db())
    try:
        page = build_report(con, run, freshness=fresh.line())
    finally:
        con.close()
    try:
        html.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise RunledgerError(f"cannot write {html}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {html} ({len(page.encode()):,} bytes): run {run}", err=True)
    typer.echo(fresh.line(), err=True)

