"""The log as stored: every record of some topics, raw value bytes and headers, up to an end.

A signature covers the exact bytes in the log and travels in record headers,
so whoever checks one (``runledger audit``, the key ring of ``runledger key``
and of ``stack up``) needs the records as Kafka holds them, not decoded events:
:func:`read_raw` hands them out as ``events.audit.LoggedRecord``\\ s.

The read is **bounded**: it takes each partition's end when it starts and
stops there, so it ends however much keeps arriving. It reads
``read_committed`` (an aborted or open transaction's records are never
seen), joins no consumer group and commits nothing. ``credentials`` names the
credentials file (``""``: none, plaintext; ``None``: ``$RUNLEDGER_CREDENTIALS``).

Tested in tests/runledger/test_rawlog.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from events.audit import LoggedRecord
from events.connection import client_config, refused
from events.errors import BrokerUnavailable, KafkaOperationError, NotAuthorized
from events.kafka import header_items

Partition = tuple[str, int]

_SETTINGS: dict[str, Any] = {
    # librdkafka wants a group id even for a consumer that never joins or commits.
    "group.id": "runledger-rawlog",
    "client.id": "runledger-rawlog",
    "enable.auto.commit": False,
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
    "log_level": 0,  # errors come back as one line each, not as librdkafka's own output
}
_NO_SUCH_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                            KafkaError._UNKNOWN_PARTITION})


def read_raw(bootstrap: str, topics: Sequence[str], *, credentials: str | None = None,
             patience_s: float = 30.0) -> dict[str, list[LoggedRecord]]:
    """Every record of each topic below the end it had when reading started.

    Per topic, in (partition, offset) order. ``patience_s``: how long to wait
    while records are due and none comes before ``BrokerUnavailable`` (10 s at
    least: a fetch takes its time even from a broker that is there).
    """
    consumer = Consumer(client_config(bootstrap, _SETTINGS, credentials))
    try:
        marks = _watermarks(consumer, topics, 10.0)
        due = {tp: high for tp, (low, high) in marks.items() if high > low}
        consumer.assign([TopicPartition(t, p, marks[(t, p)][0]) for t, p in due])
        records = _drain(consumer, due, max(patience_s, 10.0), bootstrap)
    finally:
        consumer.close()
    out: dict[str, list[LoggedRecord]] = {topic: [] for topic in topics}
    for record in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        out[record.topic].append(record)
    return out


def _watermarks(consumer: Consumer, topics: Sequence[str],
                timeout_s: float) -> dict[Partition, tuple[int, int]]:
    """(low, high) of every partition; under read_committed the high mark is the
    last stable offset, so an open transaction is not waited for."""
    out: dict[Partition, tuple[int, int]] = {}
    for topic in topics:
        try:
            meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        except KafkaException as exc:
            raise BrokerUnavailable(f"no Kafka broker answered: {exc.args[0].str()}") from None
        if meta is None or (meta.error is not None and meta.error.code() in _NO_SUCH_TOPIC):
            raise KafkaOperationError(f"topic {topic!r} does not exist")
        if meta.error is not None:
            raise NotAuthorized(refused(meta.error.code(), "read", topic)
                                or f"topic {topic!r}: {meta.error.str()}")
        for part in sorted(meta.partitions):
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, part),
                                                           timeout=timeout_s, cached=False)
            except KafkaException as exc:
                raise BrokerUnavailable(f"the end of {topic}[{part}]: "
                                        f"{exc.args[0].str()}") from None
            out[(topic, part)] = (int(low), int(high))
    return out


def _drain(consumer: Consumer, due: dict[Partition, int], patience_s: float,
           bootstrap: str) -> list[LoggedRecord]:
    """Records until every partition reached its end (a record at end-1, or the
    end reported past the transaction markers that no record's offset covers)."""
    pending = set(due)
    out: list[LoggedRecord] = []
    quiet_since = time.monotonic()
    while pending:
        messages = consumer.consume(500, 0.5)
        if messages:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > patience_s:
            raise BrokerUnavailable(f"no Kafka broker answered at {bootstrap} for "
                                    f"{patience_s:g} s: {len(pending)} partition(s) short of "
                                    "their end")
        for msg in messages:
            tp = (msg.topic() or "", msg.partition() or 0)
            if msg.error() is not None:
                _judge_error(msg, tp, pending)
                continue
            offset = msg.offset() or 0
            if tp not in pending or offset >= due[tp]:
                pending.discard(tp)  # past the end taken at the start: not this read's
                continue
            out.append(_logged(msg, tp, offset))
            if offset + 1 >= due[tp]:
                pending.discard(tp)
    return out


def _judge_error(msg: Message, tp: Partition, pending: set[Partition]) -> None:
    err = msg.error()
    if err is None:
        return
    if err.code() == KafkaError._PARTITION_EOF:
        pending.discard(tp)
        return
    if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
        return  # no group is joined; librdkafka asks for its coordinator all the same
    why = refused(err.code(), "read", tp[0])
    if why is not None:
        raise NotAuthorized(why)
    if err.fatal() or err.code() in _NO_SUCH_TOPIC:
        raise KafkaOperationError(f"read {tp[0]}: {err.str()}")
    # Anything else librdkafka retries; patience decides when to give up.


def _logged(msg: Message, tp: Partition, offset: int) -> LoggedRecord:
    key = msg.key()
    return LoggedRecord(tp[0], tp[1], offset, msg.value() or b"", tuple(header_items(msg)),
                        key.encode() if isinstance(key, str) else key)
