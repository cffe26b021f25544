"""Between event dataclasses and the plain records fastavro reads and writes."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from events.errors import InvalidEvent


def to_record(value: Any) -> Any:
    """A dataclass tree as dicts and lists (Avro arrays), leaving scalars alone."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_record(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_record(v) for v in value]
    if isinstance(value, dict):
        return {k: to_record(v) for k, v in value.items()}
    return value


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _build(tp: Any, raw: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if raw is None:
            return None
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(inner, raw, where)
    if origin is tuple:
        (inner, _ellipsis) = typing.get_args(tp)
        return tuple(_build(inner, item, f"{where}[{i}]") for i, item in enumerate(raw))
    if origin is dict:
        return dict(raw)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_record(tp, raw, where)
    return raw


def from_record(cls: type[Any], record: dict[str, Any], where: str = "") -> Any:
    """Build ``cls`` from a decoded record; unknown or missing fields name themselves."""
    where = where or cls.__name__
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in record:
            raise InvalidEvent(f"{where}.{f.name} is missing")
        kwargs[f.name] = _build(hints[f.name], record[f.name], f"{where}.{f.name}")
    extra = set(record) - set(kwargs)
    if extra:
        raise InvalidEvent(f"{where} has fields the class does not know: {sorted(extra)}")
    return cls(**kwargs)
