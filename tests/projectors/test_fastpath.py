"""projectors.fastpath: the compiled route writes the rows the Python route writes.

Pure: real ``confluent_kafka.Message`` objects built in memory, no broker (the
projection through both routes against a broker is in test_projector.py). The
reference is what the projector did before the compiled route: every record
decoded by the codec, quarantined or mapped by ``rows_for``.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from events.base import Header
from events.codec import Codec, Upcasters, default_codec
from events.errors import InvalidEvent
from events.kafka.clients import decode_or_quarantine
from events.model import EVENT_TYPES, Event
from events.record import Quarantined
from events.registry import SchemaRegistry
from events.topics import REPORTS, RUNS
from projectors.fastpath import PICKS, FastPath, fast_types, header_ok
from projectors.rows import EventRow, HeartbeatRow, QuarantineRow
from projectors.tables import TABLE_OF, mapped_types, rows_for
from tests.events.sample_events import one_of_each
from tests.events.test_columnar import read_by_the_codec, written
from tests.events.test_compat import random_datum

pytest.importorskip("runledger_native", reason="the compiled route needs native/ built")

CODEC = default_codec()
REGISTRY = SchemaRegistry.from_directory()
FAST = FastPath(CODEC)


class Log:
    """Messages as a broker hands them out: offsets counted per topic."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._next: dict[str, int] = defaultdict(int)

    def add(self, topic: str, value: bytes | None, event_type: str | None) -> None:
        offset = self._next[topic]
        self._next[topic] += 1
        headers = [("event_type", event_type.encode())] if event_type else []
        self.messages.append(Message(topic=topic, partition=0, offset=offset, value=value,
                                     headers=headers, key=b"k"))

    def event(self, topic: str, event: Event) -> None:
        self.add(topic, CODEC.encode(event), event.event_type)


def stored(rows_by_table: dict[str, list[Any]]) -> dict[str, list[str]]:
    return {name: sorted(repr(r) for r in rows) for name, rows in rows_by_table.items() if rows}


def by_python(messages: list[Message]) -> dict[str, list[str]]:
    """The tables' rows as the Python route stores them, per table."""
    rows: dict[Any, list[Any]] = defaultdict(list)
    for msg in messages:
        item = decode_or_quarantine(CODEC, msg, raw=True)
        if isinstance(item, Quarantined):
            rows[QuarantineRow].append(QuarantineRow(
                item.topic, item.partition, item.offset, key=item.key or None,
                reason=item.reason, detail=item.detail, raw=item.value))
        else:
            for row in rows_for(item):
                rows[type(row)].append(tuple(row))
    return stored({TABLE_OF[t].name: [tuple(r.values()) for r in
                                        TABLE_OF[t].batch(rs).to_pylist()]
                   for t, rs in rows.items()})


def by_both(fast: FastPath, messages: list[Message]) -> tuple[dict[str, list[str]], int]:
    split = fast.split(messages)
    out: dict[str, list[Any]] = defaultdict(list)
    for name, rows in by_python(split.slow).items():
        out[name].extend(rows)
    for row, table in split.tables().items():
        out[TABLE_OF[row].name].extend(repr(tuple(r.values())) for r in table.to_pylist())
    return {name: sorted(rows) for name, rows in out.items()}, split.fast


def broken(event: Event, **header: Any) -> bytes:
    """``event``'s bytes with header fields its class would refuse."""
    sv = REGISTRY.latest(event.event_type)
    record = read_by_the_codec(CODEC.encode(event))
    record["header"].update(header)
    return written(sv, record)


def mixed_log() -> Log:
    log = Log()
    samples = one_of_each("run-1")
    for event in samples:
        log.event(getattr(event, "TOPIC", RUNS), event)
        log.event(RUNS, replace(event, header=replace(event.header, event_id="copy")))
    step = next(e for e in samples if e.event_type == "StepCommitted")
    for field, bad in (("run_id", ""), ("event_id", ""), ("producer", ""),
                       ("generation", -1), ("occurred_at", -5)):
        log.add(RUNS, broken(step, **{field: bad}), "StepCommitted")
    log.add(RUNS, CODEC.encode(step), "ShardWritten")  # its header names another type
    log.add(RUNS, None, None)
    log.add(RUNS, b"\xc3\x01garbage", "StepCommitted")
    log.add(RUNS, CODEC.encode(step)[:-2], "StepCommitted")
    for sv in REGISTRY.versions("StepCommitted"):  # every version that wrote it
        rng = random.Random(sv.version)
        for _ in range(20):
            log.add(RUNS, written(sv, random_datum(sv.schema, rng)), "StepCommitted")
    return log


def test_both_routes_store_the_rows_the_python_route_stores() -> None:
    log = mixed_log()
    got, fast = by_both(FAST, log.messages)
    assert got == by_python(log.messages)
    assert fast > len(log.messages) // 4  # the compiled route did take a share


def test_a_report_the_door_refuses_leaves_no_row_and_the_door_sees_the_codecs_event() -> None:
    log = Log()
    samples = {e.event_type: e for e in one_of_each("run-1")}
    one, many = samples["HeartbeatRecorded"], samples["MembersHeartbeatRecorded"]
    for event in (one, many, one, many):
        log.event(REPORTS, event)
    split = FAST.split(log.messages)
    assert split.slow == [] and sorted(i for i, _ in split.judged) == [0, 1, 2, 3]
    for i, record in split.judged:  # the door judges what the Python route would give it
        reference = decode_or_quarantine(CODEC, log.messages[i], raw=True)
        assert record == reference and record.value == reference.value
        assert record.headers == reference.headers
    every = split.tables()
    some = split.tables(frozenset({0, 1}))
    events, heartbeats = TABLE_OF[EventRow].name, TABLE_OF[HeartbeatRow].name
    assert {t.name: len(v) for t, v in ((TABLE_OF[r], v) for r, v in every.items())} == {
        events: 4, heartbeats: 2 * (1 + len(many.beats))}
    assert sorted(some[EventRow].column("ofs").to_pylist()) == [2, 3]
    assert len(some[HeartbeatRow]) == 1 + len(many.beats)


def test_every_fast_type_is_refused_by_its_class_only_for_its_header() -> None:
    """The route's premise: a record of a type it takes is valid exactly when its
    header is (no rule of its class is left unchecked), on random records of every
    schema file of every such type."""
    for name in fast_types(CODEC, RUNS):
        for sv in REGISTRY.versions(name):
            rng = random.Random(sv.path)
            values = [written(sv, random_datum(sv.schema, rng)) for _ in range(40)]
            cols = FAST.decoder.decode(values)
            ok = header_ok(cols.batches[name].column("header")).tolist()
            for value, header_passes in zip(values, ok, strict=True):
                try:
                    CODEC.decode(value)
                    valid = True
                except Exception:
                    valid = False
                assert valid == header_passes, sv.path


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=3), st.text(max_size=3), st.text(max_size=3),
       st.integers(min_value=-(2**63), max_value=2**63 - 1),
       st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_the_header_check_on_columns_is_the_header_classs(
        event_id: str, run_id: str, producer: str, generation: int, at: int) -> None:
    step = next(e for e in one_of_each("r") if e.event_type == "StepCommitted")
    try:
        Header(event_id, run_id, generation, at, producer)
        valid = True
    except InvalidEvent:
        valid = False
    try:
        value = broken(step, event_id=event_id, run_id=run_id, producer=producer,
                       generation=generation, occurred_at=at)
    except ValueError:  # a lone surrogate UTF-8 cannot carry: no record holds one
        return
    cols = FAST.decoder.decode([value])
    assert header_ok(cols.batches["StepCommitted"].column("header")).tolist() == [valid]


def test_the_types_taken_are_those_without_rules_blocks_or_unpicked_rows() -> None:
    fast = fast_types(CODEC, RUNS)
    assert {"StepCommitted", "ShardWritten", "ManifestCommitted"} <= fast
    assert "StepTimesRecorded" not in fast  # a rule of its own
    assert "GenerationStarted" not in fast  # members written as blocks
    assert "CursorAdvanced" not in fast  # rows_for maps it, PICKS does not
    reports = fast_types(CODEC, REPORTS)
    assert {"HeartbeatRecorded", "MembersHeartbeatRecorded", "StepCommitted"} <= reports
    assert "StepTimesRecorded" not in reports and "CheckpointRestored" not in reports
    assert "CursorAdvanced" not in reports  # a map: no event is built from its columns
    assert all((REPORTS, n) in PICKS for n in reports & mapped_types(REPORTS))
    assert all((RUNS, n) in PICKS for n in fast & mapped_types(RUNS))
    assert fast <= set(EVENT_TYPES)


def test_a_version_an_upcaster_changes_takes_the_python_route() -> None:
    upcasters = Upcasters()
    oldest = REGISTRY.versions("StepCommitted")[0].version
    upcasters.register("StepCommitted", oldest, lambda record: {**record, "tokens": 7})
    codec = Codec(REGISTRY, upcasters)
    sv = REGISTRY.versions("StepCommitted")[0]
    rng = random.Random(3)
    log = Log()
    for _ in range(10):
        log.add(RUNS, written(sv, random_datum(sv.schema, rng)), "StepCommitted")
    split = FastPath(codec).split(log.messages)
    assert split.fast == 0 and len(split.slow) == 10


def test_without_the_compiled_module_the_projector_keeps_to_the_python_route(
        tmp_path: Path) -> None:
    """An install without native/ (the container image) imports everything and
    projects every record through the codec."""
    code = ("import sys; sys.modules['runledger_native'] = None\n"
            "from projectors import fastpath, projector\n"
            "assert fastpath.NATIVE is False and projector.NATIVE is False\n"
            "p = projector.Projector(sys.argv[1], '127.0.0.1:1')\n"
            "assert p.fastpath is None\n"
            "print('python route')\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.duckdb")],
                          capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "python route"
