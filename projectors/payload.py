"""The ``events`` table's payload: an event's fields but its header, as canonical
JSON (sorted keys, compact), encoded with one C encoder built once: every record
of the log goes through here, so its speed is the projector's.

Tested in tests/projectors/test_tables.py.
"""

from __future__ import annotations

import dataclasses
import json
import operator
from collections.abc import Callable, Sequence
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from events.model import Event


def payload(e: Event) -> str:
    """The event's payload fields as canonical JSON."""
    kind = type(e)
    doc = _PAYLOAD_DOC.get(kind)
    if doc is None:
        doc = _PAYLOAD_DOC[kind] = _doc_of(kind)
    return "".join(_ENCODE(doc(e), 0))


def _doc_of(kind: type[Event]) -> Callable[[Event], dict[str, Any]]:
    """How to take an event's payload fields (all but the header) as one dict: its
    field names looked up once, in sorted order (what the encoder sorts them into)."""
    names = tuple(sorted(f.name for f in dataclasses.fields(kind) if f.name != "header"))
    if not names:
        return lambda _e: {}
    get = operator.attrgetter(*names)
    if len(names) == 1:  # one name: attrgetter gives the value, not a tuple of one
        return lambda e: {names[0]: get(e)}
    return lambda e: dict(zip(names, get(e), strict=True))


# Per event class: ``dataclasses.fields`` per record was a fifth of rows_for's time.
_PAYLOAD_DOC: dict[type[Event], Callable[[Event], dict[str, Any]]] = {}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    if isinstance(value, bytes):
        return value.hex()  # a key record's public key
    raise TypeError(f"cannot put {type(value).__name__} in a payload")


# What ``json.dumps(doc, sort_keys=True, default=_plain, separators=(",", ":"))``
# uses, built once instead of per record.
_JSON = json.JSONEncoder(sort_keys=True, default=_plain, separators=(",", ":"))
# ``_JSON.encode`` builds a new C encoder per call, two fifths of its time on a
# heartbeat's payload; this is that C encoder, built once with the same settings.
# Without the circular-reference markers: a decoded event holds no cycles.
_ENCODE: Callable[[Any, int], Sequence[str]] = (
    (lambda doc, _level: (_JSON.encode(doc),)) if c_make_encoder is None
    else c_make_encoder(None, _plain, encode_basestring_ascii, None, ":", ",", True, False,
                        True))
