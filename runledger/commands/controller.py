"""``runledger controller``: run the reconcile loop until stopped or fenced.

With ``--metrics HOST:PORT`` the run model is also served at
``http://HOST:PORT/metrics`` for Prometheus (``controller.metrics``).
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Annotated

import typer

from controller.metrics import ControllerCollector
from controller.runplan import plan_from_submission
from controller.service import (
    DEFAULT_GROUP,
    DEFAULT_TRANSACTIONAL_ID,
    FENCED_EXIT,
    ControllerService,
)
from events.errors import EventsError
from events.kafka import bootstrap_from_env
from runledger.metricsserver import MetricsServer, serve_or_exit


def controller(
    bootstrap: Annotated[
        str | None, typer.Option(help="Kafka bootstrap (default $RUNLEDGER_BOOTSTRAP).")
    ] = None,
    transactional_id: Annotated[
        str, typer.Option(help="Fencing identity: a second controller with it fences the first.")
    ] = DEFAULT_TRANSACTIONAL_ID,
    group: Annotated[str, typer.Option(help="Consumer group for requests and reports.")] = (
        DEFAULT_GROUP
    ),
    tick: Annotated[float, typer.Option(help="Seconds between reconcile ticks.")] = 0.25,
    metrics_address: Annotated[
        str | None,
        typer.Option("--metrics", metavar="ADDR",
                     help="Serve Prometheus metrics at HOST:PORT (port 0: any free one)."),
    ] = None,
) -> None:
    """Fold the log, reconcile runs with what agents report, append facts and commands."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server: MetricsServer | None = None
    try:
        service = ControllerService(
            bootstrap_from_env(bootstrap),
            plan_from_submission,
            transactional_id=transactional_id,
            group_id=group,
            tick_s=tick,
        )
        if metrics_address is not None:
            server = serve_or_exit(ControllerCollector(service), metrics_address)
        code = service.run(stop)
    except EventsError as exc:
        typer.echo(f"runledger: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        if server is not None:
            server.close()
    if code == FENCED_EXIT:
        typer.echo(
            f"runledger: controller fenced: another controller with transactional id "
            f"{transactional_id!r} took over; this one stopped without writing more",
            err=True,
        )
    raise typer.Exit(code)
