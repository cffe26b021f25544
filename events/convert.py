"""Between event dataclasses and the plain records fastavro reads and writes.

Both directions run once per event on every produce and consume, so each
class's shape is worked out once and cached as a plan (the benchmark in
``bench/events.py`` showed the generic walk costing 80% of the codec).

Tested in tests/events/test_codec.py.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

from events.errors import InvalidEvent

_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})
# Exact scalar types a field may hold. fastavro's writer would silently turn a
# float or a bool in a long field into an integer (3.5 -> 3), so encoding
# checks them here, at the cost of one set lookup per field.
_EXACT: dict[Any, frozenset[type]] = {
    str: frozenset({str}),
    int: frozenset({int}),
    float: frozenset({float, int}),
    bool: frozenset({bool}),
    bytes: frozenset({bytes}),
}
_ENCODE: dict[type[Any], tuple[tuple[str, frozenset[type] | None], ...]] = {}


def _allowed(tp: Any) -> frozenset[type] | None:
    """The exact types a scalar field accepts, or None for containers and records."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        allowed = _allowed(inner)
        return None if allowed is None else allowed | {type(None)}
    return _EXACT.get(tp)


def _encode_plan(cls: type[Any]) -> tuple[tuple[str, frozenset[type] | None], ...]:
    plan = _ENCODE.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        plan = _ENCODE[cls] = tuple(
            (f.name, _allowed(hints[f.name])) for f in dataclasses.fields(cls)
        )
    return plan


def to_record(value: Any) -> Any:
    """A dataclass tree as dicts and lists (Avro arrays), leaving scalars alone.

    A scalar field holding a value of another type raises ``InvalidEvent``
    naming the field.
    """
    cls = type(value)
    if cls in _SCALARS:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for name, allowed in _encode_plan(cls):
            item = getattr(value, name)
            if allowed is not None:
                if type(item) not in allowed:
                    raise InvalidEvent(
                        f"{cls.__name__}.{name} must be "
                        f"{' or '.join(sorted(t.__name__ for t in allowed))}, "
                        f"got {type(item).__name__} {item!r}"
                    )
                out[name] = item
            else:
                out[name] = to_record(item)
        return out
    if isinstance(value, tuple | list):
        return [to_record(v) for v in value]
    if isinstance(value, dict):
        return {k: to_record(v) for k, v in value.items()}
    return value


Builder = Callable[[Any], Any] | None  # None: the decoded value is used as it is


def _builder(tp: Any) -> Builder:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        opt = _builder(inner)
        if opt is None:
            return None
        build: Callable[[Any], Any] = opt
        return lambda raw: None if raw is None else build(raw)
    if origin is tuple:
        inner, _ellipsis = typing.get_args(tp)
        item_opt = _builder(inner)
        if item_opt is None:
            return tuple
        build_item: Callable[[Any], Any] = item_opt
        return lambda raw: tuple(build_item(item) for item in raw)
    if origin is dict:
        return dict
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        cls = tp
        return lambda raw: from_record(cls, raw)
    return None


_PLANS: dict[type[Any], tuple[frozenset[str], tuple[tuple[str, Builder], ...]]] = {}


def _plan(cls: type[Any]) -> tuple[frozenset[str], tuple[tuple[str, Builder], ...]]:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        fields = tuple((f.name, _builder(hints[f.name])) for f in dataclasses.fields(cls))
        plan = _PLANS[cls] = (frozenset(name for name, _ in fields), fields)
    return plan


def from_record(cls: type[Any], record: dict[str, Any], where: str = "") -> Any:
    """Build ``cls`` from a decoded record; a missing or unknown field names itself."""
    names, fields = _plan(cls)
    if len(record) != len(fields) or not names.issuperset(record):
        where = where or cls.__name__
        missing = sorted(names - set(record))
        if missing:
            raise InvalidEvent(f"{where}.{missing[0]} is missing")
        raise InvalidEvent(
            f"{where} has fields the class does not know: {sorted(set(record) - names)}"
        )
    kwargs = {}
    for name, build in fields:
        raw = record[name]
        kwargs[name] = raw if build is None else build(raw)
    return cls(**kwargs)
