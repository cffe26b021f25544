"""Reading the log: a group consumer with explicit commits, and ``read_log``.

``EventConsumer`` is a consumer-group member (the controller, the agents);
``read_log`` dumps or tails one topic with ``events.kafka.reader.LogReader``. Both
decode every record with the one step of ``events.kafka.clients``; one that cannot be
decoded goes to the quarantine and is reported with topic, partition and
offset, and reading goes on. Nothing crashes on bad bytes and nothing vanishes
silently. Nor do deleted records: a group member whose committed offset lies
below its partition's start when it is assigned (retention outran a stopped
controller) logs the gap as an error (``events.kafka.offsets.LogGap``) and reads on
from the start, as ``auto.offset.reset`` makes it: the inputs are gone, and
stopping would decide nothing for every other run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
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
from events.errors import ConsumerFenced, KafkaOperationError, NotAuthorized
from events.kafka.clients import Admit, Quarantine, decode_or_quarantine, poll_burst
from events.kafka.connection import client_config, refused
from events.kafka.offsets import LogGap
from events.kafka.reader import LogReader
from events.record import Quarantined, Record

log = logging.getLogger("runledger.events.consume")


class EventConsumer:
    """A consumer-group member that never commits on its own.

    ``read_committed`` so aborted controller transactions are never seen;
    offsets are committed only by ``commit`` (or sent to a transaction).

    ``assignment`` is what the group gave this member, and ``assignments``
    counts its changes (each assignment and each revocation), so a caller sees
    a revocation at once (a rebalance may hold the new assignment back for
    seconds, and partitions being revoked must no longer be decided for) and
    even a rebalance that revoked and gave back the same partitions within one
    ``poll``. With
    ``hold_assigned`` every newly assigned partition starts paused until the
    caller ``resume``s it (the controller catches up on its facts first). The
    committed offsets of an assignment seed ``positions``, so a transaction's
    offsets carry the group's generation even before anything is consumed.
    ``raw``: each record keeps its value bytes and headers (the controller
    carries a request's signature onto the fact that copies it).
    """

    def __init__(
        self, bootstrap: str, group_id: str, topics: Sequence[str], *,
        quarantine: Quarantine | None = None, codec: Codec | None = None,
        from_beginning: bool = True, config: dict[str, Any] | None = None,
        admit: Admit | None = None, hold_assigned: bool = False, raw: bool = False,
    ) -> None:
        self.codec = codec or default_codec()
        self.raw = raw
        self.group_id = group_id
        self.admit = admit
        self.quarantine = quarantine
        self.quarantined: list[Quarantined] = []
        self._consumer = Consumer(client_config(bootstrap, {
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest" if from_beginning else "latest",
            "isolation.level": "read_committed",
            **(config or {}),
        }))
        self.assigned = False
        self.hold_assigned = hold_assigned
        self.assignment: frozenset[tuple[str, int]] = frozenset()
        self.assignments = 0
        self._consumer.subscribe(list(topics), on_assign=self._on_assign,
                                 on_revoke=self._on_revoke)
        # Offsets to commit next: one past the last record handed out, per partition.
        self._positions: dict[tuple[str, int], int] = {}

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Until the group hands out partitions this member observes nothing, and
        # silence must not be mistaken for dead workers.
        self.assigned = True
        self.assignment = frozenset((tp.topic, tp.partition) for tp in partitions)
        self.assignments += 1
        consumer.assign(partitions)
        if self.hold_assigned and partitions:
            consumer.pause(partitions)
        self._seed(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.assignment = self.assignment - gone
        self.assignments += 1
        self._positions = {tp: o for tp, o in self._positions.items() if tp not in gone}
        consumer.unassign()

    def _seed(self, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        try:
            committed = self._consumer.committed(partitions, timeout=10)
        except KafkaException:
            return  # nothing to seed: the first consumed record sets the position
        for tp in committed:
            if tp.error is None and tp.offset >= 0:
                self._positions.setdefault((tp.topic, tp.partition), tp.offset)
                self._say_gap(tp)

    def _say_gap(self, committed: TopicPartition) -> None:
        """Log a committed offset below the partition's start: records deleted unread."""
        try:
            low, _ = self._consumer.get_watermark_offsets(committed, timeout=10, cached=False)
        except KafkaException:
            return  # the broker will not say now; the fetch resets all the same
        if committed.offset < low:
            gap = LogGap(committed.topic, committed.partition, committed.offset, low)
            log.error("%s; group %s reads on from offset %d", gap, self.group_id, low)

    def resume(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Start fetching partitions held since their assignment."""
        held = [TopicPartition(t, p) for t, p in partitions if (t, p) in self.assignment]
        if held:
            self._consumer.resume(held)

    def rewind(self) -> None:
        """Back to the committed offsets: after an aborted transaction, whose inputs
        must be read again. Raises ``KafkaOperationError`` if the broker cannot say."""
        todo = [TopicPartition(t, p) for t, p in sorted(self.assignment)]
        if not todo:
            return
        try:
            committed = self._consumer.committed(todo, timeout=10)
            read, self._positions = self._positions, {}
            for tp in committed:
                key = (tp.topic, tp.partition)
                if tp.offset >= 0:
                    self._positions[key] = tp.offset
                # Only where something was read past the commit: a held partition
                # has no fetch position to move yet.
                if key in read and read[key] != tp.offset:
                    offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        except KafkaException as exc:
            raise KafkaOperationError(f"rewind: {exc.args[0]}") from None

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Record]:
        """Decoded records; undecodable or refused ones (``admit``) are quarantined and skipped."""
        out: list[Record] = []
        for msg in poll_burst(self._consumer, max_records, timeout_s):
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
            resource = (self.group_id if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
                        else msg.topic() or "its topics")
            refusal = refused(err.code(), "read", resource)
            if refusal is not None:  # retrying cannot help: the principal lacks a grant
                raise NotAuthorized(refusal)
            if err.fatal():
                raise KafkaOperationError(f"consume: {err.str()}")
            return None  # transient: librdkafka retries on its own
        self._positions[(msg.topic() or "", msg.partition() or 0)] = (msg.offset() or 0) + 1
        item = decode_or_quarantine(self.codec, msg, self.quarantine, self.admit, self.raw)
        if isinstance(item, Quarantined):
            self.quarantined.append(item)
            return None
        return item

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
    on_quarantine: Callable[[Quarantined], None] | None = None, retry_s: float = 0.0,
    raw: bool = False,
) -> Iterator[Record]:
    """Every record of ``topic`` from the beginning, in offset order per partition.

    Without ``follow`` it reads up to the end offsets taken at the start and stops,
    however much keeps arriving (a dump); with it, it waits for new records (a
    tail). No group, nothing committed. An undecodable record goes to
    ``on_quarantine`` (by default it is logged). ``retry_s``: how long a broker
    that is down or failing over is waited for (``LogReader``); a tail waits for
    it for ever once it has started. ``raw``: keep each record's value bytes and
    headers (for a reader that judges signatures).
    """
    reader = LogReader(bootstrap, [topic], codec=codec, quarantine=quarantine,
                       on_quarantine=on_quarantine, strict=True, bounded=not follow,
                       retry_s=retry_s, raw=raw)
    try:
        yield from reader.records(follow=follow, timeout_s=idle_timeout_s)
    finally:
        reader.close()
