"""``runledger project`` and ``runledger replay``: the DuckDB read model from the log.

``project --metrics HOST:PORT`` also serves Prometheus metrics at
``http://HOST:PORT/metrics`` while it projects (``projectors.metrics``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from projectors.metrics import EttrOf, ProjectorCollector
from projectors.projector import Projector, table_digests
from queries.ettr import ettr_all
from runledger.commands.runs import Bootstrap, _connect, _fail
from runledger.metricsserver import MetricsServer, serve_or_exit

Db = Annotated[Path, typer.Option("--db", help="The DuckDB file.")]

# Run id -> ETTR for the metrics endpoint; None until the queries package
# provides it (then: that function), and with None there is no ETTR series.
# ETTR per run on each scrape: the queries package's SQL over the projector's own cursor.
ETTR_OF: EttrOf | None = ettr_all


def _default_db() -> Path:
    home = os.environ.get("RUNLEDGER_HOME") or str(Path.home() / ".local/state/runledger")
    return Path(home) / "projection.duckdb"


def project(
    db: Annotated[Path | None, typer.Option("--db", help="The DuckDB file (default"
                                            " $RUNLEDGER_HOME/projection.duckdb).")] = None,
    once: Annotated[bool, typer.Option("--once", help="Stop when caught up.")] = False,
    bootstrap: Bootstrap = None,
    metrics_address: Annotated[
        str | None,
        typer.Option("--metrics", metavar="ADDR",
                     help="Serve Prometheus metrics at HOST:PORT (port 0: any free one)."),
    ] = None,
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
    server: MetricsServer | None = None
    try:
        if metrics_address is not None:
            collector = ProjectorCollector(projector, ettr_of=ETTR_OF)
            server = serve_or_exit(collector, metrics_address, on_close=collector.close)
        n = projector.run(until_caught_up=once, stop=stop)
    finally:
        if server is not None:
            server.close()  # first: its cursor lives on the projector's connection
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
