"""The controller process: the thin shell around ``controller.reconcile``.

Start-up order matters: ``init_transactions`` first, which fences any older
controller with the same transactional id and aborts its open transaction;
only then is ``runledger.runs`` read (``read_committed``) to rebuild the model,
so the model cannot miss a fact a zombie was still committing. Then the loop:
consume requests and reports, ``handle`` each, ``tick`` the clock, and append
every fact and command together with the input offsets in one transaction.

Tested in tests/e2e/test_controller.py and tests/controller/test_metrics.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from controller.guard import Encoded, Problem, take_input, take_tick
from controller.model import Model, PlanOf, replay
from events.authority import admit_input
from events.consume import EventConsumer, read_log
from events.errors import Fenced, ProducerFenced
from events.kafka import EventProducer, Quarantine, Record, TransactionalWriter
from events.topics import COMMANDS, REPORTS, REQUESTS, RUNS

log = logging.getLogger("runledger.controller")

DEFAULT_TRANSACTIONAL_ID = "runledger-controller"
DEFAULT_GROUP = "runledger-controller"
FENCED_EXIT = 3


def wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class LoopStats:
    """What the loop has done since this process started, for ``controller.metrics``.

    Written by the loop thread only; a scrape thread reads single fields, each
    read atomic, and a scrape that straddles one cycle is harmless.
    """

    inputs: int = 0
    facts: int = 0
    commands: int = 0
    ticks: int = 0
    # The wall time of the last cycle: handling its inputs, the tick, and the commit.
    last_tick_s: float = 0.0


class ControllerService:
    def __init__(
        self,
        bootstrap: str,
        plan_of: PlanOf,
        *,
        transactional_id: str = DEFAULT_TRANSACTIONAL_ID,
        group_id: str = DEFAULT_GROUP,
        tick_s: float = 0.25,
        clock: Callable[[], int] = wall_ms,
    ) -> None:
        self.bootstrap = bootstrap
        self.plan_of = plan_of
        self.transactional_id = transactional_id
        self.group_id = group_id
        self.tick_s = tick_s
        self.clock = clock
        self.model: Model | None = None
        self.stats = LoopStats()

    def run(self, stop: threading.Event | None = None) -> int:
        """Run until ``stop`` is set (exit 0) or a newer controller fences this one."""
        stop = stop or threading.Event()
        writer = TransactionalWriter(self.bootstrap, self.transactional_id)
        try:
            writer.init()
        except ProducerFenced as exc:
            log.error("%s", exc)
            return FENCED_EXIT
        model = replay((r.event for r in read_log(self.bootstrap, RUNS)), self.clock(),
                       self.plan_of)
        log.info("rebuilt %d runs from %s", len(model.runs), RUNS)
        self.model = model  # scrapes see the rebuilt runs before the first assignment
        quarantine = Quarantine(EventProducer(self.bootstrap, client_id="controller-quarantine"))
        # Static membership under the fencing identity: a restarted controller
        # takes over its predecessor's partitions at once instead of waiting
        # out a session timeout, during which it would hear no heartbeats.
        consumer = EventConsumer(
            self.bootstrap, self.group_id, [REQUESTS, REPORTS], quarantine=quarantine,
            admit=admit_input,
            config={"group.instance.id": self.transactional_id, "session.timeout.ms": 10_000})
        listening = False
        encode = writer.codec.encode
        try:
            while not stop.is_set():
                records = consumer.poll(self.tick_s)
                started = time.monotonic()
                now = self.clock()
                if not consumer.assigned:
                    continue
                if not listening:
                    # Missing heartbeats count only from the moment reports flow.
                    model = replace(model, since=now)
                    listening = True
                out: list[Encoded] = []
                for record in records:
                    model, produced, problem = take_input(
                        model, record.event, record.topic, now, self.plan_of, encode)
                    out += produced
                    if problem is not None:
                        _log_problem(problem, record)
                model, produced, problems = take_tick(model, now, self.plan_of, encode)
                out += produced
                for problem in problems:
                    _log_problem(problem, None)
                if out or records:
                    with writer.transaction() as tx:
                        for topic, event, data in out:
                            tx.send(topic, event, data)
                        tx.send_offsets(consumer.positions(), consumer.group_metadata())
                self.model = model
                self._count(len(records), out, time.monotonic() - started)
        except Fenced:
            log.error(
                "fenced: another controller with transactional id %r has taken over; "
                "this one stops without writing anything more", self.transactional_id)
            return FENCED_EXIT
        finally:
            consumer.close()
        return 0

    def _count(self, inputs: int, out: list[Encoded], took_s: float) -> None:
        stats = self.stats
        stats.inputs += inputs
        stats.facts += sum(1 for topic, _, _ in out if topic == RUNS)
        stats.commands += sum(1 for topic, _, _ in out if topic == COMMANDS)
        stats.ticks += 1
        stats.last_tick_s = took_s


def _log_problem(problem: Problem, record: Record | None) -> None:
    run_id, reason, error = problem
    where = f" ({record.topic}[{record.partition}]@{record.offset})" if record else ""
    log.error("run %s: %s%s: %s; recorded, and every other run goes on",
              run_id, reason, where, error)
