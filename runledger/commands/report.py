"""``runledger report RUN --html FILE``: one run as a self-contained HTML postmortem;
``--text`` prints its text form (the header and the silent-data-corruption section).

The page itself is built by :mod:`queries.report` from the DuckDB projection
(``runledger project``); this module only finds the projection (the live file, or
a running projector's snapshot: ``queries.source``) and writes the file. How far
behind the log the projection was goes into the page's header and onto stderr.

Tested in tests/runledger/commands/test_report.py and
tests/runledger/commands/test_live_queries.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from queries.report import report as build_report
from queries.report import text as build_text
from queries.source import open_projection
from runledger import config
from runledger.config import AsJson, Db, ProjectedRun
from runledger.errors import RunledgerError

Html = Annotated[Path | None, typer.Option("--html", help="Write the page to this file.",
                                           dir_okay=False)]
Text = Annotated[bool, typer.Option("--text", help="Print the text form on stdout: the "
                                    "header and the silent-data-corruption section.")]


def register(app: typer.Typer) -> None:
    app.command()(report)


def report(run: ProjectedRun, html: Html = None, text: Text = False, db: Db = None,
           as_json: AsJson = False) -> None:
    """Write a run's postmortem as one HTML file: timeline, ETTR, incidents, provenance.

    The page needs no network and no script: open it in any browser, or attach it
    to the incident ticket. ``--text`` prints the text form instead (or as well);
    ``--json`` prints one object: the file written, its size, the text form (with
    ``--text``) and the projection's freshness.
    """
    if html is None and not text:
        raise RunledgerError("runledger report needs --html FILE (the page) or --text"
                             " (the text form on stdout), or both")
    con, fresh = open_projection(db or config.default_db())
    try:
        page = None if html is None else build_report(con, run, freshness=fresh.line())
        plain = build_text(con, run, freshness=fresh.line()) if text else None
    finally:
        con.close()
    if plain is not None and not as_json:
        typer.echo(plain, nl=False)
    if html is not None and page is not None:
        try:
            html.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise RunledgerError(f"cannot write {html}: {exc.strerror or exc}") from None
    if as_json:
        typer.echo(json.dumps({
            "run_id": run, "html": None if html is None else str(html),
            "bytes": None if page is None else len(page.encode()), "text": plain,
            "projection": fresh.as_json()}, indent=2))
        return
    if html is None or page is None:
        return
    typer.echo(f"wrote {html} ({len(page.encode()):,} bytes): run {run}", err=True)
    typer.echo(fresh.line(), err=True)

