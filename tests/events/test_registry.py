"""events/registry.py: the packaged schema files match the event classes, and a schema
that disagrees with its class, or a class or schema without the other, is refused by name.

Reading older writer versions (evolution) is tests/events/test_compat.py.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from events.codec import Codec
from events.errors import SchemaError
from events.model import EVENT_TYPES
from events.registry import SchemaRegistry

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_packaged_schemas_match_the_classes() -> None:
    registry = SchemaRegistry.from_directory()
    registry.check_classes()
    from_files = SchemaRegistry.from_directory(SCHEMAS)
    for name in EVENT_TYPES:
        assert registry.latest(name).fingerprint == from_files.latest(name).fingerprint


@pytest.fixture
def schema_copy(tmp_path: Path) -> Path:
    for path in SCHEMAS.glob("*.avsc"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def edit_fields(path: Path, edit: Callable[[list[dict[str, Any]]], None]) -> None:
    schema = json.loads(path.read_text("utf-8"))
    edit(schema["fields"])
    path.write_text(json.dumps(schema, indent=2), "utf-8")


def rename_step(fields: list[dict[str, Any]]) -> None:
    (step,) = [f for f in fields if f["name"] == "step"]
    step["name"] = "steps"


def swap_logical_id_and_node(fields: list[dict[str, Any]]) -> None:
    fields[1], fields[2] = fields[2], fields[1]


def drop_step(fields: list[dict[str, Any]]) -> None:
    fields[:] = [f for f in fields if f["name"] != "step"]


@pytest.mark.parametrize("edit,named", [
    (rename_step, "steps"),
    (swap_logical_id_and_node, "node"),
    (drop_step, "step"),
])
def test_a_schema_that_disagrees_with_its_class_is_refused(
        schema_copy: Path, edit: Callable[[list[dict[str, Any]]], None], named: str) -> None:
    edit_fields(schema_copy / "HeartbeatRecorded.v2.avsc", edit)  # the newest
    registry = SchemaRegistry.from_directory(schema_copy)
    with pytest.raises(SchemaError, match="HeartbeatRecorded") as info:
        registry.check_classes()
    assert named in str(info.value)
    with pytest.raises(SchemaError):
        Codec(registry)


def test_the_newest_version_is_what_must_match(schema_copy: Path) -> None:
    v3 = schema_copy / "HeartbeatRecorded.v3.avsc"
    shutil.copy(schema_copy / "HeartbeatRecorded.v2.avsc", v3)
    edit_fields(v3, rename_step)
    with pytest.raises(SchemaError, match=r"HeartbeatRecorded\.v3\.avsc.*steps"):
        SchemaRegistry.from_directory(schema_copy).check_classes()


def test_a_schema_without_a_class_is_refused(schema_copy: Path) -> None:
    schema = json.loads((schema_copy / "RunQueued.v1.avsc").read_text("utf-8"))
    schema["name"] = "RunParked"
    (schema_copy / "RunParked.v1.avsc").write_text(json.dumps(schema), "utf-8")
    with pytest.raises(SchemaError, match="RunParked"):
        SchemaRegistry.from_directory(schema_copy).check_classes()


def test_a_class_without_a_schema_is_refused(schema_copy: Path) -> None:
    (schema_copy / "WorkerExited.v1.avsc").unlink()
    with pytest.raises(SchemaError, match="WorkerExited"):
        SchemaRegistry.from_directory(schema_copy).check_classes()
