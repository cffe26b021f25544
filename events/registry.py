"""The schema registry: every ``schemas/*.avsc`` file, looked up by fingerprint.

The files are the contract; the Python classes in ``events.model`` must match
the newest version of their type field for field, or loading fails with a
``SchemaError`` that names the type and the field.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import to_parsing_canonical_form

from events.errors import SchemaError
from events.fingerprint import fingerprint_bytes
from events.model import EVENT_TYPES, Event
from events.placement import FIELD as PLACEMENT

_FILE_RE = re.compile(r"^(?P<name>[A-Z][A-Za-z0-9]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    event_type: str
    version: int
    fingerprint: bytes
    schema: dict[str, Any]
    parsed: Any  # fastavro's parsed form; opaque to us
    path: str


class SchemaRegistry:
    """All schema versions of all event types, indexed for the codec."""

    def __init__(self, versions: Iterable[SchemaVersion]) -> None:
        self._by_fp: dict[bytes, SchemaVersion] = {}
        self._by_type: dict[str, dict[int, SchemaVersion]] = {}
        for sv in versions:
            other = self._by_fp.get(sv.fingerprint)
            if other is not None:
                raise SchemaError(f"{sv.path} and {other.path} have the same canonical form")
            self._by_fp[sv.fingerprint] = sv
            self._by_type.setdefault(sv.event_type, {})[sv.version] = sv
        for name, by_version in self._by_type.items():
            expected = list(range(1, max(by_version) + 1))
            if sorted(by_version) != expected:
                have = sorted(by_version)
                raise SchemaError(f"{name}: versions {have} are not 1..N without gaps")

    @classmethod
    def from_directory(cls, directory: Path | None = None) -> SchemaRegistry:
        """Load every schema file; the default is the ``schemas`` package."""
        files: list[tuple[str, str]] = []
        if directory is None:
            root = resources.files("schemas")
            entries = [e for e in root.iterdir() if e.name.endswith(".avsc")]
            files = [(e.name, e.read_text("utf-8")) for e in entries]
        else:
            files = [(p.name, p.read_text("utf-8")) for p in sorted(directory.glob("*.avsc"))]
        return cls(load_schema_text(name, text) for name, text in sorted(files))

    def by_fingerprint(self, fp: bytes) -> SchemaVersion | None:
        return self._by_fp.get(fp)

    def latest(self, event_type: str) -> SchemaVersion:
        try:
            by_version = self._by_type[event_type]
        except KeyError:
            raise SchemaError(f"no schema file for event type {event_type!r}") from None
        return by_version[max(by_version)]

    def versions(self, event_type: str) -> list[SchemaVersion]:
        return [v for _, v in sorted(self._by_type.get(event_type, {}).items())]

    def event_types(self) -> list[str]:
        return sorted(self._by_type)

    def check_classes(self, classes: Mapping[str, type[Event]] = EVENT_TYPES) -> None:
        """Every class has a schema and its newest schema has exactly its fields (the
        members' ``placement`` blocks aside: the codec packs and unpacks them)."""
        for name, cls in classes.items():
            latest = self.latest(name)
            class_fields = [f.name for f in dataclasses.fields(cls)]
            # A wire-only field: the members as blocks (events.placement).
            schema_fields = [f["name"] for f in latest.schema["fields"]
                             if not (f["name"] == PLACEMENT and "members" in class_fields)]
            if schema_fields != class_fields:
                raise SchemaError(
                    f"{latest.path}: fields {schema_fields} differ from "
                    f"events.model.{name} fields {class_fields}"
                )
        for name in self._by_type:
            if name not in classes:
                raise SchemaError(f"schema files for {name!r} but no class in events.model")


def load_schema_text(filename: str, text: str) -> SchemaVersion:
    match = _FILE_RE.match(filename)
    if match is None:
        raise SchemaError(f"{filename}: schema files are named <EventType>.v<N>.avsc")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{filename}: not JSON ({exc})") from None
    name = match["name"]
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise SchemaError(f"{filename}: top level must be a record")
    if schema.get("name") != name:
        raise SchemaError(f"{filename}: record name {schema.get('name')!r} != file name {name!r}")
    fields = schema.get("fields") or []
    if not fields or fields[0].get("name") != "header":
        raise SchemaError(f"{filename}: the first field must be the shared 'header' record")
    try:
        parsed = fastavro.parse_schema(schema, named_schemas={})
        canonical = to_parsing_canonical_form(schema)
    except Exception as exc:  # fastavro raises several unrelated types here
        raise SchemaError(f"{filename}: invalid Avro schema ({exc})") from None
    return SchemaVersion(
        event_type=name,
        version=int(match["version"]),
        fingerprint=fingerprint_bytes(canonical),
        schema=schema,
        parsed=parsed,
        path=filename,
    )
