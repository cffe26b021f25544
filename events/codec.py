"""Avro single-object encoding of events, with schema resolution and upcasters.

Wire format (Avro specification, "Single-object encoding"): the two bytes
``C3 01``, the 8-byte little-endian CRC-64-AVRO fingerprint of the writer
schema's Parsing Canonical Form, then the Avro binary body. A reader looks the
writer schema up by fingerprint, resolves it into the newest schema of the same
type (Avro's rules: added fields take their defaults, removed ones are
skipped), then applies the upcasters registered for changes of meaning. A type whose
schema has a ``placement`` field writes its members there as blocks, and they
are read back into ``members`` (``events.placement``).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import fastavro
from fastavro.validation import validate

from events.convert import from_record, to_record
from events.errors import DecodeError, EncodeError, InvalidEvent
from events.intrange import Check, int_checker
from events.model import EVENT_TYPES, Event
from events.placement import FIELD as PLACEMENT
from events.placement import deflate, inflate
from events.registry import SchemaRegistry

MAGIC = b"\xc3\x01"
PREFIX_LEN = 10

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class Upcasters:
    """Changes of meaning between schema versions, applied at decode time.

    An upcaster registered as ``(event_type, version)`` receives a record that
    a writer of ``version`` or older produced, already resolved into the newest
    schema's shape, and returns the record with today's meaning. Upcasters of
    one type run in ascending version order.
    """

    def __init__(self) -> None:
        self._by_type: dict[str, list[tuple[int, Upcaster]]] = {}

    def register(self, event_type: str, version: int, fn: Upcaster) -> None:
        chain = self._by_type.setdefault(event_type, [])
        if any(v == version for v, _ in chain):
            raise ValueError(f"an upcaster for {event_type} v{version} is already registered")
        chain.append((version, fn))
        chain.sort(key=lambda item: item[0])

    def touches(self, event_type: str, writer_version: int) -> bool:
        """Whether :meth:`apply` changes anything of a record ``writer_version`` wrote."""
        return any(writer_version <= version for version, _ in self._by_type.get(event_type, ()))

    def apply(self, event_type: str, writer_version: int, record: dict[str, Any]) -> dict[str, Any]:
        for version, fn in self._by_type.get(event_type, ()):
            if writer_version <= version:
                record = fn(record)
        return record


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded event and what the bytes said about how it was written."""

    event: Event
    event_type: str
    writer_version: int


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class Codec:
    def __init__(
        self, registry: SchemaRegistry | None = None, upcasters: Upcasters | None = None
    ) -> None:
        self.registry = registry or SchemaRegistry.from_directory()
        self.registry.check_classes()
        self.upcasters = upcasters or Upcasters()
        # Per type: (prefix bytes, parsed schema, version) of the writer schema.
        self._writers = {}
        for name in EVENT_TYPES:
            latest = self.registry.latest(name)
            self._writers[name] = (MAGIC + latest.fingerprint, latest.parsed, latest.version)
        # Per type: the check of its int fields against 32 bits (None: it has none).
        self._ints: dict[str, Check | None] = {
            name: int_checker(self.registry.latest(name).parsed) for name in EVENT_TYPES}
        # Types whose members go on the wire as blocks (``events.placement.deflate``).
        self.packed = frozenset(name for name in EVENT_TYPES if PLACEMENT in {
            f["name"] for f in self.registry.latest(name).schema["fields"]})

    def encode(self, event: Event) -> bytes:
        name = type(event).__name__
        try:
            prefix, parsed, version = self._writers[name]
        except KeyError:
            raise EncodeError(f"{name} is not a registered event type") from None
        try:
            # Checks every scalar's exact type: fastavro's writer would silently
            # truncate a float (3.5 -> 3) or a bool written to a long field.
            record = to_record(event)
        except InvalidEvent as exc:
            raise EncodeError(f"{name}: {exc}") from None
        record["header"]["schema_version"] = version
        if name in self.packed:
            record = deflate(record)
        out_of_range = _ints_out_of_range(self._ints[name], record, name)
        if out_of_range is not None:
            raise EncodeError(out_of_range)
        buf = io.BytesIO()
        buf.write(prefix)
        try:
            fastavro.schemaless_writer(buf, parsed, record)
        except Exception as exc:
            # Slow path, for the message only: name the offending field.
            where = _unencodable_text(record, name)  # e.g. a lone surrogate
            if where is None:
                try:
                    validate(record, parsed, raise_errors=True)
                except Exception as invalid:
                    raise EncodeError(f"{name}: {invalid}") from None
            raise EncodeError(f"{where or name}: {exc}") from None
        return buf.getvalue()

    def decode(self, data: bytes) -> Decoded:
        if len(data) < PREFIX_LEN:
            raise DecodeError("truncated", f"{len(data)} bytes is shorter than the 10-byte prefix")
        if data[:2] != MAGIC:
            raise DecodeError("bad_magic", f"starts with {data[:2].hex()}, expected c301")
        writer = self.registry.by_fingerprint(bytes(data[2:PREFIX_LEN]))
        if writer is None:
            fp = data[2:PREFIX_LEN].hex()
            raise DecodeError("unknown_fingerprint", f"no schema file has fingerprint {fp}")
        reader = self.registry.latest(writer.event_type)
        buf = io.BytesIO(data)
        buf.seek(PREFIX_LEN)
        try:
            if reader is writer:
                record = fastavro.schemaless_reader(buf, writer.parsed, None)
            else:
                record = fastavro.schemaless_reader(buf, writer.parsed, reader.parsed)
        except Exception as exc:
            # No object addresses in the detail: a quarantine row must be the
            # same on every replay (fastavro's messages repr the buffer).
            detail = _ADDRESS.sub("", repr(exc))
            raise DecodeError(
                "body_invalid", f"{writer.event_type} v{writer.version} body: {detail}"
            ) from None
        if buf.tell() != len(data):
            raise DecodeError(
                "trailing_bytes",
                f"{writer.event_type} v{writer.version}: "
                f"{len(data) - buf.tell()} bytes after the body",
            )
        assert isinstance(record, dict)
        record = self.upcasters.apply(writer.event_type, writer.version, record)
        out_of_range = _ints_out_of_range(self._ints[writer.event_type], record,
                                          writer.event_type)
        if out_of_range is not None:
            raise DecodeError("int_out_of_range", out_of_range)
        cls = EVENT_TYPES[writer.event_type]
        try:
            event = from_record(cls, inflate(record) if PLACEMENT in record else record)
        except (InvalidEvent, TypeError, ValueError) as exc:
            raise DecodeError("invalid_fields", f"{writer.event_type}: {exc}") from None
        # The header reports which schema version wrote the bytes.
        if event.header.schema_version != writer.version:
            event = replace(event, header=replace(event.header, schema_version=writer.version))
        return Decoded(event=event, event_type=writer.event_type, writer_version=writer.version)


def _ints_out_of_range(check: Check | None, record: dict[str, Any], name: str) -> str | None:
    found = check(record, "") if check is not None else None
    if found is None:
        return None
    path, value = found
    return f"{name}.{path}: {value} does not fit an Avro int (32 bits)"


def _unencodable_text(value: Any, where: str) -> str | None:
    """The path of the first string UTF-8 cannot encode, if there is one."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    items: Any = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for key, item in items:
        found = _unencodable_text(key, f"{where} key") or _unencodable_text(item, f"{where}.{key}")
        if found:
            return found
    return None


_default: Codec | None = None


def default_codec() -> Codec:
    """A process-wide codec over the packaged schemas (loading them is not free)."""
    global _default
    if _default is None:
        _default = Codec()
    return _default
