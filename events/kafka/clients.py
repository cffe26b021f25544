"""Kafka at the edge: producers, records, quarantine (transactions: ``events.kafka.transactions``;
the bootstrap address and the broker check: ``events.kafka.broker``).

Every record is keyed by ``run_id``, placed by Kafka's murmur2 partitioner
(``events.partition``), and carries the Kafka header ``event_type``; the
controller's records also name their writer (``WRITER_HEADER``). Nothing here
decides anything about runs; it moves bytes and turns Kafka's failure modes
into this package's exceptions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from events.codec import Codec, default_codec
from events.errors import (
    DecodeError,
    KafkaOperationError,
    NotAuthorized,
)
from events.kafka.connection import client_config, refused
from events.limits import quarantine_value
from events.model import Event
from events.partition import PARTITIONER
from events.record import Quarantined, Record
from events.topics import QUARANTINE

log = logging.getLogger("runledger.events.kafka")

# The transactional id that appended a controller record: who decided it.
WRITER_HEADER = "writer"
# The headers a quarantined copy carries besides the original's own.
QUARANTINE_HEADERS = ("origin_topic", "origin_partition", "origin_offset", "reason", "detail")


Headers = list[tuple[str, str | bytes | None]]


def header_items(msg: Message) -> list[tuple[str, bytes]]:
    """A message's headers as (name, bytes) pairs, whatever form the client used."""
    raw: Any = msg.headers() or []
    items = raw.items() if isinstance(raw, dict) else raw
    out: list[tuple[str, bytes]] = []
    for key, value in items:
        if isinstance(value, str):
            value = value.encode()
        out.append((str(key), value or b""))
    return out


def event_type_of(msg: Message) -> str:
    """The ``event_type`` header of a message, read without decoding it ('' if none)."""
    return next((v.decode(errors="replace") for k, v in header_items(msg)
                 if k == "event_type"), "")


# Called with librdkafka's reason when a record could not be delivered.
OnFailure = Callable[[str], None]


# Polls (0.1 s each) a flush that failed bare waits for its fatal error's report.
_FATAL_POLLS = 50


def _kafka_error_in(exc: BaseException | None) -> KafkaError | None:
    """The KafkaError behind ``exc``: itself, its cause or its context (a few levels)."""
    for _ in range(6):
        if exc is None:
            return None
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0]
        exc = exc.__cause__ or exc.__context__
    return None


def event_headers(event: Event, version: int) -> Headers:
    return [("event_type", event.event_type.encode()), ("schema_version", str(version).encode())]


class EventProducer:
    """Idempotent producer for requests and reports (``acks=all``, idempotence on).

    Retries inside librdkafka cannot duplicate or reorder a partition's records.
    """

    def __init__(
        self, bootstrap: str, *, client_id: str = "runledger", codec: Codec | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.codec = codec or default_codec()
        conf = client_config(bootstrap, {
            "client.id": client_id,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "partitioner": PARTITIONER,
            # Only failures reach Python: a callback per delivered record was a
            # third of the send path's cost, and success needs no answer here.
            "delivery.report.only.error": True,
            **(config or {}),
        })
        # A fatal error (e.g. refused a producer id) is kept by the delivery
        # report and raised by flush, naming what was refused.
        self._fatal: KafkaError | None = None
        self._broken: BaseException | None = None
        # Delivery failures noted by the callback, judged by poll and flush.
        self._failed: list[tuple[KafkaError, str, OnFailure | None]] = []
        self._topics: set[str] = set()  # what this producer was asked to write, for errors
        self._producer = Producer(conf)
        # One delivery callback for every record sent without its own on_failure,
        # and the headers of each event type once (librdkafka copies them).
        self._plain_report = self._report(None)
        self._headers: dict[str, Headers] = {}

    def send(
        self, topic: str, event: Event, on_failure: OnFailure | None = None,
    ) -> None:
        """Queue ``event``; ``on_failure`` gets the reason if it is never delivered
        (from ``poll`` or ``flush``, on the caller's thread)."""
        data = self.codec.encode(event)
        headers = self._headers.get(event.event_type)
        if headers is None:
            # The version the codec wrote (the newest), not the one the event was built with.
            version = self.codec.registry.latest(event.event_type).version
            headers = self._headers[event.event_type] = event_headers(event, version)
        self.send_bytes(topic, event.run_id, data, headers, on_failure)

    def send_bytes(
        self, topic: str, key: str | bytes | None, value: bytes,
        headers: Headers | None = None, on_failure: OnFailure | None = None,
    ) -> None:
        report = self._plain_report if on_failure is None else self._report(on_failure)
        self._topics.add(topic)
        while True:
            try:
                self._producer.produce(
                    topic, value=value, key=key, headers=headers or [], on_delivery=report
                )
                return
            except BufferError:
                # Local queue full: serve delivery reports, which frees space (backpressure).
                self._producer.poll(0.1)
            except KafkaException as exc:  # refused before it is sent: too large (events.limits)
                raise KafkaOperationError(f"write to {topic}: {exc.args[0].str()}") from None

    def poll(self, timeout_s: float = 0.0) -> int:
        served = int(self._producer.poll(timeout_s))
        self._deliver_failures()
        return served

    def _report(self, on_failure: OnFailure | None
                ) -> Callable[[KafkaError | None, Message], None]:
        def report(err: KafkaError | None, msg: Message) -> None:
            # Only note it: on a fatal error (a producer id refused) confluent-kafka
            # runs this with its own exception pending, and then any further call
            # here may fail. poll and flush judge the failures outside the callback.
            if err is None:
                return
            try:
                self._failed.append((err, msg.topic() or "?", on_failure))
            except BaseException as exc:  # the pending error itself: flush reports it
                self._broken = exc
        return report

    def _deliver_failures(self) -> None:
        while True:  # pop is atomic: a heartbeat thread may poll meanwhile
            try:
                err, topic, on_failure = self._failed.pop(0)
            except IndexError:
                return
            if err.fatal():
                self._fatal = err
            # A fatal error purges the queue: the record's own error then says only that.
            cause = self._fatal if err.code() == KafkaError._PURGE_QUEUE and self._fatal else err
            if on_failure is not None:
                on_failure(refused(cause.code(), "write", topic) or err.str())

    def pending(self) -> int:
        """Records not yet delivered or failed (librdkafka's queue, ``len(Producer)``)."""
        return len(self._producer)

    def flush(self, timeout_s: float = 30.0) -> None:
        try:
            remaining = self._producer.flush(timeout_s)
        except (SystemError, KafkaException) as exc:
            found = self._fatal_behind(exc)
            if found is None:
                raise
            self._fatal, remaining = found, 0
        self._deliver_failures()
        if self._fatal is None and self._broken is not None:
            self._fatal = _kafka_error_in(self._broken)
        if self._fatal is not None:
            err = self._fatal
            refusal = refused(err.code(), "write", ", ".join(sorted(self._topics)) or "any topic")
            if refusal is not None:
                raise NotAuthorized(refusal)
            raise KafkaOperationError(f"flush: {err.str()}")
        if remaining:
            raise KafkaOperationError(f"flush: {remaining} records not delivered in {timeout_s}s")

    def _fatal_behind(self, exc: BaseException) -> KafkaError | None:
        """The fatal error behind a flush that failed: in the exception, kept by a delivery
        report, or reported by a poll soon after. A flush that meets a fatal error (a
        producer id refused) can fail as a bare ``SystemError`` before the error's own
        report has run (seen on a loaded machine); polling serves it."""
        for _ in range(_FATAL_POLLS):
            found = (_kafka_error_in(exc) or _kafka_error_in(self._broken)
                     or next((e for e, _, _ in self._failed if e.fatal()), None))
            if found is not None or not isinstance(exc, SystemError):
                return found
            try:
                self._producer.poll(0.1)
            except (SystemError, KafkaException) as again:
                exc = again
        return None

    def close(self, timeout_s: float = 30.0) -> None:
        self.flush(timeout_s)


class Quarantine:
    """Keeps undecodable records: a byte-exact copy on the quarantine topic.

    The copy's headers name the origin (topic, partition, offset) and the
    reason, so an operator can replay it once a schema or upcaster exists.
    """

    def __init__(self, producer: EventProducer, topic: str = QUARANTINE,
                 report: Callable[[Quarantined], None] | None = None) -> None:
        self._producer = producer
        self.topic = topic
        self._report = report or (lambda q: log.warning("%s", q))
        self.count = 0

    def keep(self, msg: Message, error: DecodeError) -> Quarantined:
        q = quarantined(msg, error)
        value, detail = quarantine_value(msg.key(), msg.value() or b"", q.detail, header_items(msg))
        headers: Headers = [
            ("origin_topic", q.topic.encode()),
            ("origin_partition", str(q.partition).encode()),
            ("origin_offset", str(q.offset).encode()),
            ("reason", q.reason.encode()),
            ("detail", detail.encode()[:1000]),
            *header_items(msg),
        ]
        self._producer.send_bytes(self.topic, msg.key(), value, headers)
        self._producer.flush()
        self.count += 1
        self._report(q)
        return q


def quarantined(msg: Message, error: DecodeError) -> Quarantined:
    """Where an undecodable message sits and why it could not be decoded."""
    raw_key = msg.key()
    key = raw_key.decode(errors="replace") if isinstance(raw_key, bytes) else raw_key
    return Quarantined(
        msg.topic() or "", msg.partition() or 0, msg.offset() or 0, error.reason, error.detail, key,
        msg.value(),
    )


# A reader's door rule: given a decoded record and its size in bytes, why it may
# not pass (a ``DecodeError`` naming the reason), or None (events.authority).
Admit = Callable[[Record, int], DecodeError | None]


def decode_or_quarantine(
    codec: Codec, msg: Message, quarantine: Quarantine | None = None, admit: Admit | None = None,
    raw: bool = False,
) -> Record | Quarantined:
    """The decoded record, or where and why it is undecodable or not admitted (copied
    to ``quarantine`` first, when there is one). The one decode step of every reader.
    ``raw``: the record keeps its value bytes and headers (``Record.value``)."""
    try:
        record = decode_message(codec, msg, raw)
        refused = admit(record, len(msg.value() or b"")) if admit is not None else None
        if refused is not None:
            raise refused
        return record
    except DecodeError as exc:
        return quarantine.keep(msg, exc) if quarantine is not None else quarantined(msg, exc)


def decode_message(codec: Codec, msg: Message, raw: bool = False) -> Record:
    """Decode one Kafka message or raise ``DecodeError`` saying why not.

    ``raw``: keep the value bytes and every header on the record as well.
    """
    value = msg.value()
    if value is None:
        raise DecodeError("empty", "record has no value (tombstone)")
    decoded = codec.decode(value)
    writer = ""
    origin: list[tuple[str, str]] = []
    # Only the headers read here are converted (the rest only with ``raw``): this
    # runs once per record of every reader.
    headers: Any = header_items(msg) if raw else (msg.headers() or ())
    if isinstance(headers, dict):
        headers = headers.items()
    for key, data in headers:
        if key not in _READ_HEADERS:
            continue
        named = _text(data)
        if key == "event_type":
            if named != decoded.event_type:
                raise DecodeError(
                    "event_type_mismatch", f"header says {named}, bytes are {decoded.event_type}"
                )
        elif key == WRITER_HEADER:
            writer = named
        else:
            origin.append((key, named))
    _, ts = msg.timestamp()
    return Record(msg.topic() or "", msg.partition() or 0, msg.offset() or 0, ts, decoded.event,
                  decoded.writer_version, writer, tuple(origin),
                  value if raw else b"", tuple(headers) if raw else ())


# The headers decode_message reads; every other one is passed over unconverted.
_READ_HEADERS = frozenset({"event_type", WRITER_HEADER, *QUARANTINE_HEADERS})


def _text(data: str | bytes | None) -> str:
    """A header value as text, as ``header_items`` then a lenient UTF-8 decode gives it."""
    if isinstance(data, str):
        return data
    return data.decode(errors="replace") if data else ""


def poll_burst(consumer: Consumer, max_records: int, timeout_s: float) -> list[Message]:
    """Wait up to ``timeout_s`` for one message, then take only what is already there.

    For followers and the controller's loop: a batch ``consume`` would wait out the
    whole timeout whenever traffic is light, and that wait is latency.
    """
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    messages = [first]
    if max_records > 1:
        messages += consumer.consume(max_records - 1, 0)
    return messages
