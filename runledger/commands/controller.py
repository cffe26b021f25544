"""``runledger controller``: run the reconcile loop until stopped or fenced.

With ``--metrics HOST:PORT`` the run model is also served at
``http://HOST:PORT/metrics`` for Prometheus (``controller.metrics``).

Tested in tests/controller/test_metrics.py and tests/e2e/test_controller.py.
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
    DEFAULT_TRANSACTION_TIMEOUT_S,
    DEFAULT_TRANSACTIONAL_ID,
    FENCED_EXIT,
    ControllerService,
)
from runledger import config
from runledger.config import Bootstrap, MetricsAddress
from runledger.errors import ControllerFenced
from runledger.metricsserver import MetricsServer, serve_metrics

TransactionalId = Annotated[
    str, typer.Option(help="Fencing identity: a second controller with it fences the first; "
                           "controllers with different ids share the runs (one owner each).")
]
Group = Annotated[str, typer.Option(help="Consumer group for requests and reports.")]
Tick = Annotated[float, typer.Option(help="Seconds between reconcile ticks.")]
TransactionTimeout = Annotated[float, typer.Option(
    help="Seconds a transaction may stay open before the broker aborts it: how long a "
         "killed controller's last transaction can hold back the next owner of its runs.")]


def register(app: typer.Typer) -> None:
    app.command()(controller)


def controller(
    bootstrap: Bootstrap = None,
    transactional_id: TransactionalId = DEFAULT_TRANSACTIONAL_ID,
    group: Group = DEFAULT_GROUP,
    tick: Tick = 0.25,
    metrics_address: MetricsAddress = None,
    transaction_timeout: TransactionTimeout = DEFAULT_TRANSACTION_TIMEOUT_S,
) -> None:
    """Fold the log, reconcile runs with what agents report, append facts and commands."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    service = ControllerService(
        config.bootstrap(bootstrap),
        plan_from_submission,
        transactional_id=transactional_id,
        group_id=group,
        tick_s=tick,
        transaction_timeout_s=transaction_timeout,
    )
    server: MetricsServer | None = None
    try:
        if metrics_address is not None:
            server = serve_metrics(ControllerCollector(service), metrics_address)
        code = service.run(stop)
    finally:
        if server is not None:
            server.close()
    if code == FENCED_EXIT:
        raise ControllerFenced(
            f"controller fenced: another controller with transactional id "
            f"{transactional_id!r} took over; this one stopped without writing more")
    raise typer.Exit(code)
