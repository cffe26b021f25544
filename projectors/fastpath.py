"""The projector's compiled route: a batch of log records to the tables' Arrow
columns, with no Python object per record, for every record whose rows need only
its fields; every other record takes the Python route (``events.codec`` and
``projectors.tables.rows_for``), record by record, as before.

A record takes the compiled route (``events.columnar``: decoded, resolved and its
payload written in compiled code) when all of these hold, and the Python route
otherwise, so that the rows written are the same either way:

1. ``events.columnar`` reads it (what it refuses, the codec refuses: the Python
   route quarantines it with the codec's own reason and detail);
2. it is on the runs or the reports topic (``FAST_TOPICS``);
3. its type's class has no rules of its own (no ``__post_init__`` in it or in a
   record it holds), its members are not written as blocks (``events.placement``),
   and no upcaster changes the meaning of the version that wrote it;
4. its type's rows on that topic are declared as picks of its fields
   (``projectors.fastrows.PICKS``), or it has none but its ``events`` row; on the
   reports topic, its schema holds no map either;
5. its header passes :class:`events.base.Header`'s rules, checked on the columns
   (``header_ok``);
6. an ``event_type`` header, where it has one, names the type its bytes are.

A report on the compiled route still passes the door (``events.kafka.reportdoor``)
record by record: the event is built from its columns (``from_record``, the step
of ``events.codec`` that gives the fields) and judged with its exact value bytes
and headers (``Split.judged``); a refused report's rows are left out
(``Split.tables``) and it is quarantined with the door's reason, as on the Python
route. What the compiled route saves on a report is the Python decode, ``rows_for``
and the payload.

Tested in tests/projectors/test_fastpath.py (the two routes held to the same rows,
rule-breaking records included) and tests/projectors/test_projector.py (a
projection through each, against a broker: the same table digests).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message

from events.base import Header
from events.codec import Codec
from events.columnar import NATIVE as NATIVE  # without it, the projector keeps to Python
from events.columnar import ColumnarDecoder
from events.convert import from_record
from events.kafka.clients import header_items
from events.model import EVENT_TYPES
from events.record import Record
from events.topics import REPORTS, RUNS
from projectors.fastrows import PICKS, Pos, concat, event_rows, picked_rows
from projectors.rows import EventRow, Row
from projectors.tables import mapped_types

FAST_TOPICS = (RUNS, REPORTS)
# Topics whose records a door judges one by one (``events.kafka.reportdoor``): a
# record of one on the compiled route is also built as an event for the door, and
# its rows are written only if the door believes it.
JUDGED = (REPORTS,)


def _ruled(tp: Any, seen: set[type]) -> bool:
    """Whether a record class (or one it holds) has rules of its own; the header's
    are checked on the columns."""
    for arg in typing.get_args(tp):
        if _ruled(arg, seen):
            return True
    if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)) or tp in seen or tp is Header:
        return False
    seen.add(tp)
    if any("__post_init__" in vars(k) for k in tp.__mro__):
        return True
    hints = typing.get_type_hints(tp)
    return any(_ruled(hints[f.name], seen) for f in dataclasses.fields(tp))


def fast_types(codec: Codec, topic: str) -> frozenset[str]:
    """The types whose records on ``topic`` may take the compiled route (rules 2-4)."""
    if topic not in FAST_TOPICS:
        return frozenset()
    mapped = mapped_types(topic)
    return frozenset(
        name for name, cls in EVENT_TYPES.items()
        if name not in codec.packed and not _ruled(cls, set())
        and (name not in mapped or (topic, name) in PICKS)
        and not (topic in JUDGED and _has_map(codec.registry.latest(name).schema)))


def _has_map(schema: Any) -> bool:
    """Whether a schema holds a map anywhere (a column of (key, value) pairs, which
    the event built for the door would need turned back into a dict)."""
    if isinstance(schema, list):
        return any(_has_map(s) for s in schema)
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "map":
        return True
    return any(_has_map(v) for k, v in schema.items() if k in ("type", "items", "fields"))


def header_ok(header: pa.StructArray) -> np.ndarray:
    """Per record, whether :class:`events.base.Header` accepts its header."""
    ok = pc.and_(pc.greater_equal(header.field("generation"), 0),
                 pc.greater_equal(header.field("occurred_at"), 0))
    for name in ("event_id", "run_id", "producer"):
        ok = pc.and_(ok, pc.greater(pc.utf8_length(header.field(name)), 0))
    out: np.ndarray = ok.to_numpy(zero_copy_only=False)
    return out


@dataclass(frozen=True, slots=True)
class Part:
    """One type's records on one topic that take the compiled route."""

    name: str
    topic: str
    batch: pa.RecordBatch  # their columns
    at: np.ndarray  # each one's index in the batch of messages
    pos: Pos
    versions: np.ndarray

    def without(self, refused: frozenset[int]) -> Part:
        keep = ~np.isin(self.at, list(refused))
        topic, parts, offsets = self.pos
        return Part(self.name, self.topic, self.batch.filter(pa.array(keep)), self.at[keep],
                    (topic, parts[keep], offsets[keep]), self.versions[keep])


@dataclass(frozen=True, slots=True)
class Split:
    """A batch, split: the compiled route's records, the reports among them the door
    must judge before their rows are written (with their index in ``messages``), and
    the messages left for the Python route (in log order)."""

    parts: list[Part]
    judged: list[tuple[int, Record]]
    slow: list[Message]
    ends: dict[tuple[str, int], int]  # each partition's next offset after the batch
    messages: Sequence[Message]  # the whole batch, for the Python route if need be

    @property
    def fast(self) -> int:
        return sum(len(p.at) for p in self.parts)

    def tables(self, refused: frozenset[int] = frozenset()) -> dict[type[Row], pa.Table]:
        """The compiled route's rows but those of the records ``refused`` (by index)."""
        out: dict[type[Row], list[pa.Table]] = {}
        for part in self.parts:
            if refused:
                part = part.without(refused)
            if not len(part.at):
                continue
            out.setdefault(EventRow, []).append(
                event_rows(part.name, part.batch, part.pos, part.versions))
            pick = PICKS.get((part.topic, part.name))
            if pick is not None:
                out.setdefault(pick.row, []).append(picked_rows(pick, part.batch, part.pos))
        return concat(out)


class FastPath:
    """Splits batches of messages between the two routes (rules 1-6 above)."""

    def __init__(self, codec: Codec, decoder: ColumnarDecoder | None = None) -> None:
        self.codec = codec
        self.decoder = decoder or ColumnarDecoder(codec.registry)
        self._fast = {t: fast_types(codec, t) for t in FAST_TOPICS}
        # Per type: the writer versions whose meaning an upcaster changes.
        self._upcast = {name: frozenset(
            sv.version for sv in codec.registry.versions(name)
            if codec.upcasters.touches(name, sv.version)) for name in EVENT_TYPES}

    def split(self, messages: Sequence[Message]) -> Split:
        n = len(messages)
        values: list[bytes | None] = [None] * n
        topics: list[str] = [""] * n
        parts = np.zeros(n, dtype=np.int32)
        offsets = np.zeros(n, dtype=np.int64)
        named: dict[int, str] = {}  # record index -> its event_type header
        ends: dict[tuple[str, int], int] = {}
        for i, msg in enumerate(messages):
            topic, p, ofs = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            values[i], topics[i], parts[i], offsets[i] = msg.value(), topic, p, ofs
            ends[(topic, p)] = ofs + 1
            headers: Any = msg.headers() or ()
            for key, data in headers:
                if key == "event_type":  # as events.kafka.clients.decode_message reads it
                    named[i] = (data if isinstance(data, str)
                                else data.decode(errors="replace") if data else "")
        cols = self.decoder.decode(values)
        kinds = cols.kinds.to_numpy(zero_copy_only=False)
        versions = cols.versions.to_numpy(zero_copy_only=False)
        topic_of = np.array(topics, dtype=object)
        fast = np.zeros(n, dtype=bool)
        taken: list[Part] = []
        judged: list[tuple[int, Record]] = []
        for k, name in enumerate(cols.types):
            batch = cols.batches.get(name)
            if batch is None:
                continue
            where = np.flatnonzero(kinds == k)  # record index of each of its rows
            take = header_ok(batch.column("header"))
            upcast = self._upcast[name]
            if upcast:
                take &= ~np.isin(versions[where], list(upcast))
            for i in named.keys() & set(where.tolist()):
                if named[i] != name:
                    take[np.searchsorted(where, i)] = False
            for topic in FAST_TOPICS:
                if name not in self._fast[topic]:
                    continue
                rows = take & (topic_of[where] == topic)
                if not rows.any():
                    continue
                at = where[rows]
                fast[at] = True
                part = Part(name, topic, batch.filter(pa.array(rows)), at,
                            (topic, parts[at], offsets[at]), versions[at])
                taken.append(part)
                if topic in JUDGED:
                    judged.extend(_for_the_door(part, messages))
        slow = [m for m, f in zip(messages, fast.tolist(), strict=True) if not f]
        return Split(taken, judged, slow, ends, messages)


def _for_the_door(part: Part, messages: Sequence[Message]) -> list[tuple[int, Record]]:
    """Each record of ``part`` as the door judges it: the event built from its columns
    (the fields ``events.codec`` would give it), its value bytes and headers."""
    cls = EVENT_TYPES[part.name]
    out = []
    for j, row in enumerate(part.batch.to_pylist()):
        i = int(part.at[j])
        msg = messages[i]
        version = int(part.versions[j])
        row["header"]["schema_version"] = version
        event = from_record(cls, row)
        out.append((i, Record(part.topic, int(part.pos[1][j]), int(part.pos[2][j]),
                              msg.timestamp()[1], event, version, value=msg.value() or b"",
                              headers=tuple(header_items(msg)))))
    return out
