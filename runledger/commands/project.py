"""``runledger project`` and ``runledger replay``: the DuckDB read model from the log.

``project --metrics HOST:PORT`` also serves Prometheus metrics at
``http://HOST:PORT/metrics`` while it projects (``projectors.metrics``).
``project`` publishes a read-only snapshot beside the file (``projectors.snapshot``)
at most every ``--snapshot-every`` seconds and when it stops, which ``query`` and
``report`` read while it runs.

Tested in tests/runledger/commands/test_project.py and tests/projectors/test_metrics.py.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from projectors.metrics import ProjectorCollector
from projectors.projector import Projector, table_digests
from queries.ettr import EttrBook
from runledger import config
from runledger.config import Bootstrap, MetricsAddress, db_option
from runledger.errors import RunledgerError
from runledger.metricsserver import MetricsServer, serve_metrics

ProjectDb = Annotated[
    Path | None, db_option("The DuckDB file (default $RUNLEDGER_HOME/projection.duckdb).")
]
NewDb = Annotated[Path, db_option("The DuckDB file.")]
Once = Annotated[bool, typer.Option(
    "--once", help="Project what the log holds now (its ends when the command starts), then stop.")]
Digests = Annotated[bool, typer.Option("--json", help="Print the table digests.")]
ProjectJson = Annotated[bool, typer.Option(
    "--json", help="On stopping, print {records, db} as one JSON object.")]
SNAPSHOT_EVERY_S = 5.0
SnapshotEvery = Annotated[float, typer.Option(
    "--snapshot-every", metavar="S", min=0.0,
    help="Publish the read-only snapshot that query and report read while this runs at"
         " most every S seconds (0: after every batch).")]


def register(app: typer.Typer) -> None:
    app.command()(project)
    app.command()(replay)


def project(
    db: ProjectDb = None,
    once: Once = False,
    bootstrap: Bootstrap = None,
    metrics_address: MetricsAddress = None,
    as_json: ProjectJson = False,
    snapshot_every: SnapshotEvery = SNAPSHOT_EVERY_S,
) -> None:
    """Project runledger.runs and runledger.reports into DuckDB, resuming after the
    offsets stored with the last applied batch."""
    address = config.connect(bootstrap, role="projector")
    path = db or config.default_db()
    path.parent.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    projector = Projector(path, address, snapshot_every_s=snapshot_every)
    server: MetricsServer | None = None
    try:
        if metrics_address is not None:
            # ETTR per run on each scrape: the queries package's SQL over the projector's
            # own cursor, a bounded time of it per scrape (queries.ettr.EttrBook says why);
            # one book per projector, so what it remembers is this database's runs.
            collector = ProjectorCollector(projector, ettr_of=EttrBook())
            server = serve_metrics(collector, metrics_address, on_close=collector.close)
        n = projector.run(until_caught_up=once, stop=stop, retry_s=config.retry_s())
    finally:
        if server is not None:
            server.close()  # first: its cursor lives on the projector's connection
        projector.close()
    if as_json:
        typer.echo(json.dumps({"records": n, "db": str(path)}))
    else:
        typer.echo(f"projected {n} records into {path}")


def replay(db: NewDb, as_json: Digests = False, bootstrap: Bootstrap = None) -> None:
    """Rebuild a projection from offset 0 into a new database file, up to the log's end."""
    address = config.connect(bootstrap, role="projector")
    if db.exists():
        raise RunledgerError(
            f"{db} exists; replay builds a new database (remove it or pick another path)")
    projector = Projector(db, address)
    try:
        n = projector.run(until_caught_up=True, retry_s=config.retry_s())
    finally:
        projector.close()
    if as_json:
        typer.echo(json.dumps({"records": n, "tables": table_digests(db)}, indent=2))
    else:
        typer.echo(f"replayed {n} records into {db}")
