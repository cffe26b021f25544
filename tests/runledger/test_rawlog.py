"""``runledger.rawlog.read_raw`` against the session's broker: the log as stored, to an end.

Value bytes, record keys and headers (order, repeats, empty ones) come back
exactly as written, in partition and offset order; an open transaction's
record is neither waited for nor handed out, an aborted one never; a topic
that is not there is one clear error.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from events.errors import KafkaOperationError
from events.kafka.connection import client_config
from events.signed.audit import LoggedRecord
from runledger.rawlog import read_raw
from tests.runledger.signed_topics import create_topics, write


def rec(partition: int, offset: int, value: bytes, *headers: tuple[str, bytes],
        key: bytes | None = b"k") -> LoggedRecord:
    return LoggedRecord("", partition, offset, value, tuple(headers), key)


@pytest.mark.kafka
def test_records_come_back_as_stored(bootstrap: str, unique: str) -> None:
    topic, empty = f"test.{unique}.a", f"test.{unique}.b"
    create_topics(bootstrap, {topic: 2, empty: 1})
    written = write(bootstrap, topic, [
        rec(1, 0, b"\x00\x01one", ("sig", b"\xff" * 64), ("h", b""), ("h", b"twice")),
        rec(0, 0, b"two", key=None),
        rec(1, 1, b"", ("only", b"x")),
        rec(0, 1, b"three\n"),
    ])
    found = read_raw(bootstrap, [topic, empty], patience_s=20)
    assert found[empty] == []
    assert found[topic] == sorted(written, key=lambda r: (r.partition, r.offset))


@pytest.mark.kafka
def test_an_open_transaction_is_not_waited_for_and_an_aborted_one_never_seen(
        bootstrap: str, unique: str) -> None:
    topic = f"test.{unique}"
    create_topics(bootstrap, {topic: 1})
    [first] = write(bootstrap, topic, [rec(0, 0, b"committed")])
    producer = Producer(client_config(bootstrap, {"transactional.id": f"test-{unique}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", key=b"k", partition=0)
    producer.flush(30)
    try:
        assert read_raw(bootstrap, [topic], patience_s=20)[topic] == [first]
    finally:
        producer.abort_transaction(30)
    [after] = write(bootstrap, topic, [rec(0, 3, b"after")])  # past the record and its marker
    assert read_raw(bootstrap, [topic], patience_s=20)[topic] == [first, after]


@pytest.mark.kafka
def test_a_missing_topic_is_one_clear_error(bootstrap: str, unique: str) -> None:
    with pytest.raises(KafkaOperationError, match=f"topic 'test.{unique}.none' does not exist"):
        read_raw(bootstrap, [f"test.{unique}.none"], patience_s=5)
