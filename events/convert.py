"""Between event dataclasses and the plain records fastavro reads and writes.

Both directions run once per event on every produce and consume, so each
class's shape is worked out once and written out as a small function of its
own, compiled on first use (``_compile_encoder``, ``_decoder``): one attribute
read or key lookup per field, and a type test per scalar, with nothing looked
up, branched on or looped over per field at run time. The benchmark in
``bench/events.py`` showed the generic walk costing 80% of the codec; a plan
per class, walked per field, was the step before this one, and these functions
take 0.84-0.98 of its time (docs/performance.md, the codec rows).

Tested in tests/events/test_codec.py and tests/events/test_convert.py (against
a plain walk of the fields, the reference).
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


def _allowed(tp: Any) -> frozenset[type] | None:
    """The exact types a scalar field accepts, or None for containers and records."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        allowed = _allowed(inner)
        return None if allowed is None else allowed | {type(None)}
    return _EXACT.get(tp)


def _wrong_type(cls: type[Any], name: str, allowed: frozenset[type], item: Any) -> InvalidEvent:
    return InvalidEvent(
        f"{cls.__name__}.{name} must be "
        f"{' or '.join(sorted(t.__name__ for t in allowed))}, "
        f"got {type(item).__name__} {item!r}"
    )


# Per dataclass: a function compiled for its fields (``_compile_encoder``).
_ENCODERS: dict[type[Any], Callable[[Any], dict[str, Any]]] = {}


def _compile_encoder(cls: type[Any]) -> Callable[[Any], dict[str, Any]]:
    """A function that turns one ``cls`` into its record, written out field by field.

    What the generic walk did per field (look the plan up, test the kind of the
    field, loop) is decided here once, so an encode runs one attribute read and,
    for a scalar, one set test per field, in the order of the fields (the first
    wrong field is the one named, as before).
    """
    hints = typing.get_type_hints(cls)
    env: dict[str, Any] = {"to_record": to_record, "wrong": _wrong_type, "cls": cls}
    lines = ["def encode(value):"]
    names = []
    for i, f in enumerate(dataclasses.fields(cls)):
        allowed = _allowed(hints[f.name])
        lines.append(f"    x{i} = value.{f.name}")
        if allowed is None:
            lines.append(f"    x{i} = to_record(x{i})")
        else:
            env[f"a{i}"] = allowed
            lines.append(f"    if type(x{i}) not in a{i}:")
            lines.append(f"        raise wrong(cls, {f.name!r}, a{i}, x{i})")
        names.append(f"{f.name!r}: x{i}")
    lines.append("    return {" + ", ".join(names) + "}")
    exec("\n".join(lines), env)  # the source is built above from field names alone
    encode: Callable[[Any], dict[str, Any]] = env["encode"]
    _ENCODERS[cls] = encode
    return encode


def to_record(value: Any) -> Any:
    """A dataclass tree as dicts and lists (Avro arrays), leaving scalars alone.

    A scalar field holding a value of another type raises ``InvalidEvent``
    naming the field.
    """
    cls = type(value)
    encode = _ENCODERS.get(cls)
    if encode is not None:
        return encode(value)
    if cls in _SCALARS:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _compile_encoder(cls)(value)
    if isinstance(value, tuple | list):
        return [to_record(v) for v in value]
    if isinstance(value, dict):
        return {k: to_record(v) for k, v in value.items()}
    return value


def _decoder_of(tp: Any, env: dict[str, Any], raw: str) -> str:
    """The expression that builds a field of type ``tp`` from its decoded value ``raw``
    (a plain name, so it may be repeated); ``env`` receives the names it uses."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        built = _decoder_of(inner, env, raw)
        return raw if built == raw else f"(None if {raw} is None else {built})"
    if origin is tuple:
        inner, _ellipsis = typing.get_args(tp)
        item = _decoder_of(inner, env, "i")
        return f"tuple({raw})" if item == "i" else f"tuple([{item} for i in {raw}])"
    if origin is dict:
        return f"dict({raw})"
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = f"b{len(env)}_{tp.__name__}"  # unique within this function's names
        env[name] = _decoder(tp)
        return f"{name}({raw})"
    return raw


# Per dataclass: its compiled builder, called with the record and where it is (for
# the messages of a refusal; "" at the top).
Decoder = Callable[[dict[str, Any], str], Any]
_DECODERS: dict[type[Any], Decoder] = {}


def _explain(cls: type[Any], names: frozenset[str], record: dict[str, Any],
             where: str) -> InvalidEvent:
    where = where or cls.__name__
    missing = sorted(names - set(record))
    if missing:
        return InvalidEvent(f"{where}.{missing[0]} is missing")
    return InvalidEvent(f"{where} has fields the class does not know: "
                        f"{sorted(set(record) - names)}")


def _decoder(cls: type[Any]) -> Decoder:
    """A function that builds one ``cls`` from its decoded record, written out field by
    field, as its encoder is; a record whose fields are not exactly the class's is
    refused naming the first missing or the unknown ones."""
    decode = _DECODERS.get(cls)
    if decode is not None:
        return decode
    hints = typing.get_type_hints(cls)
    names = frozenset(f.name for f in dataclasses.fields(cls))
    env: dict[str, Any] = {"cls": cls, "names": names, "explain": _explain}
    lines = ["def decode(record, where=''):",
             "    if record.keys() != names:",
             "        raise explain(cls, names, record, where)"]
    args = []
    for i, f in enumerate(dataclasses.fields(cls)):
        built = _decoder_of(hints[f.name], env, f"x{i}")
        if built != f"x{i}":
            lines.append(f"    x{i} = record[{f.name!r}]")
            args.append(f"{f.name}={built}")
        else:
            args.append(f"{f.name}=record[{f.name!r}]")
    lines.append("    return cls(" + ", ".join(args) + ")")
    exec("\n".join(lines), env)  # the source is built above from field names alone
    compiled: Decoder = env["decode"]
    _DECODERS[cls] = compiled
    return compiled


def from_record(cls: type[Any], record: dict[str, Any], where: str = "") -> Any:
    """Build ``cls`` from a decoded record; a missing or unknown field names itself."""
    decode = _DECODERS.get(cls) or _decoder(cls)
    return decode(record, where)
