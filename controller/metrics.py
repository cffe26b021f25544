"""Prometheus ``/metrics`` for the controller: its run model as gauges and counters.

``families`` is a pure function of a model snapshot, the loop's counters and
the scrape time; ``ControllerCollector`` reads those from a live
``ControllerService`` on each scrape (``runledger.metricsserver`` serves it
over HTTP). The model
is an immutable value the loop replaces whole, so a scrape thread reads a
consistent snapshot without locking.

Nodes (``node_families``): the inventory's nodes by state (``ready``,
``cordoned``, ``draining``, ``quarantined``, ``lost``: ``controller.inventory.state_of``,
lost judged by the scrape's clock against the controller's node timeout), each
node's state, slots, busy slots, heartbeat age and the failures counted against
it. ``runledger_controller_report_to_fact_seconds`` is the loop's histogram of
the wait from each report to the commit of its consequences (``controller.latency``).

Cardinality, which is also what a scrape costs the loop (the scrape thread
builds every series under the same GIL): a controller exports the per-run
series of the runs it decides for (``Ownership.owns``), so a group of
controllers exports each run once, not once per controller (every controller's
model holds every run); and a finished run's series only for
``FINISHED_SHOWN_MS`` (10 minutes) after its end, long enough for every
scraper to record its outcome, after which its history is the projection's
(``runledger runs``, SQL). With 11,000 runs in the model a scrape of every
run's series was 90,000 lines and 0.4 s of CPU on an idle core; scraped beside
1,000 live runs on 3 controllers (bench/cluster.py), it moved report -> fact
p50 from 32 ms to 200-290 ms. The per-member heartbeat series and the
clock-driven ages exist only while a run is not terminal. Nodes are few (one
per agent ever registered) and each has a fixed handful of series.

Tested in tests/controller/test_metrics.py and tests/test_grafana.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from controller.inventory import CORDONED, DRAINING, LOST, QUARANTINED, READY, state_of
from controller.latency import Counts
from controller.model import Model
from controller.run_decide import NODE_TIMEOUT_MS
from controller.service import ControllerService, LoopStats
from events.state import RunState, Status


def _seconds_since(now_ms: int, then_ms: int) -> float:
    # Heartbeat and commit times come from other hosts' clocks; a small skew
    # ahead of ours would read as a negative age, which no alert rule expects.
    return max(0.0, (now_ms - then_ms) / 1000)


@dataclass(frozen=True, slots=True)
class _RunFamilies:
    status: GaugeMetricFamily
    generation: GaugeMetricFamily
    step: GaugeMetricFamily
    tokens: CounterMetricFamily
    heartbeat: GaugeMetricFamily
    ckpt_step: GaugeMetricFamily
    ckpt_lag: GaugeMetricFamily
    ckpt_age: GaugeMetricFamily
    failures: CounterMetricFamily
    rejections: CounterMetricFamily
    open_alerts: GaugeMetricFamily
    alert_open: GaugeMetricFamily


def _declare() -> _RunFamilies:
    return _RunFamilies(
        status=GaugeMetricFamily(
            "runledger_run_status", "1 for the run's current status (one series per run).",
            labels=["run", "status"]),
        generation=GaugeMetricFamily(
            "runledger_run_generation", "Current generation (the fencing token).",
            labels=["run"]),
        step=GaugeMetricFamily(
            "runledger_run_step", "Last accepted step of the current generation.",
            labels=["run"]),
        # A counter: the fold adds every accepted step's tokens, and a restart's
        # replayed steps add theirs again (the step gauge goes back, this never does).
        tokens=CounterMetricFamily(
            "runledger_run_tokens", "Tokens of every accepted step, replayed steps included.",
            labels=["run"]),
        heartbeat=GaugeMetricFamily(
            "runledger_run_heartbeat_age_seconds", "Seconds since the member's last heartbeat "
            "(live runs only).", labels=["run", "member"]),
        ckpt_step=GaugeMetricFamily(
            "runledger_run_checkpoint_step", "Step of the latest committed checkpoint.",
            labels=["run"]),
        ckpt_lag=GaugeMetricFamily(
            "runledger_run_checkpoint_lag_steps", "Last step minus the latest committed "
            "checkpoint's step (0 without one): the steps a restart now would redo.",
            labels=["run"]),
        ckpt_age=GaugeMetricFamily(
            "runledger_run_checkpoint_age_seconds", "Seconds since the latest checkpoint was "
            "committed (live runs only).", labels=["run"]),
        failures=CounterMetricFamily(
            "runledger_run_failures", "Failures classified for the run.", labels=["run"]),
        rejections=CounterMetricFamily(
            "runledger_run_rejections", "Reports and proposals the controller rejected.",
            labels=["run"]),
        open_alerts=GaugeMetricFamily(
            "runledger_run_open_alerts", "Alerts raised and not yet resolved.", labels=["run"]),
        alert_open=GaugeMetricFamily(
            "runledger_run_alert_open", "1 per open alert (its alert/subject key).",
            labels=["run", "alert"]),
    )


def run_families(runs: Iterable[RunState], now_ms: int) -> list[Metric]:
    """The per-run (and, for live runs, per-member) series."""
    f = _declare()
    for s in sorted(runs, key=lambda s: s.run_id):
        run = s.run_id
        f.status.add_metric([run, s.status.value], 1)
        f.generation.add_metric([run], s.generation)
        f.step.add_metric([run], s.step)
        f.tokens.add_metric([run], s.tokens)
        # Without a committed checkpoint a restart begins at step 0.
        committed = s.checkpoint.step if s.checkpoint is not None else 0
        f.ckpt_lag.add_metric([run], max(0, s.step - committed))
        if s.checkpoint is not None:
            f.ckpt_step.add_metric([run], s.checkpoint.step)
        f.failures.add_metric([run], s.failure_count)
        f.rejections.add_metric([run], s.rejections)
        f.open_alerts.add_metric([run], len(s.open_alerts))
        for key in sorted(s.open_alerts):
            f.alert_open.add_metric([run, key], 1)
        if s.status.terminal:
            continue  # ages of a finished run only grow: bounded cardinality, no noise
        for member, seen_ms in sorted(s.heartbeats.items()):
            f.heartbeat.add_metric([run, member], _seconds_since(now_ms, seen_ms))
        if s.checkpoint is not None:
            f.ckpt_age.add_metric([run], _seconds_since(now_ms, s.checkpoint.committed_at))
    return [getattr(f, field.name) for field in fields(f)]


def loop_families(model: Model | None, stats: LoopStats) -> list[Metric]:
    """The controller's own series: how much it has done, how many runs it holds, and how
    long reports wait for their facts."""
    by_status = GaugeMetricFamily(
        "runledger_controller_runs", "Runs in the model by status.", labels=["status"])
    counts = {status: 0 for status in Status}
    for s in model.runs.values() if model is not None else ():
        counts[s.status] += 1
    for status_, n in counts.items():
        by_status.add_metric([status_.value], n)
    return [
        by_status,
        CounterMetricFamily("runledger_controller_inputs", "Requests and reports handled.",
                            value=stats.inputs),
        CounterMetricFamily("runledger_controller_facts_appended",
                            "Records appended to runledger.runs.", value=stats.facts),
        CounterMetricFamily("runledger_controller_commands_appended",
                            "Records appended to runledger.commands.", value=stats.commands),
        CounterMetricFamily("runledger_controller_ticks", "Reconcile cycles completed.",
                            value=stats.ticks),
        GaugeMetricFamily("runledger_controller_last_tick_seconds",
                          "Wall time of the last cycle: its inputs, the tick and the commit.",
                          value=stats.last_tick_s),
        GaugeMetricFamily("runledger_controller_model_loaded",
                          "1 once the model has been rebuilt from runledger.runs.",
                          value=0 if model is None else 1),
        GaugeMetricFamily("runledger_controller_trusts_unsigned",
                          "1 when started --trust-unsigned: unsigned requests are taken on the "
                          "broker's word (any operator may name any principal).",
                          value=1 if stats.trusts_unsigned else 0),
        latency_family(stats.report_to_fact.snapshot()),
    ]


def latency_family(counts: Counts) -> HistogramMetricFamily:
    """The report-to-fact histogram (``controller.latency``)."""
    # As prometheus_client writes its own buckets' bounds: 0.001, 1.0, 60.0.
    buckets = [(repr(float(b)), n)
               for b, n in zip(counts.bounds, counts.cumulative[:-1], strict=True)]
    return HistogramMetricFamily(
        "runledger_controller_report_to_fact_seconds",
        "Per report taken in, seconds from its occurred_at (the sender's clock) to the "
        "commit of the transaction that carries what the controller made of it.",
        buckets=[*buckets, ("+Inf", counts.count)], sum_value=counts.sum)


NODE_STATES = (READY, CORDONED, DRAINING, QUARANTINED, LOST)


def node_families(model: Model | None, now_ms: int) -> list[Metric]:
    """The inventory: nodes by state (every state, 0 included) and per node."""
    by_state = GaugeMetricFamily(
        "runledger_controller_nodes", "Nodes in the inventory by state.", labels=["state"])
    state = GaugeMetricFamily(
        "runledger_node_state", "1 for the node's current state (one series per node).",
        labels=["node", "state"])
    slots = GaugeMetricFamily("runledger_node_slots", "Slots the node's agent offers.",
                              labels=["node"])
    busy = GaugeMetricFamily("runledger_node_busy_slots",
                             "Busy slots, as the agent's last heartbeat said.", labels=["node"])
    age = GaugeMetricFamily("runledger_node_heartbeat_age_seconds", "Seconds since the "
                            "node's agent was last heard from.", labels=["node"])
    failures = GaugeMetricFamily(
        "runledger_node_failures", "Failures counted against the node toward a quarantine "
        "(an uncordon clears them, a quarantine's expiry leaves the probation count).",
        labels=["node"])
    counts = dict.fromkeys(NODE_STATES, 0)
    nodes = model.inventory.nodes if model is not None else {}
    failed = model.node_failures if model is not None else {}
    for name in sorted(nodes.keys() | failed.keys()):
        failures.add_metric([name], failed.get(name, 0))
        node = nodes.get(name)
        if node is None:
            continue  # a failure named a node no agent registered
        now_state = state_of(node, now_ms, NODE_TIMEOUT_MS)[0]
        counts[now_state] += 1
        state.add_metric([name, now_state], 1)
        slots.add_metric([name], node.slots)
        busy.add_metric([name], node.busy_slots)
        if node.last_seen:
            age.add_metric([name], _seconds_since(now_ms, node.last_seen))
    for key, n in counts.items():
        by_state.add_metric([key], n)
    return [by_state, state, slots, busy, age, failures]


# A finished run's series stay this long after its end (its last fact's occurred_at).
FINISHED_SHOWN_MS = 600_000


def shown(s: RunState, now_ms: int) -> bool:
    """Whether a run's per-run series are exported: live, or finished in the last
    ``FINISHED_SHOWN_MS``."""
    return not s.status.terminal or now_ms - s.updated_at <= FINISHED_SHOWN_MS


def families(model: Model | None, stats: LoopStats, now_ms: int,
             owns: Callable[[str], bool] | None = None) -> list[Metric]:
    """Everything one scrape exposes, as a pure function of its inputs: the per-run
    series of the runs ``owns`` (every run when None) that are :func:`shown`."""
    runs = [s for s in (model.runs.values() if model is not None else ())
            if shown(s, now_ms) and (owns is None or owns(s.run_id))]
    return loop_families(model, stats) + node_families(model, now_ms) + run_families(runs, now_ms)


def wall_ms() -> int:
    return int(time.time() * 1000)


class ControllerCollector(Collector):
    """Reads a live service's model and counters at scrape time."""

    def __init__(self, service: ControllerService, clock: Callable[[], int] = wall_ms) -> None:
        self.service = service
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        # One read of each reference: the loop swaps in whole new models and ownerships.
        model, own = self.service.model, self.service.ownership
        # Before its group assigns it partitions, a controller decides for no run.
        yield from families(model, self.service.stats, self.clock(),
                            own.owns if own is not None else (lambda _run: False))
