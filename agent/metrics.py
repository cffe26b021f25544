"""Prometheus ``/metrics`` for a node agent (``runledger agent --metrics``): its own view.

Only what the agent itself knows: the heartbeats it sent and how long ago the
last one was made, its slots (busy as its next heartbeat will say), the workers
it runs, the commands for its node and what it made of them, the worker exits
it reported, and what the log cap dropped of its workers' output
(``agent.stats`` counts them). What the controller concludes about the node
(lost, cordoned, quarantined) is the controller's ``runledger_node_*`` series.
Every series carries the ``node`` label, and every label value of a family is
present from the start (at 0), so a rate over it begins at the first scrape.

``families`` is a pure function of a :class:`Snapshot`; ``AgentCollector``
takes the snapshot from a live :class:`~agent.service.Agent` at scrape time
(``runledger.metricsserver`` serves it). The agent's state is an immutable
value its loop replaces whole; the counters are behind ``AgentStats``'s lock.
A running worker's dropped bytes are read from its ``<log>.dropped`` at
each scrape (``agent.logfiles.dropped``), an ended one's once at its exit.

Tested in tests/agent/test_metrics.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.logfiles import dropped
from agent.service import Agent
from agent.stats import Counted


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape exposes, gathered once so the series agree with each other."""

    node: str
    slots: int
    busy: int
    workers: int
    counted: Counted
    log_dropped: int


def families(snap: Snapshot, now_ms: int) -> list[Metric]:
    """Every series of one scrape: a pure function of the snapshot and the scrape's clock."""
    node, c = [snap.node], snap.counted
    beats = CounterMetricFamily("runledger_agent_heartbeats", "Heartbeats handed to the "
                                "producer.", labels=["node"])
    beats.add_metric(node, c.heartbeats)
    errors = CounterMetricFamily("runledger_agent_heartbeat_errors", "Heartbeats that could "
                                 "not be sent (the controller hears nothing for them).",
                                 labels=["node"])
    errors.add_metric(node, c.heartbeat_errors)
    age = GaugeMetricFamily("runledger_agent_heartbeat_age_seconds", "Seconds since the last "
                            "heartbeat was made (none before the first).", labels=["node"])
    if c.last_heartbeat_ms is not None:
        age.add_metric(node, max(0.0, (now_ms - c.last_heartbeat_ms) / 1000))
    slots = GaugeMetricFamily("runledger_agent_slots", "Slots by state: busy (workers "
                              "launched, their exit not yet seen) and free.",
                              labels=["node", "state"])
    slots.add_metric([snap.node, "busy"], snap.busy)
    slots.add_metric([snap.node, "free"], max(0, snap.slots - snap.busy))
    workers = GaugeMetricFamily("runledger_agent_workers_running", "Worker processes not yet "
                                "reaped (a stopped one until it exits).", labels=["node"])
    workers.add_metric(node, snap.workers)
    commands = CounterMetricFamily(
        "runledger_agent_commands", "Commands for this node by kind and what the agent first "
        "made of them.", labels=["node", "kind", "decision"])
    for (kind, decision), n in sorted(c.commands.items()):
        commands.add_metric([snap.node, kind, decision], n)
    exits = CounterMetricFamily("runledger_agent_worker_exits", "Worker exits reported, by "
                                "outcome.", labels=["node", "outcome"])
    for outcome, n in sorted(c.exits.items()):
        exits.add_metric([snap.node, outcome], n)
    drops = CounterMetricFamily("runledger_agent_log_dropped_bytes", "Bytes of workers' "
                                "output the log cap deleted (oldest first).", labels=["node"])
    drops.add_metric(node, snap.log_dropped)
    return [beats, errors, age, slots, workers, commands, exits, drops]


def now_ms() -> int:
    return int(time.time() * 1000)


class AgentCollector(Collector):
    """Reads a live agent's state and counters at scrape time."""

    def __init__(self, agent: Agent, clock: Callable[[], int] = now_ms) -> None:
        self.agent = agent
        self.clock = clock

    def snapshot(self) -> Snapshot:
        a = self.agent
        paths = a.procs.log_paths()
        a.stats.logs.seen((str(p), d.bytes) for p in paths if (d := dropped(p)) is not None)
        return Snapshot(node=a.config.node, slots=a.config.slots,
                        busy=a.state.busy_slots, workers=len(paths),
                        counted=a.stats.read(), log_dropped=a.stats.logs.total())

    def collect(self) -> Iterator[Metric]:
        yield from families(self.snapshot(), self.clock())
