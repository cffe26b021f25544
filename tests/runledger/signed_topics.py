"""Real topics for the audit tests: create a topic pair, write raw records into it as given.

``write`` produces each ``LoggedRecord`` to its partition with its exact value,
key and headers, in order, so on fresh topics the offsets Kafka gives are the
ones the record names (asserted). ``topic_pair`` makes a keys topic (one
partition, like ``runledger.keys``) and a runs topic of two partitions, named
after the test.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from events.kafka.connection import client_config
from events.signed.audit import LoggedRecord


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    admin = AdminClient(client_config(bootstrap))
    futures = admin.create_topics([NewTopic(name, count, 1) for name, count in partitions.items()])
    for future in futures.values():
        future.result(30)


def topic_pair(bootstrap: str, unique: str) -> tuple[str, str]:
    keys, runs = f"test.{unique}.keys", f"test.{unique}.runs"
    create_topics(bootstrap, {keys: 1, runs: 2})
    return keys, runs


def write(bootstrap: str, topic: str, records: Iterable[LoggedRecord]) -> list[LoggedRecord]:
    """The records as written to ``topic`` (the given ones, renamed to it)."""
    producer = Producer(client_config(bootstrap, {"acks": "all", "enable.idempotence": True}))
    landed: list[tuple[int, int]] = []
    out: list[LoggedRecord] = []
    for record in records:
        producer.produce(topic, value=record.value, key=record.key, partition=record.partition,
                         headers=list(record.headers),
                         on_delivery=lambda err, msg: landed.append(
                             (msg.partition(), msg.offset()) if err is None else (-1, -1)))
        out.append(LoggedRecord(topic, record.partition, record.offset, record.value,
                                record.headers, record.key))
    assert producer.flush(30) == 0
    assert sorted(landed) == sorted((r.partition, r.offset) for r in out), landed
    return out
