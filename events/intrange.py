"""Avro ``int`` fields hold 32 bits: a checker per schema that finds a value outside them.

fastavro writes any Python integer into an ``int`` field as a varint, so
without this check a value of 2**40 would be encoded by us, decoded by us, and
then refused by every conforming reader (the Apache library, a DuckDB INTEGER
column): one record that stops a projector. ``events.codec`` refuses such a
value on both sides, naming the field.

Tested in tests/events/test_codec.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1

# Given a value and its path, the path and value of the first int out of range, or None.
Check = Callable[[Any, str], "tuple[str, int] | None"]


def int_checker(schema: Any) -> Check | None:
    """A checker for ``schema`` (a schema's JSON), or None when it has no int field."""
    return _checker(schema, {}, set())


def _checker(schema: Any, names: dict[str, Any], seen: set[str]) -> Check | None:
    if isinstance(schema, str):
        if schema == "int":
            return _int
        if schema in names and schema not in seen:
            return _checker(names[schema], names, seen | {schema})
        return None
    if isinstance(schema, list):
        branches = [c for c in (_checker(s, names, seen) for s in schema) if c is not None]
        return _first(branches) if branches else None
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind == "record":
        names[schema["name"]] = schema
        fields = [(f["name"], _checker(f["type"], names, seen | {schema["name"]}))
                  for f in schema["fields"]]
        return _record([(n, c) for n, c in fields if c is not None]) if any(
            c for _, c in fields) else None
    if kind == "array":
        inner = _checker(schema["items"], names, seen)
        return None if inner is None else _each(inner, lambda v: enumerate(v), list)
    if kind == "map":
        inner = _checker(schema["values"], names, seen)
        return None if inner is None else _each(inner, lambda v: v.items(), dict)
    return _checker(kind, names, seen)


def _int(value: Any, path: str) -> tuple[str, int] | None:
    if type(value) is int and not INT_MIN <= value <= INT_MAX:
        return path, value
    return None


def _first(checks: list[Check]) -> Check:
    def check(value: Any, path: str) -> tuple[str, int] | None:
        for c in checks:
            found = c(value, path)
            if found is not None:
                return found
        return None
    return check


def _record(fields: list[tuple[str, Check]]) -> Check:
    def check(value: Any, path: str) -> tuple[str, int] | None:
        if not isinstance(value, dict):
            return None
        for name, c in fields:
            found = c(value.get(name), f"{path}.{name}" if path else name)
            if found is not None:
                return found
        return None
    return check


def _each(inner: Check, items: Callable[[Any], Any], kind: type) -> Check:
    def check(value: Any, path: str) -> tuple[str, int] | None:
        if not isinstance(value, kind):
            return None
        for key, item in items(value):
            found = inner(item, f"{path}[{key}]")
            if found is not None:
                return found
        return None
    return check
