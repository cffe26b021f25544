"""One record limit (events.limits): the size it counts is the size librdkafka holds a
record to, byte for byte, and the limits derive from each other as documented.

librdkafka refuses an oversized record in ``produce`` itself, before any broker is
asked: a producer that never connects measures it (hermetic).
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from events.limits import (
    COPY_RESERVE,
    MAX_REQUEST_BYTES,
    MAX_SPEC_BYTES,
    RECORD_MAX_BYTES,
    TOO_LARGE,
    Header,
    quarantine_value,
    record_bytes,
    request_problem,
)
from events.topics import TOPIC_MAX_MESSAGE_BYTES, topic_specs

CASES: list[tuple[bytes, list[Header]]] = [
    (b"", []),
    (b"r" * 128, [("event_type", b"RunSubmitted"), ("schema_version", b"1")]),
    (b"k", [("runledger-sig", bytes(64)), ("writer", b"w" * 300), ("empty", b"")]),
]


@pytest.mark.parametrize(("key", "headers"), CASES)
def test_record_bytes_is_what_librdkafka_refuses_past_the_limit(
        key: bytes, headers: list[Header]) -> None:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0,
                         "message.timeout.ms": 1})
    largest = RECORD_MAX_BYTES - record_bytes(key, 0, headers)
    assert record_bytes(key, largest, headers) == RECORD_MAX_BYTES
    producer.produce("t", value=b"x" * largest, key=key, headers=headers)
    with pytest.raises(KafkaException) as refused:
        producer.produce("t", value=b"x" * (largest + 1), key=key, headers=headers)
    assert refused.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    producer.purge()


def test_the_limits_derive_from_the_record_limit() -> None:
    assert MAX_REQUEST_BYTES == RECORD_MAX_BYTES - COPY_RESERVE
    assert MAX_SPEC_BYTES == 990_000 < MAX_REQUEST_BYTES
    # One record and its batch's framing (61 bytes) fit every topic.
    assert TOPIC_MAX_MESSAGE_BYTES >= RECORD_MAX_BYTES + 61
    for spec in topic_specs(1):
        assert int(spec.config["max.message.bytes"]) == TOPIC_MAX_MESSAGE_BYTES, spec.name


def test_a_request_over_its_limit_is_named_with_both_figures() -> None:
    assert request_problem(MAX_REQUEST_BYTES, "runledger.requests") is None
    why = request_problem(MAX_REQUEST_BYTES + 1, "runledger.requests")
    assert why is not None and why.startswith(
        f"{TOO_LARGE}: the request is {MAX_REQUEST_BYTES + 1} bytes as a record on "
        f"runledger.requests; the limit is {MAX_REQUEST_BYTES} bytes")


def test_a_quarantined_copy_keeps_the_value_while_it_fits_with_its_origin() -> None:
    small = quarantine_value(b"k", b"v" * 1000, "bad_magic", [])
    assert small == (b"v" * 1000, "bad_magic")
    value, detail = quarantine_value(b"k", b"v" * (RECORD_MAX_BYTES - 1000), "bad_magic", [])
    assert value == b"" and detail.endswith("read it at its origin. bad_magic")
