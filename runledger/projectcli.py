"""``runledger project`` and ``runledger replay``: the DuckDB read model from the log."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from projectors.projector import Projector, table_digests
from runledger.runcli import Bootstrap, _connect, _fail

Db = Annotated[Path, typer.Option("--db", help="The DuckDB file.")]


def _default_db() -> Path:
    home = os.environ.get("RUNLEDGER_HOME") or str(Path.home() / ".local/state/runledger")
    return Path(home) / "projection.duckdb"


def project(
    db: Annotated[Path | None, typer.Option("--db", help="The DuckDB file (default"
                                            " $RUNLEDGER_HOME/projection.duckdb).")] = None,
    once: Annotated[bool, typer.Option("--once", help="Stop when caught up.")] = False,
    bootstrap: Bootstrap = None,
) -> None:
    """Project runledger.runs and runledger.reports into DuckDB, resuming after the
    offsets stored with the last applied batch."""
    address = _connect(bootstrap)
    path = db or _default_db()
    path.parent.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    projector = Projector(path, address)
    try:
        n = projector.run(until_caught_up=once, stop=stop)
    finally:
        projector.close()
    typer.echo(f"projected {n} records into {path}")


def replay(
    db: Db,
    as_json: Annotated[bool, typer.Option("--json", help="Print the table digests.")] = False,
    bootstrap: Bootstrap = None,
) -> None:
    """Rebuild a projection from offset 0 into a new database file, up to the log's end."""
    address = _connect(bootstrap)
    if db.exists():
        _fail(f"{db} exists; replay builds a new database (remove it or pick another path)")
    projector = Projector(db, address)
    try:
        n = projector.run(until_caught_up=True)
    finally:
        projector.close()
    if as_json:
        typer.echo(json.dumps({"records": n, "tables": table_digests(db)}, indent=2))
    else:
        typer.echo(f"replayed {n} records into {db}")
