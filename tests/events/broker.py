"""A real broker without runledger's readers: a fresh topic, and a topic's raw records.

The events tests check what runledger wrote by reading it back with a plain
confluent-kafka consumer, so a bug in the readers under test cannot hide itself.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from events.kafka.clients import header_items
from events.kafka.connection import client_config


def new_topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"test.{uuid.uuid4().hex[:12]}"
    admin = AdminClient(client_config(bootstrap, {}))  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def raw_values(bootstrap: str, topic: str) -> list[tuple[int, int, bytes, dict[str, bytes]]]:
    """(partition, offset, value, headers) of every committed record of ``topic``."""
    out = []
    consumer = Consumer(client_config(bootstrap, {"group.id": f"raw-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True,
                         "isolation.level": "read_committed"}))
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    pending = set(meta.partitions)
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            pending.discard(msg.partition())
            continue
        out.append((msg.partition(), msg.offset(), msg.value(), dict(header_items(msg))))
    consumer.close()
    return out
