"""Topic names and their declared configuration (docs/architecture.md §3).

Every topic is keyed by ``run_id`` so one run's events are totally ordered.
``requests``, ``reports`` and ``runs`` are co-partitioned (``CO_PARTITIONED``:
the same partition count, the same partitioner), so a run's inputs and facts
share one partition number, the unit a controller owns (§7). ``keys`` holds
the principals' public keys (``events.principals``), one partition so key
records are totally ordered, kept forever like ``runs``; it is not
co-partitioned: every reader reads all of it. ``status`` is the compacted
changelog of each run's folded summary (``events.status``), keyed by run id
with as many partitions as ``runs``, so a run's summary lies on its facts'
partition number; a derived view, never an authority.

Tested in tests/test_docs.py and tests/runledger/stack/test_cluster.py.
"""

from __future__ import annotations

from dataclasses import dataclass

REQUESTS = "runledger.requests"
REPORTS = "runledger.reports"
RUNS = "runledger.runs"
COMMANDS = "runledger.commands"
QUARANTINE = "runledger.quarantine"
KEYS = "runledger.keys"
STATUS = "runledger.status"

ALL = (REQUESTS, REPORTS, RUNS, COMMANDS, QUARANTINE, KEYS, STATUS)
CO_PARTITIONED = (REQUESTS, REPORTS, RUNS)

# Every topic's largest record batch: the broker's default, declared so that a
# cluster-wide lower default cannot undercut ``events.limits.RECORD_MAX_BYTES``
# (one record and its batch framing must fit).
TOPIC_MAX_MESSAGE_BYTES = 1_048_588


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]


def topic_specs(brokers: int) -> list[TopicSpec]:
    """The topics a cluster of ``brokers`` nodes must have, with their configs.

    ``runs`` is the authoritative record: infinite retention, never compacted.
    With three or more brokers every topic is replicated three times and needs
    two in-sync replicas, so an ``acks=all`` write survives one lost broker.
    """
    base: dict[str, str] = {"cleanup.policy": "delete",
                            "max.message.bytes": str(TOPIC_MAX_MESSAGE_BYTES)}
    if brokers >= 3:
        base["min.insync.replicas"] = "2"
    specs = [
        TopicSpec(REQUESTS, 6, {**base, "retention.ms": str(30 * 86_400_000)}),
        TopicSpec(REPORTS, 6, {**base, "retention.ms": str(14 * 86_400_000)}),
        TopicSpec(RUNS, 6, {**base, "retention.ms": "-1", "retention.bytes": "-1"}),
        TopicSpec(COMMANDS, 3, {**base, "retention.ms": str(7 * 86_400_000)}),
        # Undecodable records are copied here byte for byte, with their origin in
        # headers, so nothing is lost; kept forever like the runs topic.
        TopicSpec(QUARANTINE, 1, {**base, "retention.ms": "-1"}),
        # Principals' public keys, registered and revoked by the admin: every
        # signature in the log is checked against them, forever.
        TopicSpec(KEYS, 1, {**base, "retention.ms": "-1", "retention.bytes": "-1"}),
        # One summary per run, the newest kept (compaction): `status` reads one
        # partition, `runs` all of them. Short segments and a low dirty ratio let
        # the cleaner keep the tail a reader scans small; a deleted run's
        # tombstone (none are written today) would stay a day.
        TopicSpec(STATUS, 6, {**base, "cleanup.policy": "compact", "retention.ms": "-1",
                              "segment.ms": str(10 * 60_000),
                              "min.cleanable.dirty.ratio": "0.1",
                              "delete.retention.ms": str(86_400_000)}),
    ]
    return specs


def replication_for(brokers: int) -> int:
    return 3 if brokers >= 3 else 1
