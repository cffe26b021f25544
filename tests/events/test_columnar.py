"""events/columnar.py (the Rust crate in native/) against the Python codec, the reference.

For every schema file, of every type and version: records generated from that
file's schema are written with it, behind the prefix its fingerprint makes,
and read both ways. The compiled path's rows must be the records fastavro
reads with the codec's own resolution into the newest schema (a map's entries
by key, the one order the columns keep), in the order written, whatever the
mix of types; and what the codec refuses for a reason of the Avro layer
(``truncated``, ``bad_magic``, ``unknown_fingerprint``, ``body_invalid``,
``trailing_bytes``, ``empty``) the compiled path refuses for the same reason.
"""

from __future__ import annotations

import io
import random
from dataclasses import replace
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.codec import MAGIC, default_codec
from events.columnar import ColumnarDecoder
from events.errors import DecodeError
from events.registry import SchemaRegistry, SchemaVersion
from tests.events.sample_events import one_of_each
from tests.events.test_compat import random_datum

REGISTRY = SchemaRegistry.from_directory()
DECODER = ColumnarDecoder(REGISTRY)
EVERY_FILE = [sv for name in REGISTRY.event_types() for sv in REGISTRY.versions(name)]
AVRO_REASONS = {"truncated", "bad_magic", "unknown_fingerprint", "body_invalid",
                "trailing_bytes", "empty"}


def written(sv: SchemaVersion, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    buf.write(MAGIC + sv.fingerprint)
    fastavro.schemaless_writer(buf, sv.parsed, record)
    return buf.getvalue()


def read_by_the_codec(data: bytes) -> dict[str, Any]:
    """The record as ``events.codec.Codec.decode`` reads it, before upcasters and classes."""
    writer = REGISTRY.by_fingerprint(data[2:10])
    assert writer is not None
    reader = REGISTRY.latest(writer.event_type)
    buf = io.BytesIO(data[10:])
    record = fastavro.schemaless_reader(buf, writer.parsed,
                                        None if reader is writer else reader.parsed)
    assert isinstance(record, dict)
    return record


def as_row(schema: Any, value: Any) -> Any:
    """A record as its Arrow row reads back (``to_pylist``): maps as (key, value) pairs
    by key; everything else as it is."""
    if isinstance(schema, list):
        if value is None:
            return None
        (branch,) = [s for s in schema if s != "null"]
        return as_row(branch, value)
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "record":
            return {f["name"]: as_row(f["type"], value[f["name"]]) for f in schema["fields"]}
        if kind == "array":
            return [as_row(schema["items"], v) for v in value]
        if kind == "map":
            return [(k, as_row(schema["values"], value[k])) for k in sorted(value)]
        if isinstance(kind, dict | list):
            return as_row(kind, value)
    return value


def rows_of(event_type: str, records: list[dict[str, Any]]) -> list[Any]:
    schema = REGISTRY.latest(event_type).schema
    return [as_row(schema, r) for r in records]


@pytest.mark.parametrize("sv", EVERY_FILE, ids=[sv.path for sv in EVERY_FILE])
def test_every_schema_file_reads_as_the_codec_reads_it(sv: SchemaVersion) -> None:
    rng = random.Random(sv.path)
    values = [written(sv, random_datum(sv.schema, rng)) for _ in range(40)]
    got = DECODER.decode(values)
    assert got.refused == []
    assert set(got.batches) == {sv.event_type}
    batch = got.batches[sv.event_type]
    assert batch.schema.names == [f["name"] for f in REGISTRY.latest(sv.event_type).schema[
        "fields"]]
    assert batch.to_pylist() == rows_of(sv.event_type, [read_by_the_codec(v) for v in values])


def test_a_mix_of_every_type_keeps_each_types_order_and_says_which_is_which() -> None:
    events = one_of_each("run-1") * 3
    random.Random(7).shuffle(events)
    codec = default_codec()
    values: list[bytes | None] = [codec.encode(e) for e in events]
    got = DECODER.decode(values)
    assert got.refused == [] and len(got) == len(values)
    kinds = got.kinds.to_pylist()
    assert [got.types[k] for k in kinds] == [e.event_type for e in events]
    for event_type, batch in got.batches.items():
        mine = [v for v, e in zip(values, events, strict=True) if e.event_type == event_type]
        assert batch.to_pylist() == rows_of(event_type, [read_by_the_codec(v) for v in mine
                                                         if v is not None])
    assert set(got.batches) == {e.event_type for e in events}


def reason_of_the_codec(data: bytes | None) -> str | None:
    if data is None:
        return "empty"
    try:
        default_codec().decode(data)
    except DecodeError as exc:
        return exc.reason
    return None


def assert_refused_alike(values: list[bytes | None]) -> None:
    got = DECODER.decode(values)
    refused = {i: reason for i, reason, _ in got.refused}
    kinds = got.kinds.to_pylist()
    for i, data in enumerate(values):
        codec = reason_of_the_codec(data)
        if codec in AVRO_REASONS:
            assert refused.get(i) == codec, (i, data, got.refused)
            assert kinds[i] == -1
        elif codec is None:
            assert i not in refused, (i, data, got.refused)
        # invalid_fields, int_out_of_range: the class's rules and the int check, which
        # the reader of the columns applies (events.columnar); not the Avro layer's.


SAMPLES = [default_codec().encode(e) for e in one_of_each("run-1")]


def test_the_refusals_of_the_avro_layer_are_the_codecs() -> None:
    one = SAMPLES[0]
    assert_refused_alike([
        None, b"", b"\xc3", one[:9], b"\x00\x01" + one[2:], MAGIC + b"\xff" * 8 + one[10:],
        one + b"\x00", one + b"extra bytes", one[:-1], one[:11], one,
    ])


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SAMPLES), st.data())
def test_every_cut_and_flipped_byte_is_refused_or_read_as_the_codec_does(
        sample: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=len(sample)))
    at = data.draw(st.integers(min_value=10, max_value=len(sample) - 1))
    flip = data.draw(st.integers(min_value=1, max_value=255))
    flipped = sample[:at] + bytes([sample[at] ^ flip]) + sample[at + 1:]
    assert_refused_alike([sample[:cut], flipped])


@given(st.binary(max_size=64))
def test_random_bytes_are_refused_or_read_as_the_codec_does(data: bytes) -> None:
    assert_refused_alike([data, MAGIC + SAMPLES[3][2:10] + data])


def test_a_key_written_twice_in_a_map_keeps_its_last_value_as_the_codec_does() -> None:
    (cursor,) = [e for e in one_of_each("run-1") if e.event_type == "CursorAdvanced"]
    event = replace(cursor, source_counts={"aa": 1, "ab": 2, "zz": 3})
    data = default_codec().encode(event)
    twice = data.replace(b"\x04ab", b"\x04aa", 1)  # "ab" becomes a second "aa"
    assert twice != data
    record = read_by_the_codec(twice)
    assert record["source_counts"] == {"aa": 2, "zz": 3}  # the last one wins
    got = DECODER.decode([twice, data])
    assert got.refused == []
    rows = got.batches["CursorAdvanced"].to_pylist()
    assert rows[0]["source_counts"] == [("aa", 2), ("zz", 3)]
    assert rows[1]["source_counts"] == [("aa", 1), ("ab", 2), ("zz", 3)]
    assert rows == rows_of("CursorAdvanced", [record, read_by_the_codec(data)])


def test_an_empty_batch_has_no_columns() -> None:
    got = DECODER.decode([])
    assert len(got) == 0 and got.batches == {} and got.refused == []
    assert got.kinds.type == pa.int32()


def test_a_value_that_is_not_bytes_is_named() -> None:
    with pytest.raises(ValueError, match="a record value must be bytes"):
        DECODER.decode(["not bytes"])  # type: ignore[list-item]


def test_a_boolean_byte_past_one_reads_as_true_as_the_codec_reads_it() -> None:
    """The Avro spec writes only 0 and 1; fastavro, the reference codec's reader,
    takes every byte but 0 for true, and so do the columns (found by the cut and
    flip test above: a boolean byte of 3 was refused here and read there)."""
    (beat,) = [e for e in one_of_each("run-1") if e.event_type == "HeartbeatRecorded"]
    data = default_codec().encode(replace(beat, closing=True))
    assert data[-1] == 1  # the last field, ``closing``
    for byte in (2, 3, 255):
        flipped = data[:-1] + bytes([byte])
        assert read_by_the_codec(flipped)["closing"] is True
        got = DECODER.decode([flipped])
        assert got.refused == []
        assert got.batches["HeartbeatRecorded"].column("closing").to_pylist() == [True]
