"""One record size limit, end to end: what a producer of ours may send, and what a request may be.

Every producer here is librdkafka's, whose ``message.max.bytes`` (default
1,000,000) bounds one record as it counts it: key, value, every header and a
fixed framing (:func:`record_bytes`). A record over it is refused before it is
sent (``MSG_SIZE_TOO_LARGE``), so that is the limit every record of the log
must fit: :data:`RECORD_MAX_BYTES`, below every topic's ``max.message.bytes``
(``events.topics.TOPIC_MAX_MESSAGE_BYTES``, the broker's default, declared on
every topic so a cluster-wide lower default cannot undercut it).

A request is copied: the controller appends a ``RunSubmitted``'s exact value
bytes to ``runledger.runs`` with more headers than the request had (its writer,
its own signature, key id and chain link, and the operator's signature
renamed). So a request may use only :data:`MAX_REQUEST_BYTES`, the record limit
less :data:`COPY_RESERVE` for those headers; ``submit`` refuses a larger one in
one line, before anything is written (``runledger.signer``), and the
controller refuses to copy any request whose copy would not fit, recording a
``WriteRejected`` (:data:`TOO_LARGE`) instead of retrying a transaction the
producer can never send (``controller.fit``). A spec's text is bounded below
that again (``controller.spec.text.MAX_SPEC_BYTES``): what the request carries
besides the spec (digest, principal, ids, signature) is under
:data:`REQUEST_RESERVE`.

A record refused at the controller's door is copied to the quarantine with
its origin headers; one too large for that copy keeps its origin and reason
there without its value, and says so (:func:`quarantine_value`): the record
itself is still where the origin headers point.

Pure. Tested in tests/events/test_limits.py.
"""

from __future__ import annotations

from collections.abc import Iterable

# librdkafka's default ``message.max.bytes``, which no producer here changes.
RECORD_MAX_BYTES = 1_000_000
# librdkafka's framing allowance per record (RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD),
# measured: a keyless, headerless value of 999,964 bytes is the largest it sends.
RECORD_FRAMING = 36
# What a fact copy of a request adds, at most: the writer header (a transactional
# id of up to 255 characters), the fact's signature (64 bytes), key id, prev
# digest and keys head (64 each), and the request's two signature headers renamed (16 more bytes of
# names). About 600 bytes; the rest is margin.
COPY_RESERVE = 4_096
MAX_REQUEST_BYTES = RECORD_MAX_BYTES - COPY_RESERVE
# What a RunSubmitted request carries besides its spec's JSON: digest, principal,
# event header, dataset id, Avro framing and the request's own headers (about
# 700 bytes with a signature); what is left makes the spec limit a round 990,000.
REQUEST_RESERVE = 5_904
MAX_SPEC_BYTES = MAX_REQUEST_BYTES - REQUEST_RESERVE

# The refusal reason (``WriteRejected.reason``) of a request whose copy would not fit.
TOO_LARGE = "too_large"
# What a quarantined copy adds: its origin headers (topic, partition, offset,
# reason) and a detail of at most 1,000 bytes (``events.kafka.clients.Quarantine``).
QUARANTINE_RESERVE = 2_048

Header = tuple[str, str | bytes | None]


def varint_bytes(n: int) -> int:
    """Bytes of ``n`` as a zig-zag varint (record v2 lengths, Avro's int and long),
    at most 5 for an int32."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def header_bytes(headers: Iterable[Header]) -> int:
    """The bytes ``headers`` take in a record: each name and value with their lengths."""
    total = 0
    for name, value in headers:
        raw = value.encode() if isinstance(value, str) else (value or b"")
        size = len(name.encode())
        total += varint_bytes(size) + size + varint_bytes(len(raw)) + len(raw)
    return total


def record_bytes(key: str | bytes | None, value_len: int, headers: Iterable[Header] = ()) -> int:
    """The size librdkafka holds against :data:`RECORD_MAX_BYTES` for one record."""
    key_len = len(key.encode() if isinstance(key, str) else (key or b""))
    return RECORD_FRAMING + key_len + value_len + header_bytes(headers)


def request_problem(size: int, topic: str) -> str | None:
    """Why a request record of ``size`` bytes (``record_bytes``) may not be sent, or None."""
    if size <= MAX_REQUEST_BYTES:
        return None
    return (f"{TOO_LARGE}: the request is {size} bytes as a record on {topic}; the limit is "
            f"{MAX_REQUEST_BYTES} bytes, so that the controller's signed copy fits one "
            f"{RECORD_MAX_BYTES}-byte record (keep large configs out of the spec and name "
            "them by digest)")


def copy_problem(size: int, topic: str) -> str | None:
    """Why a record of ``size`` bytes cannot be appended to ``topic``, or None."""
    if size <= RECORD_MAX_BYTES:
        return None
    return (f"its copy on {topic} would be {size} bytes with its headers; the "
            f"limit is {RECORD_MAX_BYTES} bytes (a request may be at most {MAX_REQUEST_BYTES}"
            " bytes: submit it again with a smaller spec)")


def quarantine_value(key: str | bytes | None, value: bytes, detail: str,
                     headers: Iterable[Header]) -> tuple[bytes, str]:
    """The value a quarantined copy keeps and its detail: without the value, said first in
    the detail, when the copy with its origin headers would not fit one record."""
    if record_bytes(key, len(value), headers) + QUARANTINE_RESERVE <= RECORD_MAX_BYTES:
        return value, detail
    return b"", (f"value of {len(value)} bytes not kept here: with its origin headers it "
                 f"would pass the {RECORD_MAX_BYTES}-byte record limit; read it at its "
                 f"origin. {detail}")
