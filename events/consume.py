"""Reading the log: a group consumer with explicit commits, and a group-less reader.

Both decode every record; one that cannot be decoded goes to the quarantine
and is reported with topic, partition and offset, and reading goes on. Nothing
crashes on bad bytes and nothing vanishes silently.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from events.codec import Codec, default_codec
from events.errors import BrokerUnavailable, ConsumerFenced, DecodeError, KafkaOperationError
from events.kafka import Quarantine, Quarantined, Record, decode_message, quarantined


class EventConsumer:
    """A consumer-group member that never commits on its own.

    ``read_committed`` so aborted controller transactions are never seen;
    offsets are committed only by ``commit`` (or sent to a transaction).
    """

    def __init__(
        self, bootstrap: str, group_id: str, topics: Sequence[str], *,
        quarantine: Quarantine | None = None, codec: Codec | None = None,
        from_beginning: bool = True, config: dict[str, Any] | None = None,
    ) -> None:
        self.codec = codec or default_codec()
        self.quarantine = quarantine
        self.quarantined: list[Quarantined] = []
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest" if from_beginning else "latest",
            "isolation.level": "read_committed",
            **(config or {}),
        })
        self.assigned = False
        self._consumer.subscribe(list(topics), on_assign=self._on_assign)
        # Offsets to commit next: one past the last record handed out, per partition.
        self._positions: dict[tuple[str, int], int] = {}

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Until the group hands out partitions this member observes nothing, and
        # silence must not be mistaken for dead workers.
        self.assigned = True

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Record]:
        """Decoded records; undecodable ones are quarantined and skipped."""
        # Wait for one record, then take only what is already there: a batch
        # consume would wait out the whole timeout whenever traffic is light.
        first = self._consumer.poll(timeout_s)
        if first is None:
            return []
        messages = [first]
        if max_records > 1:
            messages += self._consumer.consume(max_records - 1, 0)
        out: list[Record] = []
        for msg in messages:
            record = self._handle(msg)
            if record is not None:
                out.append(record)
        return out

    def _handle(self, msg: Message) -> Record | None:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return None
            # librdkafka reports a static member's fencing as FENCED_INSTANCE_ID,
            # or wrapped as a fatal error whose text says so.
            fenced = (KafkaError.FENCED_INSTANCE_ID, KafkaError._FENCED)
            if err.code() in fenced or "fenced" in err.str().lower():
                raise ConsumerFenced(f"consume: {err.str()}")
            if err.fatal():
                raise KafkaOperationError(f"consume: {err.str()}")
            return None  # transient: librdkafka retries on its own
        self._positions[(msg.topic() or "", msg.partition() or 0)] = (msg.offset() or 0) + 1
        try:
            return decode_message(self.codec, msg)
        except DecodeError as exc:
            q = self.quarantine.keep(msg, exc) if self.quarantine else quarantined(msg, exc)
            self.quarantined.append(q)
            return None

    def positions(self) -> list[TopicPartition]:
        """Offsets to commit for everything handed out (quarantined records included)."""
        return [TopicPartition(t, p, o) for (t, p), o in sorted(self._positions.items())]

    def commit(self, offsets: Sequence[TopicPartition] | None = None) -> None:
        todo = list(offsets) if offsets is not None else self.positions()
        if not todo:
            return
        try:
            self._consumer.commit(offsets=todo, asynchronous=False)
        except KafkaException as exc:
            raise KafkaOperationError(f"commit: {exc.args[0].str()}") from None

    def group_metadata(self) -> Any:
        return self._consumer.consumer_group_metadata()

    def close(self) -> None:
        self._consumer.close()


def read_log(
    bootstrap: str, topic: str, *, follow: bool = False, quarantine: Quarantine | None = None,
    codec: Codec | None = None, idle_timeout_s: float = 1.0,
    on_quarantine: Any = None,
) -> Iterator[Record]:
    """Every record of ``topic`` from the beginning, in offset order per partition.

    Without ``follow`` it stops at the end offsets seen at the start (a dump);
    with it, it waits for new records (a tail). No group, nothing committed.
    """
    codec = codec or default_codec()
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "runledger-reader",  # required by librdkafka; never committed
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
    })
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=10)
        except KafkaException as exc:
            raise BrokerUnavailable(f"no Kafka broker answered: {exc.args[0].str()}") from None
        tmeta = metadata.topics.get(topic)
        if tmeta is None or tmeta.error is not None:
            raise KafkaOperationError(f"topic {topic!r} does not exist")
        partitions = sorted(tmeta.partitions)
        ends: dict[int, int] = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
        if not follow and not ends:
            return
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        while follow or ends:
            msg = consumer.poll(idle_timeout_s)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    ends.pop(msg.partition() or 0, None)
                    continue
                raise KafkaOperationError(f"read {topic}: {err.str()}")
            part, offset = msg.partition() or 0, msg.offset() or 0
            if not follow and part in ends and offset + 1 >= ends[part]:
                ends.pop(part)
            try:
                yield decode_message(codec, msg)
            except DecodeError as exc:
                q = quarantine.keep(msg, exc) if quarantine else quarantined(msg, exc)
                if on_quarantine is not None:
                    on_quarantine(q)
    finally:
        consumer.close()
