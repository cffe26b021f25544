"""events/partition.py: Kafka's murmur2 partitioner computed here agrees with the Java
client's test vectors and with where our producers (librdkafka, ``murmur2_random``) and
the controller's transactional writer put records on a real broker; the writer header."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.kafka.clients import EventProducer
from events.kafka.consume import read_log
from events.kafka.transactions import TransactionalWriter
from events.partition import key_partitions, murmur2, partition_for
from tests.events.broker import new_topic
from tests.events.builders import Ev

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
JAVA = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_is_the_java_clients() -> None:
    assert {k: murmur2(k) for k in JAVA} == JAVA


@given(st.text(max_size=80), st.integers(1, 64))
def test_a_key_always_lands_inside_the_topic(key: str, partitions: int) -> None:
    assert 0 <= partition_for(key, partitions) < partitions
    assert partition_for(key, partitions) == partition_for(key, partitions)


def test_no_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match="partitions must be at least 1"):
        partition_for("run-1", 0)


@pytest.mark.kafka
def test_the_broker_places_every_producers_records_where_partition_for_says(
    bootstrap: str,
) -> None:
    topic = new_topic(bootstrap, partitions=6)
    runs = [f"run-{uuid.uuid4().hex[:10]}" for _ in range(24)]
    producer = EventProducer(bootstrap)
    for run in runs:
        producer.send(topic, Ev(run).submitted())
    producer.flush()
    writer = TransactionalWriter(bootstrap, f"test-partition-{uuid.uuid4().hex[:8]}")
    writer.init()
    with writer.transaction() as tx:
        for run in runs:
            tx.send(topic, Ev(run).step(1, 1))
    records = list(read_log(bootstrap, topic))
    assert len(records) == 2 * len(runs)
    assert {(r.event.run_id, r.partition) for r in records} == {
        (run, partition_for(run, 6)) for run in runs}
    # Only the controller's writer names itself on its records.
    assert {r.writer for r in records if r.event.event_type == "StepCommitted"} == {
        writer.transactional_id}
    assert {r.writer for r in records if r.event.event_type == "RunSubmitted"} == {""}


@given(st.text(min_size=1, max_size=40), st.integers(1, 12), st.integers(1, 12))
def test_key_partitions_keeps_the_one_partition_per_topic_the_key_lands_on(
    key: str, a: int, b: int,
) -> None:
    parts = [("a", p) for p in range(a)] + [("b", p) for p in range(b)]
    assert key_partitions(parts, key) == [("a", partition_for(key, a)),
                                          ("b", partition_for(key, b))]
