"""events/codec.py, with events/convert.py: the Avro single-object codec (docs/architecture.md
§4): every event type round trips, the wire prefix, readability with the schema files
alone, the rules beyond the schema, and every way bytes go wrong.

CRC-64-AVRO is tests/events/test_fingerprint.py; the schema files against the classes,
tests/events/test_registry.py."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.codec import MAGIC, Codec, Upcasters, default_codec
from events.convert import to_record
from events.errors import DecodeError, EncodeError, InvalidEvent
from events.fingerprint import fingerprint_bytes
from events.model import (
    EVENT_TYPES,
    AlertRaised,
    CursorAdvanced,
    Event,
    FailureClassified,
    Header,
    HeartbeatRecorded,
    Member,
    RunAdmitted,
    RunFinished,
    RunQueued,
    RunSubmitted,
    StepCommitted,
)
from events.placement import FIELD as PLACEMENT
from events.placement import deflate
from tests.events.builders import Ev
from tests.events.sample_events import one_of_each
from tests.events.strategies import LONG_MAX, LONG_MIN, any_event, event_of
from tests.events.test_convert import walked

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
SAMPLES = one_of_each("run-1")
CODEC = Codec()
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def newest_file(event_type: str) -> Path:
    files = sorted(SCHEMAS.glob(f"{event_type}.v*.avsc"),
                   key=lambda p: int(p.name.split(".v")[1].split(".")[0]))
    assert files, f"no schema file for {event_type}"
    return files[-1]


def schema_json(event_type: str) -> dict[str, Any]:
    return json.loads(newest_file(event_type).read_text("utf-8"))  # type: ignore[no-any-return]


def file_fingerprint(event_type: str) -> bytes:
    """The fingerprint of the schema file, computed by fastavro alone."""
    canonical = to_parsing_canonical_form(schema_json(event_type))
    return bytes.fromhex(fastavro_fingerprint(canonical, "CRC-64-AVRO"))


def plain(value: Any) -> Any:
    """What a generic Avro reader returns for an event: dicts, lists, scalars; members
    as blocks where the schema has them (events.placement)."""
    out = walked(value)
    if isinstance(value, Event) and PLACEMENT in {
            f["name"] for f in schema_json(value.event_type)["fields"]}:
        out = deflate(out)
    return out


def read_with_schema_file_alone(data: bytes, event_type: str) -> Any:
    """Decode with plain fastavro and the .avsc file: no codec, no registry."""
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == file_fingerprint(event_type)
    parsed = fastavro.parse_schema(schema_json(event_type))
    buf = io.BytesIO(data[10:])
    record = fastavro.schemaless_reader(buf, parsed, None)
    assert buf.tell() == len(data) - 10, "the body has bytes the schema does not account for"
    return record


def ids(events: list[Event]) -> list[str]:
    return [e.event_type for e in events]


# --- round trips ------------------------------------------------------------------------


def test_samples_and_strategies_cover_the_catalog() -> None:
    assert sorted(ids(SAMPLES)) == sorted(EVENT_TYPES)
    assert sorted(CODEC.registry.event_types()) == sorted(EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=ids(SAMPLES))
def test_every_type_round_trips(event: Event) -> None:
    data = CODEC.encode(event)
    decoded = CODEC.decode(data)
    assert decoded.event == event
    assert type(decoded.event) is type(event)
    assert decoded.event_type == event.event_type
    assert decoded.writer_version == CODEC.registry.latest(event.event_type).version


@pytest.mark.parametrize("event", SAMPLES, ids=ids(SAMPLES))
def test_bytes_are_avro_single_object_encoding(event: Event) -> None:
    data = CODEC.encode(event)
    assert data[:2] == MAGIC == b"\xc3\x01"
    assert data[2:10] == file_fingerprint(event.event_type)
    assert data[2:10] == CODEC.registry.latest(event.event_type).fingerprint


@pytest.mark.parametrize("event", SAMPLES, ids=ids(SAMPLES))
def test_schema_files_alone_decode_the_bytes(event: Event) -> None:
    record = read_with_schema_file_alone(CODEC.encode(event), event.event_type)
    assert record == plain(event)


@FAST
@given(any_event)
def test_arbitrary_events_round_trip(event: Event) -> None:
    data = CODEC.encode(event)
    assert CODEC.decode(data).event == event
    assert read_with_schema_file_alone(data, event.event_type) == plain(event)


@pytest.mark.parametrize("name", sorted(EVENT_TYPES))
def test_each_type_round_trips_arbitrary_values(name: str) -> None:
    # any_event may favour some types; here every type gets its own examples.
    @settings(max_examples=25, deadline=None)
    @given(event_of(EVENT_TYPES[name]))
    def check(event: Event) -> None:
        assert CODEC.decode(CODEC.encode(event)).event == event

    check()


def test_edge_values_round_trip() -> None:
    ev = StepCommitted(
        header=Header("é✓🚀", "run/ü", LONG_MAX, LONG_MAX, "worker/🚀", "", 1),
        step=LONG_MIN, tokens=LONG_MAX, loss_tokens=0, step_time_ms=float("inf"),
        input_wait_ms=-0.0, loss=None,
    )
    assert CODEC.decode(CODEC.encode(ev)).event == ev
    empty = CursorAdvanced(header=Header("e", "r", 0, 0, "p", None, 2), step=0, dataset_id="",
                           epoch=0, position=0, source_counts={})
    assert CODEC.decode(CODEC.encode(empty)).event == empty


def test_encode_writes_the_writer_schema_version() -> None:
    event = RunQueued(header=Header("e", "r", 0, 0, "p", None, 7), reason="x")
    decoded = CODEC.decode(CODEC.encode(event))
    assert decoded.event.header.schema_version == 1 == decoded.writer_version
    assert decoded.event == dataclasses.replace(
        event, header=dataclasses.replace(event.header, schema_version=1))


# --- bytes that are not an event ------------------------------------------------------------


def decode_error(data: bytes) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        CODEC.decode(data)
    assert info.value.detail
    return info.value


@pytest.mark.parametrize("n", range(10))
def test_shorter_than_the_prefix_is_truncated(n: int) -> None:
    assert decode_error(CODEC.encode(SAMPLES[0])[:n]).reason == "truncated"


@pytest.mark.parametrize("magic", [b"\xc3\x00", b"\x00\x01", b"\x01\xc3", b"\x00\x00"])
def test_wrong_magic(magic: bytes) -> None:
    data = CODEC.encode(SAMPLES[0])
    assert decode_error(magic + data[2:]).reason == "bad_magic"


def test_confluent_wire_format_is_not_mistaken_for_ours() -> None:
    body = CODEC.encode(SAMPLES[0])[10:]
    assert decode_error(b"\x00\x00\x00\x00\x07" + body).reason == "bad_magic"


@pytest.mark.parametrize("fp", [bytes(8), fingerprint_bytes('"int"'), b"\xff" * 8])
def test_unknown_fingerprint(fp: bytes) -> None:
    data = CODEC.encode(SAMPLES[0])
    err = decode_error(MAGIC + fp + data[10:])
    assert err.reason == "unknown_fingerprint" and fp.hex() in err.detail


@pytest.mark.parametrize("event", SAMPLES, ids=ids(SAMPLES))
def test_a_flipped_fingerprint_bit_is_unknown(event: Event) -> None:
    data = bytearray(CODEC.encode(event))
    data[5] ^= 0x10
    assert decode_error(bytes(data)).reason == "unknown_fingerprint"


@pytest.mark.parametrize("event", SAMPLES, ids=ids(SAMPLES))
def test_every_truncation_of_the_body_is_refused(event: Event) -> None:
    data = CODEC.encode(event)
    for cut in range(10, len(data)):
        err = decode_error(data[:cut])
        assert err.reason == "body_invalid", (cut, err)
        assert event.event_type in err.detail


@pytest.mark.parametrize("event", SAMPLES, ids=ids(SAMPLES))
@pytest.mark.parametrize("extra", [b"\x00", b"\x02abc", bytes(100)])
def test_trailing_bytes(event: Event, extra: bytes) -> None:
    err = decode_error(CODEC.encode(event) + extra)
    assert err.reason == "trailing_bytes" and str(len(extra)) in err.detail


@pytest.mark.parametrize("length_byte", [0x7F, 0x7E, 0x01])
def test_a_corrupt_string_length_is_body_invalid(length_byte: int) -> None:
    data = bytearray(CODEC.encode(SAMPLES[0]))
    data[10] = length_byte  # the zig-zag length of header.event_id
    assert decode_error(bytes(data)).reason == "body_invalid"


def test_invalid_utf8_is_body_invalid() -> None:
    data = bytearray(CODEC.encode(SAMPLES[0]))
    assert data[10] == 2 * len(SAMPLES[0].header.event_id)
    data[11] = 0xFF  # the first byte of event_id
    assert decode_error(bytes(data)).reason == "body_invalid"


@pytest.mark.parametrize("event", SAMPLES, ids=ids(SAMPLES))
def test_flipped_body_bytes_decode_or_fail_cleanly(event: Event) -> None:
    data = CODEC.encode(event)
    for i in range(10, len(data)):
        for mask in (0x01, 0x80, 0xFF):
            corrupt = bytearray(data)
            corrupt[i] ^= mask
            try:
                decoded = CODEC.decode(bytes(corrupt))
            except DecodeError as err:
                assert err.reason in {"body_invalid", "trailing_bytes", "invalid_fields"}
            else:
                if decoded.event == event and data[i] == 1 and corrupt[i] > 1:
                    # A boolean's byte: Avro writes true as 1, and fastavro reads any
                    # non-zero byte as true, so this flip is invisible to the codec
                    # (the value is unchanged; Kafka's own CRC guards the bytes).
                    assert CODEC.encode(decoded.event) == data
                elif decoded.event == event:
                    # Only header.schema_version may be lost: decode takes the
                    # version from the fingerprint, not from the body.
                    raw = read_with_schema_file_alone(bytes(corrupt), event.event_type)
                    version = CODEC.registry.latest(event.event_type).version
                    assert raw["header"]["schema_version"] != version
                    raw["header"]["schema_version"] = version
                    assert raw == plain(event)


def write_raw(event_type: str, record: dict[str, Any]) -> bytes:
    """Encode ``record`` with plain fastavro, bypassing the classes' own checks."""
    buf = io.BytesIO()
    buf.write(MAGIC + file_fingerprint(event_type))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema_json(event_type)), record)
    return buf.getvalue()


@pytest.mark.parametrize("field,value,where", [
    ("action", "explode", "action"),
    ("failure_class", "meltdown", "failure_class"),
])
def test_valid_avro_that_breaks_an_event_rule_is_invalid_fields(
        field: str, value: str, where: str) -> None:
    (sample,) = [e for e in SAMPLES if isinstance(e, FailureClassified)]
    record = plain(sample)
    record[field] = value
    err = decode_error(write_raw("FailureClassified", record))
    assert err.reason == "invalid_fields" and where in err.detail


def test_an_empty_header_field_is_invalid_fields() -> None:
    record = plain(SAMPLES[0])
    record["header"]["event_id"] = ""
    err = decode_error(write_raw(SAMPLES[0].event_type, record))
    assert err.reason == "invalid_fields" and "event_id" in err.detail


def test_decode_reports_the_fingerprints_version_not_the_bodys() -> None:
    record = plain(SAMPLES[2])
    record["header"]["schema_version"] = 9  # a body that lies about its version
    decoded = CODEC.decode(write_raw(SAMPLES[2].event_type, record))
    assert decoded.writer_version == 1 and decoded.event.header.schema_version == 1
    assert decoded.event == SAMPLES[2]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        CODEC.decode(data)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(EVENT_TYPES)), st.binary(max_size=200))
def test_random_bodies_behind_a_real_prefix_raise_only_decode_error(
        event_type: str, body: bytes) -> None:
    try:
        decoded = CODEC.decode(MAGIC + file_fingerprint(event_type) + body)
    except DecodeError as err:
        assert err.reason in {"body_invalid", "trailing_bytes", "invalid_fields"}
    else:
        assert decoded.event_type == event_type


# --- events that cannot be written ------------------------------------------------------


H = Header("e1", "r1", 0, 5, "p")


@pytest.mark.parametrize("make,field", [
    (lambda: RunQueued(header=H, reason=5), "reason"),
    (lambda: HeartbeatRecorded(header=H, logical_id="a", node="n", step="3"), "step"),
    (lambda: HeartbeatRecorded(header=H, logical_id="a", node="n", step=2**63), "step"),
    (lambda: HeartbeatRecorded(header=H, logical_id="a", node=None, step=1), "node"),
    (lambda: RunAdmitted(header=H, members=(Member("w0", "n", "x"),)), "slot"),
    (lambda: CursorAdvanced(header=H, step=1, dataset_id="d", epoch=0, position=0,
                            source_counts={"web": "many"}), "source_counts"),
    (lambda: StepCommitted(header=H, step=1, tokens=1, loss_tokens=1, step_time_ms="slow",
                           input_wait_ms=0.0), "step_time_ms"),
    (lambda: RunQueued(header=Header("e", "r", LONG_MAX + 1, 0, "p"), reason="x"),
     "generation"),
    # A float or a bool in a long field must not be silently truncated to an int.
    (lambda: HeartbeatRecorded(header=H, logical_id="a", node="n", step=3.5), "step"),
    (lambda: HeartbeatRecorded(header=H, logical_id="a", node="n", step=True), "step"),
    (lambda: RunQueued(header=Header("e", "r", 1.0, 0, "p"), reason="x"), "generation"),
])
def test_encode_errors_name_the_field(make: Callable[[], Event], field: str) -> None:
    with pytest.raises(EncodeError, match=field):
        CODEC.encode(make())


def test_unencodable_text_is_an_encode_error_naming_the_field() -> None:
    with pytest.raises(EncodeError, match=r"RunQueued\.reason"):
        CODEC.encode(RunQueued(header=H, reason="\ud800"))  # a lone surrogate
    bad_key = CursorAdvanced(header=H, step=1, dataset_id="d", epoch=0, position=0,
                             source_counts={"ok": 1, "\udfff": 2})
    with pytest.raises(EncodeError, match="source_counts key"):
        CODEC.encode(bad_key)
    bad_member = RunAdmitted(header=H, members=(Member("w0", "n", 0), Member("w1", "\ud83d", 1)))
    with pytest.raises(EncodeError, match=r"placement\.1\.node"):  # w1's block
        CODEC.encode(bad_member)


def test_an_unregistered_event_class_is_an_encode_error() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Mystery(RunQueued):
        pass

    with pytest.raises(EncodeError, match="Mystery"):
        CODEC.encode(Mystery(header=H, reason="x"))


@pytest.mark.parametrize("make,field", [
    (lambda: FailureClassified(header=H, failure_class="hang", signature="s", action="explode",
                               attempt=1, detail=""), "action"),
    (lambda: FailureClassified(header=H, failure_class="meltdown", signature="s",
                               action="restart", attempt=1, detail=""), "failure_class"),
    (lambda: AlertRaised(header=H, alert="a", severity="panic", owner="o", runbook="r",
                         detail=""), "severity"),
    (lambda: RunFinished(header=H, outcome="maybe", reason=""), "outcome"),
    (lambda: RunSubmitted(header=H, spec_digest="d", spec_json="{}", principal="p",
                          world_size=0), "world_size"),
    (lambda: RunSubmitted(header=H, spec_digest="", spec_json="{}", principal="p",
                          world_size=1), "spec_digest"),
    (lambda: RunSubmitted(header=H, spec_digest="d", spec_json="{}", principal="",
                          world_size=1), "principal"),
    (lambda: RunAdmitted(header=H, members=()), "members"),
    (lambda: Header("", "r", 0, 0, "p"), "event_id"),
    (lambda: Header("e", "", 0, 0, "p"), "run_id"),
    (lambda: Header("e", "r", 0, 0, ""), "producer"),
    (lambda: Header("e", "r", -1, 0, "p"), "generation"),
    (lambda: Header("e", "r", 0, -1, "p"), "occurred_at"),
])
def test_rules_beyond_the_schema_raise_invalid_event(make: Callable[[], Any],
                                                     field: str) -> None:
    with pytest.raises(InvalidEvent, match=field):
        make()


def test_upcasters_refuse_a_second_registration_for_one_version() -> None:
    up = Upcasters()
    up.register("RunQueued", 1, lambda r: r)
    with pytest.raises(ValueError, match="RunQueued v1"):
        up.register("RunQueued", 1, lambda r: r)


def test_a_corrupt_body_gets_the_same_detail_every_time() -> None:
    """Quarantine rows are compared across replays: no object addresses in the detail."""
    good = CODEC.encode(SAMPLES[0])
    truncated = good[:-3]
    first = decode_error(truncated)
    second = decode_error(bytes(truncated))
    assert first.reason == "body_invalid" and first.detail == second.detail
    assert " at 0x" not in first.detail


def test_an_avro_int_past_32_bits_is_refused_both_ways_naming_the_field() -> None:
    codec = default_codec()
    event = Ev("r1").step(1, 5)
    record = to_record(event)
    record["header"]["schema_version"] = 2**40  # fastavro would write it as is
    prefix, parsed, _ = codec._writers["StepCommitted"]
    buf = io.BytesIO(prefix)
    buf.seek(len(prefix))
    fastavro.schemaless_writer(buf, parsed, record)
    with pytest.raises(DecodeError) as decoded:
        codec.decode(buf.getvalue())
    assert decoded.value.reason == "int_out_of_range"
    assert "StepCommitted.header.schema_version: 1099511627776" in decoded.value.detail
