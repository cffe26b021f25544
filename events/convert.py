"""Between event dataclasses and the plain records fastavro reads and writes.

Both directions run once per event on every produce and consume, so each
class's shape is worked out once and cached as a plan (the benchmark in
``bench/events.py`` showed the generic walk costing 80% of the codec).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

from events.errors import InvalidEvent

_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})
_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def to_record(value: Any) -> Any:
    """A dataclass tree as dicts and lists (Avro arrays), leaving scalars alone."""
    cls = type(value)
    if cls in _SCALARS:
        return value
    names = _FIELD_NAMES.get(cls)
    if names is None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(value))
        elif isinstance(value, tuple | list):
            return [to_record(v) for v in value]
        elif isinstance(value, dict):
            return {k: to_record(v) for k, v in value.items()}
        else:
            return value
    return {n: to_record(getattr(value, n)) for n in names}


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
