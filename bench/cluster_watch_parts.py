"""bench/cluster.py's eyes: the facts as they land, the controller group, the projector.

- :class:`Facts` tails ``runledger.runs`` (``read_committed``, from its end when
  the scenario starts): per partition, the segments of facts each writer (the
  ``writer`` header) appended in turn, with when the first of each arrived; and
  hands the fleet what agents and workers react to (a generation started,
  confirmed, a run finished). A ``StepCommitted`` fact is timed against its
  report's send (report -> fact).
- :class:`Group` samples the controllers' consumer group every second: which
  member holds each partition of ``runledger.reports`` (two at once would be two
  owners), and the group's committed offsets against the log's ends on
  ``requests`` and ``reports`` (lag, and records absorbed per second).
- :class:`ProjectorLag` scrapes ``runledger project --metrics`` every second:
  ``runledger_projector_lag_records`` summed over its partitions.
- :func:`scrape` reads a controller's ``--metrics`` page as a scraper does (how
  long it took, its lines, its own report -> fact histogram), and
  :func:`bucket_quantiles` the quantiles of what it observed between two
  readings (at its buckets' resolution): the time from a
  report's ``occurred_at`` to the commit that carries its consequences, inside
  the controller, against the fleet's report -> fact, which adds the delivery
  of the fact to a reader.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.cluster_fleet_parts import Fleet
from bench.common import percentile
from bench.controller import Reader
from events.codec import Codec
from events.kafka.clients import WRITER_HEADER
from events.kafka.connection import client_config
from events.model import (
    GenerationStarted,
    MembershipConfirmed,
    RunFinished,
    StepCommitted,
)
from events.topics import REPORTS, REQUESTS, RUNS

# The facts whose payload the fleet reads; every other fact is counted by its header.
_DECODED = {"GenerationStarted", "MembershipConfirmed", "RunFinished", "StepCommitted"}


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


@dataclass
class Segment:
    """A stretch of one partition's facts appended by one writer."""

    writer: str
    first_offset: int
    first_at: float  # time.monotonic() when its first fact was read


class Facts:
    """Tails ``runs`` for the fleet; keeps each partition's writer segments."""

    def __init__(self, bootstrap: str, codec: Codec, fleet: Fleet, tag: str) -> None:
        self.codec, self.fleet = codec, fleet
        self.lock = threading.Lock()
        self.segments: dict[int, list[Segment]] = {}
        self.reader = Reader(bootstrap, RUNS, self.on_message, f"cluster-facts-{tag}")

    def start(self) -> None:
        self.reader.start()

    def trouble(self) -> str | None:
        """Why the fleet cannot go on: its reader of facts died."""
        return None if self.reader.is_alive() else "the reader of runledger.runs stopped"

    def stop(self) -> None:
        self.reader.stop.set()
        self.reader.join(15)

    def on_message(self, msg: Message, at: float) -> None:
        now = time.monotonic()
        pairs = cast(list[tuple[str, bytes | None]], msg.headers() or [])
        headers = {k: _text(v) for k, v in pairs if k in (WRITER_HEADER, "event_type")}
        writer = headers.get(WRITER_HEADER, "")
        name = headers.get("event_type", "")
        part, offset = msg.partition() or 0, msg.offset() or 0
        with self.lock:
            segs = self.segments.setdefault(part, [])
            if not segs or segs[-1].writer != writer:
                segs.append(Segment(writer, offset, now))
        if name not in _DECODED:
            return
        event = self.codec.decode(msg.value() or b"").event
        match event:
            case StepCommitted():
                self.fleet.lat.arrived(event.header.event_id, at)
            case GenerationStarted():
                self.fleet.heard("started", event.run_id, (event.generation, event.members))
            case MembershipConfirmed():
                self.fleet.heard("confirmed", event.run_id, None)
            case RunFinished():
                self.fleet.heard("finished", event.run_id, event.outcome)

    def first_by_other(self, partition: int, than: str, after: float) -> float | None:
        """When the first fact on ``partition`` by a writer other than ``than`` arrived
        after ``after`` (monotonic), if one has."""
        with self.lock:
            for seg in self.segments.get(partition, []):
                if seg.first_at >= after and seg.writer != than:
                    return seg.first_at
        return None


@dataclass
class Sample:
    at: float  # time.monotonic()
    owners: dict[int, list[str]]  # partition of reports -> the members holding it
    committed: int  # the group's committed offsets on requests and reports, summed
    ends: int  # those partitions' end offsets, summed


@dataclass(eq=False)  # a thread: hashed by identity
class Group(threading.Thread):
    """The controllers' group, every second."""

    bootstrap: str
    group: str
    samples: list[Sample] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(name="group", daemon=True)
        self.admin = AdminClient(client_config(self.bootstrap))
        self.consumer = Consumer(client_config(self.bootstrap, {
            "group.id": self.group, "enable.auto.commit": False}))
        self.parts: list[TopicPartition] = []
        for topic in (REQUESTS, REPORTS):
            meta = self.consumer.list_topics(topic, timeout=10).topics[topic]
            self.parts += [TopicPartition(topic, p) for p in sorted(meta.partitions)]

    def owners(self) -> dict[int, list[str]]:
        desc = self.admin.describe_consumer_groups([self.group])[self.group].result(timeout=10)
        out: dict[int, list[str]] = {}
        for m in desc.members:
            who = m.group_instance_id or m.client_id
            for tp in (m.assignment.topic_partitions if m.assignment else []):
                if tp.topic == REPORTS:
                    out.setdefault(tp.partition, []).append(who)
        return out

    def run(self) -> None:
        try:
            while not self.stopped.wait(1.0):
                try:
                    owners = self.owners()
                    committed = self.consumer.committed(self.parts, timeout=10)
                    ends = sum(self.consumer.get_watermark_offsets(
                        TopicPartition(tp.topic, tp.partition), timeout=10, cached=False)[1]
                        for tp in self.parts)
                except Exception:
                    continue
                self.samples.append(Sample(time.monotonic(), owners,
                                           sum(max(tp.offset, 0) for tp in committed), ends))
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join(30)

    def between(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if start <= s.at <= end]


@dataclass(eq=False)  # a thread: hashed by identity
class ProjectorLag(threading.Thread):
    """``runledger_projector_lag_records`` summed, every second, from its metrics page."""

    url: str
    samples: list[tuple[float, int]] = field(default_factory=list)
    scrapes_s: list[float] = field(default_factory=list)  # how long each scrape took
    stopped: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(name="projector-lag", daemon=True)

    def read(self) -> int | None:
        began = time.monotonic()
        try:
            with urllib.request.urlopen(self.url, timeout=120) as page:
                text = page.read().decode()
        except OSError:
            return None
        self.scrapes_s.append(time.monotonic() - began)
        lines = [ln for ln in text.splitlines()
                 if ln.startswith("runledger_projector_lag_records{")]
        return sum(int(float(ln.rsplit(" ", 1)[1])) for ln in lines) if lines else None

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            lag = self.read()
            if lag is not None:
                self.samples.append((time.monotonic(), lag))

    def stop(self) -> None:
        self.stopped.set()
        self.join(30)

    def quantiles(self, since: float | None = None) -> dict[str, int | None]:
        """p50, p99 and max of the lag sampled from ``since`` (monotonic) on."""
        lags = [n for at, n in self.samples if since is None or at >= since]
        return {"p50": percentile(lags, 50) if lags else None,
                "p99": percentile(lags, 99) if lags else None,
                "max": max(lags, default=None)}


REPORT_TO_FACT = "runledger_controller_report_to_fact_seconds_bucket"


@dataclass(frozen=True)
class Page:
    """One scrape of a controller's metrics page."""

    took_s: float
    lines: int
    histogram: dict[float, float]  # report -> fact: cumulative count per upper bound (s)


def scrape(url: str) -> Page | None:
    """A controller's metrics page, as a scraper reads it; None when it cannot be read
    (a killed controller)."""
    began = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=60) as page:
            text = page.read().decode()
    except OSError:
        return None
    return Page(time.monotonic() - began, text.count("\n"), buckets(text))


def buckets(text: str) -> dict[float, float]:
    """The report -> fact buckets of a controller's metrics page."""
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(REPORT_TO_FACT + "{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(le)] = float(line.rsplit(" ", 1)[1])  # float("+Inf") is inf
    return out


def bucket_quantiles(before: dict[float, float], after: dict[float, float],
                     qs: tuple[int, ...] = (50, 90, 99)) -> dict[str, float | None]:
    """The upper bound of the bucket holding each quantile of what was observed between
    two readings of one histogram (or of several, summed); ``count`` of them."""
    bounds = sorted(after)
    grew = [after[b] - before.get(b, 0.0) for b in bounds]
    total = grew[-1] if grew else 0.0
    out: dict[str, float | None] = {"count": total}
    for q in qs:
        out[f"p{q}_le_s"] = next((b for b, n in zip(bounds, grew, strict=True)
                                  if total and n >= total * q / 100), None)
    return out


def summed(readings: list[Page | None]) -> dict[float, float]:
    """Several controllers' histograms as one (the same buckets)."""
    out: dict[float, float] = {}
    for r in readings:
        for b, n in (r.histogram if r is not None else {}).items():
            out[b] = out.get(b, 0.0) + n
    return out


def ownership_summary(samples: list[Sample]) -> dict[str, Any]:
    """From the group's samples: partitions ever held by two members at once, and each
    partition's owners in turn."""
    doubled = sorted({p for s in samples for p, who in s.owners.items() if len(who) > 1})
    turns: dict[int, list[str]] = {}
    for s in samples:
        for p, who in s.owners.items():
            if len(who) == 1 and (not turns.get(p) or turns[p][-1] != who[0]):
                turns.setdefault(p, []).append(who[0])
    return {"held_by_two_at_once": doubled, "owners_in_turn": turns}
