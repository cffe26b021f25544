"""events/placement.py: members on the wire as blocks, round-tripping any member list exactly,
with what a block may claim bounded before anything is built from it."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.spec.bounds import MAX_SLOTS_PER_NODE, MAX_WORLD_SIZE
from events.codec import default_codec
from events.convert import to_record
from events.errors import DecodeError, InvalidEvent
from events.model import Member, RunAdmitted
from events.placement import (
    BLOCK_MAX,
    FIELD,
    MEMBERS_MAX,
    deflate,
    inflate,
    pack,
    unpack,
    wire_bytes,
)
from events.registry import load_schema_text
from events.status import NO_NOTES, summarize
from events.status import decode as decode_summary
from events.status import encode as encode_summary
from tests.controller.test_checkpoints import state
from tests.events.builders import Ev

CODEC = default_codec()
SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
_IDS = st.sampled_from(["r", "r0", "r1", "r2", "r9", "r10", "r11", "x07", "g1-r3", "g1-r4", "a"])
MEMBERS = st.lists(st.builds(Member, _IDS, st.sampled_from(["n1", "n2"]),
                             st.integers(0, 4), st.sampled_from([None, "d1", "d2"])),
                   max_size=30).map(tuple)


def fields(members: tuple[Member, ...]) -> list[tuple[str, str, int, str | None]]:
    return [(m.logical_id, m.node, m.slot, m.domain) for m in members]


def test_an_admitted_group_is_one_block_per_node() -> None:
    ms = tuple(Member(f"r{i}", f"node-{i // 8}", i % 8, "rack-0") for i in range(24))
    blocks = pack(fields(ms))
    assert blocks == [{"first_id": f"r{8 * k}", "count": 8, "node": f"node-{k}",
                       "first_slot": 0, "domain": "rack-0"} for k in range(3)]
    assert unpack(blocks) == [to_record(m) for m in ms]


@settings(max_examples=300, deadline=None)
@given(MEMBERS)
def test_any_member_list_round_trips_exactly_in_its_order(ms: tuple[Member, ...]) -> None:
    blocks = pack(fields(ms))
    assert unpack(blocks) == [to_record(m) for m in ms]
    assert sum(b["count"] for b in blocks) == len(ms)
    # Each block is the longest run the rule allows: the next member could not join it.
    for a, b in itertools.pairwise(blocks):
        joined = pack(fields(tuple(Member(**m) for m in unpack([a, {**b, "count": 1}]))))
        assert len(joined) == 2


@settings(max_examples=100, deadline=None)
@given(MEMBERS.filter(bool))
def test_the_codec_writes_blocks_and_reads_members(ms: tuple[Member, ...]) -> None:
    ev = Ev("run-pl")
    for event in (ev.generation_started(2, members=ms), RunAdmitted(header=ev.h(), members=ms)):
        data = CODEC.encode(event)
        assert CODEC.decode(data).event.members == ms
        schema = CODEC.registry.latest(type(event).__name__)
        raw = fastavro.schemaless_reader(io.BytesIO(data[10:]), schema.parsed, None)
        assert isinstance(raw, dict)
        assert raw["members"] == [] and raw[FIELD] == pack(fields(ms))


def test_wire_bytes_is_what_avro_writes() -> None:
    ms = tuple(Member(f"r{i}", f"n{i // 3}", i % 3, None if i % 2 else "d") for i in range(40))
    schema = CODEC.registry.latest("GenerationStarted").schema
    (array,) = [f["type"] for f in schema["fields"] if f["name"] == FIELD]
    for blocks in ([], pack(fields(ms))):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(array), blocks)
        assert wire_bytes(blocks) == len(buf.getvalue())


def test_an_older_record_keeps_its_members_as_written() -> None:
    ms = (Member("r0", "n1", 0, None), Member("r1", "n1", 1, None))
    assert inflate({"members": [to_record(m) for m in ms], FIELD: []})["members"] == [
        to_record(m) for m in ms]
    # What a writer before the blocks wrote.
    (v1,) = [v for v in CODEC.registry.versions("RunAdmitted") if v.version == 1]
    event = RunAdmitted(header=Ev("run-old").h(), members=ms)
    record = to_record(event)
    record["header"]["schema_version"] = 1
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + v1.fingerprint)
    fastavro.schemaless_writer(buf, v1.parsed, record)
    decoded = CODEC.decode(buf.getvalue())
    assert decoded.writer_version == 1 and decoded.event.members == ms


@pytest.mark.parametrize(("block", "says"), [
    ({"first_id": "r0", "count": 0}, "count must be 1..1024, got 0"),
    ({"first_id": "r0", "count": BLOCK_MAX + 1}, "count must be 1..1024, got 1025"),
    ({"first_id": "x", "count": 2}, "an id without a number to count from"),
    ({"first_id": "r07", "count": 2}, "an id without a number to count from"),
])
def test_a_block_that_cannot_be_is_refused_naming_it(block: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidEvent, match=says):
        unpack([{"node": "n", "first_slot": 0, "domain": None, **block}])


def test_a_record_may_not_claim_more_members_than_the_limit() -> None:
    big = [{"first_id": "r0", "count": BLOCK_MAX, "node": "n", "first_slot": 0,
            "domain": None}] * (MEMBERS_MAX // BLOCK_MAX + 1)
    with pytest.raises(InvalidEvent, match=f"over the limit of {MEMBERS_MAX}"):
        unpack(big)
    # Through the codec: a decode error naming the field, never a billion members.
    event = Ev("run-big").generation_started(1, members=(Member("r0", "n", 0, None),))
    record = deflate(to_record(event))
    record[FIELD] = big
    record["header"]["schema_version"] = 3
    schema = CODEC.registry.latest("GenerationStarted")
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + schema.fingerprint)
    fastavro.schemaless_writer(buf, schema.parsed, record)
    with pytest.raises(DecodeError, match=f"{FIELD} names"):
        CODEC.decode(buf.getvalue())


def test_a_record_with_both_forms_is_refused() -> None:
    with pytest.raises(InvalidEvent, match="both members and placement"):
        inflate({"members": [{"logical_id": "r0", "node": "n", "slot": 0, "domain": None}],
                 FIELD: [{"first_id": "r1", "count": 1, "node": "n", "first_slot": 1,
                          "domain": None}]})


def test_the_bounds_agree() -> None:
    assert BLOCK_MAX == MAX_SLOTS_PER_NODE
    assert MEMBERS_MAX >= MAX_WORLD_SIZE


def test_the_status_summary_carries_blocks_and_still_reads_a_v1_summary() -> None:
    ms = tuple(Member(f"r{i}", f"node-{i // 8}", i % 8, None) for i in range(4096))
    summary = summarize(state(run_id="run-s", members=ms), NO_NOTES, 5)
    data = encode_summary(summary)
    assert decode_summary(data).members == ms
    assert len(data) < 60_000  # 512 blocks; one record per member was about 90 KB
    # A summary an older controller wrote (v1: one record per member) still reads.
    v1 = load_schema_text("RunStatusChanged.v1.avsc", (SCHEMAS / "views" /
                          "RunStatusChanged.v1.avsc").read_text())
    body = to_record(summary)
    body["header"]["schema_version"] = 1
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + v1.fingerprint)
    fastavro.schemaless_writer(buf, v1.parsed, body)
    old = decode_summary(buf.getvalue())
    assert old.members == ms and old.header.schema_version == 1
