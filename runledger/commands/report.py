"""``runledger report RUN --html FILE``: one run as a self-contained HTML postmortem.

The page itself is built by :mod:`queries.report` from the DuckDB projection
(``runledger project``); this module only finds the projection, writes the file
and turns a :class:`~queries.errors.QueryError` into one line on stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from queries.errors import QueryError
from queries.report import report as build_report
from queries.runner import connect
from runledger.commands.project import _default_db
from runledger.commands.runs import _fail


def report(
    run: Annotated[str, typer.Argument(help="The run id.")],
    html: Annotated[Path, typer.Option("--html", help="Write the page to this file.",
                                       dir_okay=False)],
    db: Annotated[Path | None, typer.Option("--db", help="The projection (default"
                                            " $RUNLEDGER_HOME/projection.duckdb).")] = None,
) -> None:
    """Write a run's postmortem as one HTML file: timeline, ETTR, incidents, provenance.

    The page needs no network and no script: open it in any browser, or attach it
    to the incident ticket.
    """
    path = db or _default_db()
    try:
        if not path.exists():
            raise QueryError(_missing(path))
        con = connect(path)
        try:
            page = build_report(con, run)
        finally:
            con.close()
    except QueryError as exc:
        _fail(str(exc))
    try:
        html.write_text(page, encoding="utf-8")
    except OSError as exc:
        _fail(f"cannot write {html}: {exc.strerror or exc}")
    typer.echo(f"wrote {html} ({len(page.encode()):,} bytes): run {run}", err=True)


def _missing(path: Path) -> str:
    """No projection at ``path``: say how to make one, and which ones lie beside it."""
    near = sorted(p.name for p in path.parent.glob("*.duckdb")) if path.parent.is_dir() else []
    listed = f"; projections in {path.parent}: {', '.join(near)}" if near else ""
    return f"no projection at {path}; run `runledger project --db {path}` first{listed}"
