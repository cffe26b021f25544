"""The controller's Kafka transactions: ``TransactionalWriter``.

Facts, commands and the input offsets go out in one transaction (exactly-once
v2); the broker fences a zombie with the same transactional id, and this module
turns that into ``ProducerFenced``. Records carry the ``WRITER_HEADER`` naming
the transactional id that decided them.

Tested in tests/events/kafka/test_clients.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from events.codec import Codec, default_codec
from events.errors import KafkaOperationError, NotAuthorized, ProducerFenced
from events.kafka.clients import WRITER_HEADER, event_headers
from events.kafka.connection import client_config, refused
from events.model import Event
from events.partition import PARTITIONER

_FENCED_CODES = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
    # Offsets sent by a consumer whose static group membership was taken over.
    KafkaError.FENCED_INSTANCE_ID,
}


def _raise_txn(call: str, exc: KafkaException, transactional_id: str = "") -> None:
    err: KafkaError = exc.args[0]
    if err.code() in _FENCED_CODES or (err.fatal() and "fenced" in err.str().lower()):
        raise ProducerFenced(
            f"{call}: this writer was fenced by a newer one with the same transactional id"
        ) from None
    refusal = refused(err.code(), "use", transactional_id or "its transactional id")
    if refusal is not None:
        raise NotAuthorized(f"{call}: {refusal}") from None
    raise KafkaOperationError(f"{call}: {err.str()}") from None


class TransactionalWriter:
    """The controller's consume-transform-produce writer.

    Facts and commands go out in one Kafka transaction together with the input
    offsets, so a fact is appended exactly once and a zombie is fenced by the
    broker: a second writer with the same ``transactional_id`` makes every call
    of the first raise ``ProducerFenced``.
    """

    def __init__(
        self, bootstrap: str, transactional_id: str, *, codec: Codec | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.codec = codec or default_codec()
        self.transactional_id = transactional_id
        self._producer = Producer(client_config(bootstrap, {
            "transactional.id": transactional_id,
            "client.id": transactional_id,
            "acks": "all",
            "enable.idempotence": True,
            "transaction.timeout.ms": 60_000,
            "partitioner": PARTITIONER,
            # Back-to-back transactions meet CONCURRENT_TRANSACTIONS while the
            # previous commit's markers are written; librdkafka's default 100 ms
            # retry backoff then dominates report-to-fact latency (bench/controller.py).
            "retry.backoff.ms": 10,
            "retry.backoff.max.ms": 50,
            **(config or {}),
        }))

    def init(self, timeout_s: float = 30.0) -> None:
        try:
            self._producer.init_transactions(timeout_s)
        except KafkaException as exc:
            _raise_txn("init_transactions", exc, self.transactional_id)

    def begin(self) -> None:
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            _raise_txn("begin_transaction", exc)

    def send(self, topic: str, event: Event, data: bytes | None = None,
             headers: Sequence[tuple[str, bytes]] = (), version: int | None = None) -> None:
        """Append ``event`` (``data``: its bytes, when the caller encoded it already).

        ``headers`` go after the record's own (a signature's, ``events.signed.signing``);
        ``version`` is the schema version ``data`` was written with, when not
        the codec's newest (bytes copied from another writer's record).
        """
        if data is None:
            data = self.codec.encode(event)
        try:
            if version is None:
                version = self.codec.registry.latest(event.event_type).version
            self._producer.produce(topic, value=data, key=event.run_id, headers=[
                *event_headers(event, version), (WRITER_HEADER, self.transactional_id.encode()),
                *headers])
        except KafkaException as exc:
            _raise_txn("produce", exc)

    def send_offsets(self, offsets: Sequence[TopicPartition], group_metadata: Any) -> None:
        """Commit a consumer's input offsets inside this transaction.

        ``group_metadata`` is ``EventConsumer.group_metadata()``.
        """
        try:
            self._producer.send_offsets_to_transaction(list(offsets), group_metadata, 30.0)
        except KafkaException as exc:
            _raise_txn("send_offsets_to_transaction", exc)

    def commit(self, timeout_s: float = 30.0) -> None:
        try:
            self._producer.commit_transaction(timeout_s)
        except KafkaException as exc:
            _raise_txn("commit_transaction", exc)

    def abort(self, timeout_s: float = 30.0) -> None:
        try:
            self._producer.abort_transaction(timeout_s)
        except KafkaException as exc:
            _raise_txn("abort_transaction", exc)

    @contextmanager
    def transaction(self) -> Iterator[TransactionalWriter]:
        """Begin; commit on success; abort (unless fenced) and re-raise on error."""
        self.begin()
        try:
            yield self
        except ProducerFenced:
            raise
        except BaseException:
            self.abort()
            raise
        try:
            self.commit()
        except KafkaOperationError as commit_error:
            # A writer fenced mid-commit may only hear a generic broker error
            # (seen: "EndTxn commit failed: UNKNOWN"). The abort that a failed
            # commit needs anyway tells: a fenced writer's abort is refused as
            # fenced. When the coordinator refuses both, this writer can no
            # longer end a transaction at all: it must stop like a fenced one.
            try:
                self.abort()
            except KafkaOperationError as abort_error:
                raise ProducerFenced(
                    f"{self.transactional_id}: commit refused ({commit_error}) and abort "
                    f"refused ({abort_error}); this writer no longer owns its transactions"
                ) from None
            raise
