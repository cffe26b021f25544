"""events.columnar.payloads (native/src/payload.rs) against projectors.payload, the reference.

The ``events`` table's payload written from a type's columns must be the bytes
the Python projector writes for the decoded event: for records generated from
every schema file, and for drawn doubles (every bit pattern: subnormals, both
zeros, NaN, the infinities, the exponents where ``repr`` changes notation),
drawn text (every code point but the surrogates UTF-8 cannot carry) and drawn
map keys (sorted as Python sorts them). The writer version of each record
comes back beside it.
"""

from __future__ import annotations

import random
import struct
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from events.codec import default_codec
from events.columnar import ColumnarDecoder, payloads
from events.errors import DecodeError, EncodeError
from events.model import Event
from events.registry import SchemaRegistry, SchemaVersion
from projectors.payload import payload
from tests.events.sample_events import one_of_each
from tests.events.test_columnar import EVERY_FILE, written
from tests.events.test_compat import random_datum

REGISTRY = SchemaRegistry.from_directory()
DECODER = ColumnarDecoder(REGISTRY)
CODEC = default_codec()
SAMPLE = {e.event_type: e for e in one_of_each("run-1")}
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


def native_payloads(values: list[bytes]) -> list[str]:
    """Each value's payload from the columns, in the order of ``values`` (one type)."""
    got = DECODER.decode(values)
    assert got.refused == []
    (batch,) = got.batches.values()
    return payloads(batch).to_pylist()


def python_payload(event: Event) -> str | None:
    """The reference: the payload of the event the Python codec decodes (None where
    it refuses the bytes, e.g. a class rule)."""
    try:
        return payload(CODEC.decode(CODEC.encode(event)).event)
    except (DecodeError, EncodeError):
        return None


def test_every_schema_file_gives_the_pythons_payload_and_writer_version() -> None:
    checked: dict[str, int] = {}
    for sv in EVERY_FILE:
        if sv.event_type in CODEC.packed:
            continue  # members inflated from blocks: a payload of other fields
        rng = random.Random(sv.path)
        values = [written(sv, random_datum(sv.schema, rng)) for _ in range(100)]
        got = DECODER.decode(values)
        assert got.refused == []
        assert got.versions.to_pylist() == [sv.version] * len(values)
        mine = payloads(got.batches[sv.event_type]).to_pylist()
        for value, text in zip(values, mine, strict=True):
            try:
                event = CODEC.decode(value).event
            except DecodeError:
                continue  # a class rule refuses it: no events row is written at all
            assert text == payload(event), sv.path
            checked[sv.event_type] = checked.get(sv.event_type, 0) + 1
    # 32 of 49 types pass their class rules with random datums (the others' rules want
    # related fields that agree): each is compared many times here, and every type once
    # in test_one_of_each_type_gives_the_pythons_payload.
    assert len(checked) >= 30 and sum(checked.values()) > 900


def test_one_of_each_type_gives_the_pythons_payload() -> None:
    for event_type, event in SAMPLE.items():
        if event_type in CODEC.packed:
            continue
        assert native_payloads([CODEC.encode(event)]) == [payload(event)], event_type


def float_of(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


DOUBLES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=0, max_value=2**64 - 1).map(float_of),
    st.sampled_from([0.0, -0.0, 1e16, 9999999999999998.0, 1e15, 123456789012345.6,
                     1e-4, 1e-5, 0.0001234, 5e-324, 1.7976931348623157e308, 0.1, 100.0,
                     float("nan"), float("inf"), float("-inf")]),
)


@settings(max_examples=400, deadline=None)
@given(DOUBLES, st.one_of(st.none(), DOUBLES))
def test_doubles_are_written_as_pythons_repr(step_time: float, loss: float | None) -> None:
    event = replace(SAMPLE["StepCommitted"], step_time_ms=step_time, loss=loss)
    expected = python_payload(event)
    if expected is None:
        return
    assert native_payloads([CODEC.encode(event)]) == [expected]


@settings(max_examples=300, deadline=None)
@given(TEXT, st.dictionaries(TEXT, st.integers(min_value=-(2**63), max_value=2**63 - 1),
                             max_size=6))
def test_text_and_map_keys_are_escaped_and_sorted_as_python_does(
        node: str, counts: dict[str, int]) -> None:
    beat = replace(SAMPLE["HeartbeatRecorded"], node=node or "n")
    cursor = replace(SAMPLE["CursorAdvanced"], source_counts=counts)
    for event in (beat, cursor):
        expected = python_payload(event)
        if expected is not None:
            assert native_payloads([CODEC.encode(event)]) == [expected]


def test_a_version_older_than_the_newest_is_said_per_record() -> None:
    older = [sv for sv in EVERY_FILE if sv is not REGISTRY.latest(sv.event_type)]
    if not older:
        return
    sv: SchemaVersion = older[0]
    rng = random.Random(1)
    newest = REGISTRY.latest(sv.event_type)
    values = [written(sv, random_datum(sv.schema, rng)),
              written(newest, random_datum(newest.schema, rng)), b"\x00"]
    got = DECODER.decode(values)
    assert got.versions.to_pylist() == [sv.version, newest.version, -1]
