"""Prometheus ``/metrics`` for the projector: throughput, quarantine, lag, snapshot age, ETTR,
and per run the silent-data-corruption suspicions by detector and verdicts by verdict.

``families`` is a pure function of a ``Snapshot`` (``lags``, shared with the
readers' snapshots, lives in ``projectors.snapshot``);
``ProjectorCollector`` takes the snapshot at scrape time from a live
``Projector`` (its counters), the database (stored offsets, ETTR) and the
broker (log end offsets); ``runledger.metricsserver`` serves it over HTTP.

Threads: DuckDB connections are not shared between threads, so the collector
opens its own cursor on the projector's database when it is built (on the
projector's thread, before ``run``) and uses it only under the projector's
``db_lock``, which publishing a snapshot holds too. Log end
offsets come from an ``events.kafka.reader.Watermarks`` of its own (read_committed,
so an open transaction is no lag before it can be read), cached for a few
seconds, so frequent or concurrent scrapes never hammer the broker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import duckdb
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from events.errors import EventsError
from events.kafka.reader import Watermarks
from projectors.projector import TOPICS, Projector
from projectors.snapshot import lags

__all__ = ["EndOffsets", "ProjectorCollector", "Snapshot", "families", "lags", "sdc_counts"]

log = logging.getLogger("runledger.projector.metrics")

END_OFFSETS_TTL_S = 5.0
BROKER_TIMEOUT_S = 2.0

# Run id -> ETTR ratio, computed on the scrape thread's own DuckDB cursor.
EttrOf = Callable[[duckdb.DuckDBPyConnection], dict[str, float]]
Partition = tuple[str, int]
# (run, detector) or (run, verdict) -> how many the projection holds.
Tally = dict[tuple[str, str], int]

# From the projection's own tables, not the fold: the counts survive a controller
# restart and need nothing the controller's model may not know yet.
_SDC_COUNTS = {
    "suspicions": "SELECT run_id, detector, count(*) FROM sdc_suspicions GROUP BY ALL",
    "verdicts": "SELECT run_id, verdict, count(*) FROM sdc_verdicts GROUP BY ALL",
}


def sdc_counts(con: duckdb.DuckDBPyConnection) -> tuple[Tally, Tally]:
    """Suspicions per (run, detector) and verdicts per (run, verdict) in a projection."""
    suspicions, verdicts = ({(run, key): n for run, key, n in con.execute(sql).fetchall()}
                            for sql in _SDC_COUNTS.values())
    return suspicions, verdicts


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape exposes, gathered once so the series agree with each other."""

    applied: int = 0
    quarantined: int = 0
    batches: int = 0
    last_batch: int = 0
    last_batch_s: float = 0.0
    lag: dict[Partition, int] = field(default_factory=dict)
    ettr: dict[str, float] | None = None
    # Seconds since the projector last published its read-only snapshot; None: none yet.
    snapshot_age_s: float | None = None
    snapshot_s: float = 0.0
    suspicions: Tally = field(default_factory=dict)
    verdicts: Tally = field(default_factory=dict)


def families(snap: Snapshot) -> list[Metric]:
    """The exposition of one snapshot: a pure function."""
    lag = GaugeMetricFamily(
        "runledger_projector_lag_records", "Log end offset minus the projected position.",
        labels=["topic", "partition"])
    for (topic, part), n in sorted(snap.lag.items()):
        lag.add_metric([topic, str(part)], n)
    out: list[Metric] = [
        CounterMetricFamily("runledger_projector_records_applied",
                            "Records applied to the tables (quarantined ones included).",
                            value=snap.applied),
        CounterMetricFamily("runledger_projector_quarantined",
                            "Records that could not be decoded, kept as quarantine rows.",
                            value=snap.quarantined),
        CounterMetricFamily("runledger_projector_batches",
                            "Batches committed, each with its offsets in one transaction.",
                            value=snap.batches),
        GaugeMetricFamily("runledger_projector_last_batch_records",
                          "Records in the last committed batch.", value=snap.last_batch),
        GaugeMetricFamily("runledger_projector_last_batch_seconds",
                          "Wall time to decode and commit the last batch.",
                          value=snap.last_batch_s),
        lag,
        _tally("runledger_run_sdc_suspicions", "Silent-data-corruption suspicions the "
               "controller kept, by the detector that raised them.", "detector",
               snap.suspicions),
        _tally("runledger_run_sdc_verdicts", "Suspicions classified by replay, by verdict.",
               "verdict", snap.verdicts),
    ]
    if snap.snapshot_age_s is not None:
        out.append(GaugeMetricFamily(
            "runledger_projector_snapshot_age_seconds",
            "Seconds since the read-only snapshot that query and report read was published.",
            value=snap.snapshot_age_s))
        out.append(GaugeMetricFamily(
            "runledger_projector_snapshot_seconds",
            "Wall time to publish the last snapshot (checkpoint, copy, fsync, rename).",
            value=snap.snapshot_s))
    if snap.ettr is not None:
        ettr = GaugeMetricFamily(
            "runledger_run_ettr_ratio", "Effective training time ratio: T_productive / "
            "T_allocated.", labels=["run"])
        for run, ratio in sorted(snap.ettr.items()):
            ettr.add_metric([run], ratio)
        out.append(ettr)
    return out


def _tally(name: str, doc: str, label: str, counts: Tally) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=["run", label])
    for (run, key), n in sorted(counts.items()):
        family.add_metric([run, key], n)
    return family


class EndOffsets:
    """Watermarks of every partition of ``topics``, cached for ``ttl_s``.

    A failed lookup is cached too (as no answer), so a broker that is down
    costs one timeout per TTL, not one per partition per scrape.
    """

    def __init__(self, bootstrap: str, topics: tuple[str, ...] = TOPICS, *,
                 ttl_s: float = END_OFFSETS_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.topics, self.ttl_s, self.clock = topics, ttl_s, clock
        self._marks = Watermarks(bootstrap, topics, name="runledger-projector-metrics")
        self._cached: dict[Partition, tuple[int, int]] | None = None
        self._at: float | None = None

    def get(self) -> dict[Partition, tuple[int, int]] | None:
        now = self.clock()
        if self._at is None or now - self._at >= self.ttl_s:
            self._cached, self._at = self._query(), now
        return self._cached

    def _query(self) -> dict[Partition, tuple[int, int]] | None:
        try:
            return self._marks.get(BROKER_TIMEOUT_S)
        except EventsError as exc:
            log.warning("log end offsets unavailable, no lag series this time: %s", exc)
            return None

    def close(self) -> None:
        self._marks.close()


class ProjectorCollector(Collector):
    """Reads a live projector, its database and the broker at scrape time."""

    def __init__(self, projector: Projector, *, ettr_of: EttrOf | None = None,
                 ttl_s: float = END_OFFSETS_TTL_S) -> None:
        self.projector = projector
        self.ettr_of = ettr_of
        # Built here, on the thread that owns the projector's connection.
        self._cursor = projector.con.cursor()
        self._ends = EndOffsets(projector.bootstrap, ttl_s=ttl_s)
        # The HTTP server answers scrapes on threads of their own; the cursor
        # and the consumer serve one at a time, and never while a snapshot is taken.
        self._lock = projector.db_lock

    def snapshot(self) -> Snapshot:
        p = self.projector
        with self._lock:
            ends = self._ends.get()
            lag = {} if ends is None else lags(ends, self._stored(), p.reached)
            ettr = self._ettr()
            suspicions, verdicts = sdc_counts(self._cursor)
        published = p.published_at
        return Snapshot(applied=p.applied, quarantined=p.quarantined, batches=p.batches,
                        last_batch=p.last_batch, last_batch_s=p.last_batch_s, lag=lag,
                        ettr=ettr, snapshot_s=p.snapshot_s, suspicions=suspicions,
                        verdicts=verdicts,
                        snapshot_age_s=None if published is None
                        else max(0.0, time.time() - published))

    def _stored(self) -> dict[Partition, int]:
        rows = self._cursor.execute("SELECT topic, part, next_offset FROM offsets").fetchall()
        return {(t, p): o for t, p, o in rows}

    def _ettr(self) -> dict[str, float] | None:
        if self.ettr_of is None:
            return None
        try:
            return self.ettr_of(self._cursor)
        except Exception as exc:
            # The callable is the queries package's; whatever fails in it costs
            # the ETTR series, never the whole scrape.
            log.warning("ETTR query failed, no ETTR series this time: %s", exc)
            return None

    def collect(self) -> Iterator[Metric]:
        yield from families(self.snapshot())

    def close(self) -> None:
        with self._lock:
            self._ends.close()
            self._cursor.close()
