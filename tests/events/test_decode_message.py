"""decode_message reads only the headers it needs unless ``raw``: pure, no broker.

The fast path must judge every header exactly as the full conversion did.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Message

from events.codec import default_codec
from events.errors import DecodeError
from events.kafka.clients import WRITER_HEADER, decode_message, event_headers, header_items
from tests.events.sample_events import one_of_each

CODEC = default_codec()
EVENT = one_of_each("run-decode")[0]
VALUE = CODEC.encode(EVENT)


def message(headers: list[tuple[str, bytes | None]]) -> Message:
    return Message(topic="t", partition=2, offset=7, key=EVENT.run_id.encode(), value=VALUE,
                   headers=headers, timestamp=(1, 1234))


def ours() -> list[tuple[str, bytes | None]]:
    return [(k, v if isinstance(v, bytes | None) else v.encode())
            for k, v in event_headers(EVENT, 1)]


def test_writer_and_origin_are_read_and_other_headers_passed_over() -> None:
    headers = [*ours(), ("sig", b"\xff\xfe"), (WRITER_HEADER, b"ctl-a"),
               ("origin_topic", b"runledger.reports"), ("reason", None)]
    record = decode_message(CODEC, message(headers))
    assert record.event == EVENT
    assert (record.partition, record.offset, record.timestamp_ms) == (2, 7, 1234)
    assert record.writer == "ctl-a"
    assert record.origin == (("origin_topic", "runledger.reports"), ("reason", ""))
    assert record.value == b"" and record.headers == ()


def test_raw_keeps_every_header_as_bytes_in_log_order() -> None:
    headers = [*ours(), ("sig", b"\xff\xfe"), ("empty", None)]
    msg = message(headers)
    record = decode_message(CODEC, msg, raw=True)
    assert record.value == VALUE
    assert record.headers == tuple(header_items(msg))
    assert record.headers[-2:] == (("sig", b"\xff\xfe"), ("empty", b""))


@pytest.mark.parametrize("named", [b"RunQueued", None, b"\xff"])
def test_an_event_type_header_that_disagrees_is_refused(named: bytes | None) -> None:
    if named == EVENT.event_type.encode():
        pytest.skip("the sample happens to be of this type")
    with pytest.raises(DecodeError) as info:
        decode_message(CODEC, message([("event_type", named)]))
    assert info.value.reason == "event_type_mismatch"
    assert EVENT.event_type in info.value.detail
