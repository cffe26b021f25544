"""Reading the log without a consumer group: one reader for every such caller.

``LogReader`` assigns itself every partition of one or more topics, from the
beginning, from the end, or from stored offsets, and owns what each caller
used to redo: positions (the next offset per partition), the end of the log
(caught up with the ends seen when reading started, past transaction markers),
``read_committed`` isolation, decoding and quarantine. A ``bounded`` reader
hands out only what was there when it started (a dump, a replay: they end however
much keeps arriving), and, given ``retry_s``, waits out a broker that is down or
failing over for that long before it gives up with ``BrokerUnavailable``. An undecodable record
is handed over as a ``Quarantined`` (where it was, why, and its raw bytes) or,
to a caller that has nothing better to do with it, reported and logged: it
never crashes the reader and never vanishes silently. Nothing is committed.
A stored offset below the log's start, or a position that deletion overtakes,
raises ``events.kafka.offsets.LogGap`` naming the records lost, never a silent jump.

Undecoded, ``read_messages`` hands out the records as Kafka holds them (value
bytes, key, headers, offsets), after the same bookkeeping: the audit's raw log
(``runledger.rawlog``) and the newest status per run (``events.kafka.statuslog``)
read through it. ``partitions`` narrows a reader to chosen partitions.

``Watermarks`` answers the low and high watermarks of every partition (the
projector metrics' lag), ``topic_partitions`` the partitions of some topics.
The consumer-group member is ``events.kafka.consume``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from events.codec import Codec, default_codec
from events.errors import BrokerUnavailable, KafkaOperationError, NotAuthorized
from events.kafka.clients import Quarantine, decode_or_quarantine, poll_burst
from events.kafka.connection import client_config, refused
from events.kafka.offsets import BEGINNING as BEGINNING
from events.kafka.offsets import END as END
from events.kafka.offsets import LogGap, Partition, Start, first_offset, gap_at_start
from events.partition import key_partitions
from events.record import Quarantined, Record

log = logging.getLogger("runledger.events.reader")

OnQuarantine = Callable[[Quarantined], None]

# Read-only, never committed, and never past an open or aborted transaction.
_SETTINGS: dict[str, Any] = {
    # librdkafka's own log lines would reach a command's stderr beside its one
    # line (a group coordinator's login dropped at close, on a secure cluster);
    # every error this reader must report it reports itself.
    "log_level": 0,
    "enable.auto.commit": False,
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
    # A position below the log's start is a gap to name, never a jump (events.kafka.offsets).
    "auto.offset.reset": "error",
}


# Errors no retry mends: the topic is not there, or we may not read it.
_NO_SUCH_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                            KafkaError._UNKNOWN_PARTITION})
_PERMANENT = _NO_SUCH_TOPIC | {
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL}
RETRY_PAUSE_S = 0.5  # between two tries to list a topic's partitions and their ends


def log_quarantined(q: Quarantined) -> None:
    """What a caller with nothing better to do does with an undecodable record."""
    log.warning("%s", q)


def _consumer(bootstrap: str, name: str, config: Mapping[str, Any] | None,
              credentials: str | None = None) -> Consumer:
    # librdkafka wants a group id even for a consumer that never joins or commits.
    return Consumer(client_config(bootstrap, {"group.id": name, "client.id": name,
                                              **_SETTINGS, **(config or {})}, credentials))


def _partitions(consumer: Consumer, topics: Iterable[str], timeout_s: float) -> list[Partition]:
    out: list[Partition] = []
    for topic in topics:
        try:
            metadata = consumer.list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            raise BrokerUnavailable(f"no Kafka broker answered: {exc.args[0].str()}") from None
        meta = metadata.topics.get(topic)
        if meta is None or (meta.error is not None and meta.error.code() in _NO_SUCH_TOPIC):
            raise KafkaOperationError(f"topic {topic!r} does not exist")
        refusal = None if meta.error is None else refused(meta.error.code(), "read", topic)
        if refusal is not None:  # retrying cannot help: the principal lacks a grant
            raise NotAuthorized(refusal)
        if meta.error is not None:  # e.g. no leader while one is elected: it passes
            raise BrokerUnavailable(f"topic {topic!r}: {meta.error.str()}")
        out += [(topic, p) for p in sorted(meta.partitions)]
    return out


def _watermarks(consumer: Consumer, partitions: Iterable[Partition],
                timeout_s: float) -> dict[Partition, tuple[int, int]]:
    # read_committed: the high watermark is the last stable offset, so an open
    # transaction's records are not counted before they can be read.
    out: dict[Partition, tuple[int, int]] = {}
    for topic, part in partitions:
        try:
            marks = consumer.get_watermark_offsets(TopicPartition(topic, part),
                                                   timeout=timeout_s, cached=False)
        except KafkaException as exc:  # a timeout, a leader moving: it passes
            raise BrokerUnavailable(f"watermarks of {topic}[{part}]: "
                                    f"{exc.args[0].str()}") from None
        if marks is None:
            raise BrokerUnavailable(f"watermarks of {topic}[{part}]: no answer")
        out[(topic, part)] = (int(marks[0]), int(marks[1]))
    return out


class LogReader:
    """Every partition of ``topics``, read in offset order per partition; no group.

    ``start``: ``BEGINNING``, ``END`` or stored next offsets. ``key``: only the
    records with this key (or none) are decoded and handed out; the others are
    passed over undecoded (every topic is keyed by run id). ``select``: the same
    with a predicate on the raw message, its key or headers (the controller's node
    records: ``node/``; ``runledger nodes``: by ``event_type``). ``quarantine``: a
    byte-exact copy of each undecodable record goes there (it also reports it).
    ``on_quarantine``: what ``read_records`` does with an undecodable record;
    by default it is logged, unless ``quarantine`` has reported it already.
    ``strict``: every consumer error raises ``KafkaOperationError`` (a dump must
    not hang on a broken broker); otherwise only fatal ones do, and librdkafka
    retries the rest. ``bounded``: only records below the ends taken at the start
    are handed out, and a partition that reached its end is paused, so a dump or a
    replay ends however much keeps arriving. ``retry_s``: how long a broker that is
    down or failing over is waited for, first to list the partitions and their
    ends, then (strict) while transient consumer errors come, and (bounded) while
    records are due and none comes; after that ``BrokerUnavailable`` is raised.
    ``name`` shows in the broker's client ids. ``raw``: each record keeps its value
    bytes and headers (``Record.value``, ``Record.headers``: signatures).
    ``key_partition``: with ``key``, read only the partition of each topic that
    ``key`` hashes to (``events.partition``), where every producer of ours puts
    it: one run's or node's facts without reading the whole log. ``partitions``:
    only the partitions with these numbers. ``patience_s`` (default ``retry_s``):
    how long a bounded read waits while records are due and none comes, also
    where ``retry_s`` is 0 and nothing else is waited for. ``credentials``: the
    credentials file (``""``: none; None: ``$RUNLEDGER_CREDENTIALS``).
    """

    def __init__(
        self, bootstrap: str, topics: Sequence[str], *, start: Start = BEGINNING,
        codec: Codec | None = None, quarantine: Quarantine | None = None,
        on_quarantine: OnQuarantine | None = None, key: str | None = None,
        strict: bool = False, bounded: bool = False, retry_s: float = 0.0,
        name: str = "runledger-reader", timeout_s: float = 10.0,
        config: Mapping[str, Any] | None = None,
        select: Callable[[Message], bool] | None = None,
        raw: bool = False, key_partition: bool = False,
        partitions: Iterable[int] | None = None, patience_s: float | None = None,
        credentials: str | None = None,
    ) -> None:
        self.codec = codec or default_codec()
        self.raw = raw
        self.quarantine = quarantine
        self.on_quarantine = on_quarantine or (
            log_quarantined if quarantine is None else lambda _q: None)
        self.strict, self.bounded, self.retry_s = strict, bounded, retry_s
        self.patience_s = retry_s if patience_s is None else patience_s
        self.bootstrap = bootstrap
        self._key = key.encode() if key is not None else None
        self._select = select
        self._only = key if key_partition else None
        self._numbers = None if partitions is None else frozenset(partitions)
        self._consumer = _consumer(bootstrap, name, config, credentials)
        try:
            self.partitions, marks = self._layout(topics, timeout_s)
            gap = gap_at_start(start, marks)
            if gap is not None:
                raise gap
            first = {tp: first_offset(start, tp, low, high) for tp, (low, high) in marks.items()}
            self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in first.items()])
        except BaseException:
            self._consumer.close()
            raise
        # The ends seen when reading started: a partition still short of its end
        # is pending until a record reaches it or the consumer reports its end.
        self._ends = {tp: high for tp, (_, high) in marks.items()}
        self._pending = {tp for tp, offset in first.items()
                         if self._ends[tp] > max(marks[tp][0], offset)}
        self._positions: dict[Partition, int] = {}
        self._reached: dict[Partition, int] = {}
        self.last_read_s = 0.0
        # Time spent waiting since a message (a record or an end of partition) last
        # came, and the last transient error since: what patience (retry_s) counts.
        self._waited_s = 0.0
        self._trouble: str | None = None
        if bounded:
            self._pause([tp for tp in self.partitions if tp not in self._pending])

    def _layout(self, topics: Sequence[str], timeout_s: float,
                ) -> tuple[list[Partition], dict[Partition, tuple[int, int]]]:
        """The partitions and their watermarks, tried again for ``retry_s`` while the
        broker does not answer (a failover, a restart)."""
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                parts = _partitions(self._consumer, topics, timeout_s)
                if self._only is not None:
                    parts = key_partitions(parts, self._only)
                if self._numbers is not None:
                    parts = [tp for tp in parts if tp[1] in self._numbers]
                return parts, _watermarks(self._consumer, parts, timeout_s)
            except BrokerUnavailable as exc:
                if time.monotonic() + RETRY_PAUSE_S >= deadline:
                    raise self._gave_up(str(exc), self.retry_s) from None
                log.debug("reader %s: %s (tried again)", self.bootstrap, exc)
                time.sleep(RETRY_PAUSE_S)

    def _gave_up(self, why: str, waited_s: float) -> BrokerUnavailable:
        waited = f" for {waited_s:g} s" if waited_s > 0 else ""
        return BrokerUnavailable(f"no Kafka broker answered at {self.bootstrap}{waited}: {why}")

    # -- reading --------------------------------------------------------------------

    def read(self, max_records: int = 500, timeout_s: float = 1.0) -> list[Record | Quarantined]:
        """As soon as one record is there (or ``timeout_s`` passed): what has arrived,
        decoded or quarantined, in offset order per partition. For tails."""
        return self._take(self._fetch(poll_burst, max_records, timeout_s))

    def read_batch(self, max_records: int = 5000,
                   timeout_s: float = 0.5) -> list[Record | Quarantined]:
        """Up to ``max_records``, waiting up to ``timeout_s`` to fill the batch. For
        throughput: a batch per transaction downstream."""
        return self._take(self._fetch(_consume, max_records, timeout_s))

    def read_messages(self, max_records: int = 5000, timeout_s: float = 0.5) -> list[Message]:
        """``read_batch`` undecoded: the records as Kafka holds them (``value()`` is None
        for a tombstone), with the same bookkeeping, bounds and key and select filters."""
        return self._wanted(self._fetch(_consume, max_records, timeout_s))

    def _fetch(self, how: Callable[[Consumer, int, float], list[Message]], max_records: int,
               timeout_s: float) -> list[Message]:
        started = time.monotonic()
        try:
            messages = how(self._consumer, max_records, timeout_s)
        except KafkaException as exc:  # fatal, or the consumer is unusable
            raise KafkaOperationError(f"read: {exc.args[0].str()}") from None
        self._check_patience(messages, time.monotonic() - started)
        return messages

    def _check_patience(self, messages: list[Message], waited_s: float) -> None:
        if any(_heard(m.error()) for m in messages):
            self._waited_s, self._trouble = 0.0, None
            return
        # Only time spent waiting for the broker counts, not a slow caller's.
        self._waited_s += waited_s
        due = self.bounded and self._pending
        if self.patience_s > 0 and due and self._waited_s >= self.patience_s:
            # Records are due and nothing came: the broker is gone or stuck.
            raise self._gave_up(self._trouble or f"{len(self._pending)} partition(s) "
                                "short of their end and nothing came", self.patience_s)

    def read_records(self, max_records: int = 500, timeout_s: float = 1.0, *,
                     batch: bool = False) -> list[Record]:
        """Decoded records only (``read``, or ``read_batch`` when ``batch``); each
        undecodable one goes to ``on_quarantine``."""
        items = (self.read_batch if batch else self.read)(max_records, timeout_s)
        out: list[Record] = []
        for item in items:
            if isinstance(item, Record):
                out.append(item)
            else:
                self.on_quarantine(item)
        return out

    def records(self, *, follow: bool = False, timeout_s: float = 1.0) -> Iterator[Record]:
        """Decoded records until caught up (a dump), or for ever with ``follow`` (a tail)."""
        while follow or not self.caught_up:
            yield from self.read_records(500, timeout_s)

    def _take(self, messages: list[Message]) -> list[Record | Quarantined]:
        started = time.perf_counter()
        codec, quarantine, raw = self.codec, self.quarantine, self.raw
        out = [decode_or_quarantine(codec, msg, quarantine, raw=raw)
               for msg in self._wanted(messages)]
        self.last_read_s = time.perf_counter() - started
        return out

    def _wanted(self, messages: list[Message]) -> list[Message]:
        """The records to hand out, positions and ends kept up to date on the way."""
        out: list[Message] = []
        positions, ends, bounded = self._positions, self._ends, self.bounded
        pending, wanted, pick = self._pending, self._key, self._select
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._event(msg, err)
                continue
            tp = (msg.topic() or "", msg.partition() or 0)
            offset = (msg.offset() or 0) + 1
            end = ends[tp]  # one look-up per record: this loop is every reader's
            if bounded and offset > end:
                self._reach(tp)  # past the end taken at the start: not this reader's
                continue
            positions[tp] = offset
            if offset >= end and tp in pending:
                self._reach(tp)
            if wanted is not None:
                key = msg.key()
                if key is not None and key != wanted:
                    continue
            if pick is not None and not pick(msg):
                continue
            out.append(msg)
        return out

    def _event(self, msg: Message, err: KafkaError) -> None:
        tp = (msg.topic() or "", msg.partition() or 0)
        if err.code() == KafkaError._PARTITION_EOF:
            # Past the transaction markers too, which no record's offset covers.
            self._reach(tp)
            self._reached = {**self._reached, tp: msg.offset() or 0}
            return
        if err.code() == KafkaError._AUTO_OFFSET_RESET:  # deletion overtook this reader
            raise self._gap(tp, msg.offset())
        if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            # This reader never joins or commits: librdkafka looks up the group's
            # coordinator anyway, which a principal without a group grant is refused.
            return
        refusal = refused(err.code(), "read", tp[0])
        if refusal is not None:  # retrying cannot help: the principal lacks a grant
            raise NotAuthorized(refusal)
        transient = not err.fatal() and err.code() not in _PERMANENT
        if err.fatal() or (self.strict and not (transient and self.retry_s > 0)):
            raise KafkaOperationError(f"read {tp[0]}: {err.str()}")
        # librdkafka retries it; a patient reader gives up in _check_patience.
        self._trouble = err.str()
        log.debug("read %s: %s (librdkafka retries)", tp[0], err.str())

    def _gap(self, tp: Partition, offset: int | None) -> LogGap:
        at = self._positions.get(tp, offset if offset is not None and offset >= 0 else 0)
        return LogGap(tp[0], tp[1], at, *_watermarks(self._consumer, [tp], 10.0)[tp])

    def _reach(self, tp: Partition) -> None:
        """``tp`` has reached the end it had at the start; a bounded reader stops
        fetching it."""
        if tp in self._pending:
            self._pending.discard(tp)
            if self.bounded:
                self._pause([tp])

    def _pause(self, partitions: Iterable[Partition]) -> None:
        tps = [TopicPartition(t, p) for t, p in partitions]
        if tps:
            self._consumer.pause(tps)

    # -- where reading stands ---------------------------------------------------------

    @property
    def caught_up(self) -> bool:
        """Every partition has reached the end it had when reading started."""
        return not self._pending

    @property
    def ends(self) -> dict[Partition, int]:
        """The end (high watermark) of each partition when reading started."""
        return dict(self._ends)

    @property
    def positions(self) -> dict[Partition, int]:
        """One past the last record handed out (or passed over), per partition read."""
        return dict(self._positions)

    @property
    def reached(self) -> dict[Partition, int]:
        """The offset each partition's last end-of-partition report named.

        Past the transaction markers, which a stored next offset never covers.
        A new dict whenever it changes, never mutated: another thread may read it.
        """
        return self._reached

    def watermarks(self, timeout_s: float = 10.0) -> dict[Partition, tuple[int, int]]:
        """(low, high) of every partition read, asked of the broker now."""
        return _watermarks(self._consumer, self.partitions, timeout_s)

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _consume(consumer: Consumer, max_records: int, timeout_s: float) -> list[Message]:
    return consumer.consume(max_records, timeout_s)


def _heard(err: KafkaError | None) -> bool:
    """A record, or the end of a partition: the broker is there."""
    return err is None or err.code() == KafkaError._PARTITION_EOF


def topic_partitions(bootstrap: str, topics: Sequence[str], *, name: str = "runledger-reader",
                     config: Mapping[str, Any] | None = None, credentials: str | None = None,
                     timeout_s: float = 10.0) -> list[Partition]:
    """Every partition of ``topics``, asked once: ``KafkaOperationError`` when a topic
    does not exist, ``NotAuthorized``, or ``BrokerUnavailable`` (never retried)."""
    consumer = _consumer(bootstrap, name, config, credentials)
    try:
        return _partitions(consumer, topics, timeout_s)
    finally:
        consumer.close()


class Watermarks:
    """(low, high) watermarks of every partition of ``topics``, asked on demand.

    One consumer for the lifetime of the object (it never reads); the topics'
    partitions are listed again on every call, so added partitions show.
    Raises ``BrokerUnavailable`` or ``KafkaOperationError`` when the broker
    does not answer.
    """

    def __init__(self, bootstrap: str, topics: Sequence[str], *,
                 name: str = "runledger-watermarks",
                 config: Mapping[str, Any] | None = None) -> None:
        self.topics = tuple(topics)
        self._consumer = _consumer(bootstrap, name, config)

    def get(self, timeout_s: float = 10.0) -> dict[Partition, tuple[int, int]]:
        parts = _partitions(self._consumer, self.topics, timeout_s)
        return _watermarks(self._consumer, parts, timeout_s)

    def close(self) -> None:
        self._consumer.close()
