"""The compiled converters of ``events.convert`` against a plain walk of the same classes.

``to_record`` and ``from_record`` write a function per class on first use; these
tests hold those functions to a reference that walks ``dataclasses.fields`` per
value, as the converters did before they were compiled: the same records from
every event, the same events back, and the same refusals naming the same field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from events.convert import from_record, to_record
from events.errors import InvalidEvent
from events.model import EVENT_TYPES, Event, Header, MemberBeat, MembersHeartbeatRecorded
from tests.events.sample_events import one_of_each
from tests.events.strategies import any_event

SAMPLES = one_of_each("run-1")


def walked(value: Any) -> Any:
    """The reference: a dataclass as a dict of its fields, containers item by item."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: walked(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [walked(v) for v in value]
    if isinstance(value, dict):
        return {k: walked(v) for k, v in value.items()}
    return value


def built(tp: Any, raw: Any) -> Any:
    """The reference the other way: ``raw`` as a value of the annotated type ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if raw is None else built(inner, raw)
    if origin is tuple:
        return tuple(built(typing.get_args(tp)[0], item) for item in raw)
    if origin is dict:
        return dict(raw)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: built(hints[f.name], raw[f.name]) for f in dataclasses.fields(tp)})
    return raw


@pytest.mark.parametrize("event", SAMPLES, ids=[type(e).__name__ for e in SAMPLES])
def test_every_type_converts_as_the_plain_walk_does(event: Event) -> None:
    record = to_record(event)
    assert record == walked(event)
    assert from_record(type(event), walked(event)) == built(type(event), walked(event)) == event


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(any_event)
def test_arbitrary_events_convert_as_the_plain_walk_does(event: Event) -> None:
    assert to_record(event) == walked(event)
    assert from_record(type(event), walked(event)) == event


def test_the_catalog_is_covered() -> None:
    assert {type(e).__name__ for e in SAMPLES} == set(EVENT_TYPES)


def beats() -> MembersHeartbeatRecorded:
    return MembersHeartbeatRecorded(
        header=Header("r/beats/1", "run-1", 1, 1_700_000_000_000, "agent/n1"), node="n1",
        beats=(MemberBeat("r0", 5), MemberBeat("r1", 5)))


def test_a_missing_field_is_named_at_its_depth() -> None:
    record = to_record(beats())
    del record["node"]
    with pytest.raises(InvalidEvent, match=r"^MembersHeartbeatRecorded\.node is missing$"):
        from_record(MembersHeartbeatRecorded, record)
    record = to_record(beats())
    del record["beats"][1]["step"]
    with pytest.raises(InvalidEvent, match=r"^MemberBeat\.step is missing$"):
        from_record(MembersHeartbeatRecorded, record)
    without_node = {k: v for k, v in to_record(beats()).items() if k != "node"}
    with pytest.raises(InvalidEvent, match=r"^beats\[0\]\.node is missing$"):
        from_record(MembersHeartbeatRecorded, without_node, "beats[0]")


def test_an_unknown_field_is_named() -> None:
    record = {**to_record(beats()), "extra": 1}
    with pytest.raises(InvalidEvent, match=r"does not know: \['extra'\]"):
        from_record(MembersHeartbeatRecorded, record)


@pytest.mark.parametrize(("field", "value", "says"), [
    ("node", 7, r"MembersHeartbeatRecorded\.node must be str, got int 7"),
    ("node", None, r"MembersHeartbeatRecorded\.node must be str, got NoneType None"),
])
def test_a_scalar_of_another_type_is_named(field: str, value: Any, says: str) -> None:
    with pytest.raises(InvalidEvent, match=says):
        to_record(dataclasses.replace(beats(), **{field: value}))


def test_a_wrong_type_inside_a_member_names_the_member_class() -> None:
    bad = dataclasses.replace(beats(), beats=(MemberBeat("r0", 5),
                                              MemberBeat("r1", 2.5)))  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent, match=r"MemberBeat\.step must be int, got float 2\.5"):
        to_record(bad)


def test_the_first_wrong_field_in_field_order_is_the_one_named() -> None:
    bad = dataclasses.replace(beats(), node=1,  # type: ignore[arg-type]
                              beats=(MemberBeat("r0", 2.5),))  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent, match=r"\.node must be str"):
        to_record(bad)
