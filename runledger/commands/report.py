"""``runledger report RUN --html FILE``: one run as a self-contained HTML postmortem.

The page itself is built by :mod:`queries.report` from the DuckDB projection
(``runledger project``); this module only finds the projection and writes the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from queries.errors import QueryError
from queries.report import report as build_report
from queries.runner import connect
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
    path = db or config.default_db()
    if not path.exists():
        raise QueryError(_missing(path))
    con = connect(path)
    try:
        page = build_report(con, run)
    finally:
        con.close()
    try:
        html.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise RunledgerError(f"cannot write {html}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {html} ({len(page.encode()):,} bytes): run {run}", err=True)


def _missing(path: Path) -> str:
    """No projection at ``path``: say how to make one, and which ones lie beside it."""
    near = sorted(p.name for p in path.parent.glob("*.duckdb")) if path.parent.is_dir() else []
    listed = f"; projections in {path.parent}: {', '.join(near)}" if near else ""
    return f"no projection at {path}; run `runledger project --db {path}` first{listed}"
