"""``runledger controller``: run the reconcile loop until stopped or fenced."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Annotated

import typer

from controller.runplan import plan_from_submission
from controller.service import (
    DEFAULT_GROUP,
    DEFAULT_TRANSACTIONAL_ID,
    FENCED_EXIT,
    ControllerService,
)
from events.errors import EventsError
from events.kafka import bootstrap_from_env


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
) -> None:
    """Fold the log, reconcile runs with what agents report, append facts and commands."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        service = ControllerService(
            bootstrap_from_env(bootstrap),
            plan_from_submission,
            transactional_id=transactional_id,
            group_id=group,
            tick_s=tick,
        )
        code = service.run(stop)
    except EventsError as exc:
        typer.echo(f"runledger: {exc}", err=True)
        raise typer.Exit(1) from None
    if code == FENCED_EXIT:
        typer.echo(
            f"runledger: controller fenced: another controller with transactional id "
            f"{transactional_id!r} took over; this one stopped without writing more",
            err=True,
        )
    raise typer.Exit(code)
