"""Schema evolution (docs/architecture.md §4): transitive backward compatibility and upcasters.

Every reader schema must read every older writer schema of its type. The check
is by data: records generated from the writer schema are written with it and
read back through fastavro's schema resolution into the reader schema; fields
both have must come through unchanged and fields only the reader has must take
their defaults. A synthetic family in a temporary directory shows the check
passing for legal changes and catching illegal ones, and a registry with an
older, smaller v1 shows the codec resolving and upcasting old bytes.
"""

from __future__ import annotations

import io
import json
import random
import shutil
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import pytest

from events.codec import MAGIC, Codec, Upcasters
from events.errors import SchemaError
from events.model import EVENT_TYPES, AgentHeartbeatRecorded, RunSubmitted
from events.registry import SchemaRegistry

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
SAMPLES_PER_PAIR = 60

# --- a generic random-record generator for Avro schemas ---------------------------------

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_TEXT = ["", "a", "run-1", "é✓", "🚀 rocket", "x" * 40, "\x00nul", "日本語"]
_LONGS = [0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
_INTS = [0, 1, -1, 2**31 - 1, -(2**31)]


class Names:
    """Named types seen so far, by full name and by short name."""

    def __init__(self) -> None:
        self.types: dict[str, dict[str, Any]] = {}

    def define(self, schema: dict[str, Any], namespace: str | None) -> str | None:
        name = schema["name"]
        ns = schema.get("namespace", namespace)
        full = name if "." in name or not ns else f"{ns}.{name}"
        self.types[full] = schema
        self.types.setdefault(name.rsplit(".", 1)[-1], schema)
        return full.rsplit(".", 1)[0] if "." in full else None

    def lookup(self, name: str, namespace: str | None) -> dict[str, Any]:
        for key in (f"{namespace}.{name}" if namespace else name, name):
            if key in self.types:
                return self.types[key]
        raise KeyError(f"unknown named type {name!r}")


def random_datum(schema: Any, rng: random.Random, names: Names | None = None,
                 namespace: str | None = None, depth: int = 0) -> Any:
    """A value valid for ``schema`` (record, enum, array, map, fixed, union, primitives)."""
    names = names or Names()
    if isinstance(schema, list):  # a union: every branch gets chosen
        branch = rng.choice(schema)
        return random_datum(branch, rng, names, namespace, depth)
    if isinstance(schema, str):
        if schema not in _PRIMITIVES:
            return random_datum(names.lookup(schema, namespace), rng, names, namespace, depth)
        schema = {"type": schema}
    kind = schema["type"]
    if isinstance(kind, (dict, list)):
        return random_datum(kind, rng, names, namespace, depth)
    if kind == "null":
        return None
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([*_INTS, rng.randint(-(2**31), 2**31 - 1)])
    if kind == "long":
        return rng.choice([*_LONGS, rng.randint(-(2**63), 2**63 - 1), rng.randint(0, 10**6)])
    if kind in ("float", "double"):
        return rng.choice([0.0, -1.5, 0.25, 1e6, float(rng.randint(-1000, 1000)) / 4])
    if kind == "string":
        made = "".join(rng.choice("abcé🚀") for _ in range(rng.randint(0, 8)))
        return rng.choice([*_TEXT, made])
    if kind == "bytes":
        return rng.randbytes(rng.randint(0, 8))
    if kind == "fixed":
        names.define(schema, namespace)
        return rng.randbytes(schema["size"])
    if kind == "enum":
        names.define(schema, namespace)
        return rng.choice(schema["symbols"])
    if kind == "array":
        n = 0 if depth > 3 else rng.randint(0, 3)
        return [random_datum(schema["items"], rng, names, namespace, depth + 1) for _ in range(n)]
    if kind == "map":
        n = 0 if depth > 3 else rng.randint(0, 3)
        return {
            rng.choice(_TEXT) + str(i): random_datum(schema["values"], rng, names, namespace,
                                                     depth + 1)
            for i in range(n)
        }
    if kind == "record":
        inner = names.define(schema, namespace)
        return {f["name"]: random_datum(f["type"], rng, names, inner, depth + 1)
                for f in schema["fields"]}
    raise ValueError(f"no generator for Avro type {kind!r}")


# --- the compatibility check ------------------------------------------------------------


def check_backward(writer: dict[str, Any], reader: dict[str, Any], samples: int = SAMPLES_PER_PAIR,
                   seed: int = 0) -> list[str]:
    """Problems found reading ``writer`` data with ``reader`` (empty: compatible).

    Checks top-level fields too: shared fields (of identical type) keep their
    value; reader-only fields take their declared default.
    """
    try:
        w_parsed = fastavro.parse_schema(writer, named_schemas={})
        r_parsed = fastavro.parse_schema(reader, named_schemas={})
    except Exception as exc:
        return [f"schema does not parse: {exc}"]
    rng = random.Random(seed)
    problems: list[str] = []
    w_fields = {f["name"]: f for f in writer["fields"]}
    for _ in range(samples):
        datum = random_datum(writer, rng)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, w_parsed, datum)
        buf.seek(0)
        try:
            out = fastavro.schemaless_reader(buf, w_parsed, r_parsed)
        except Exception as exc:
            problems.append(f"{type(exc).__name__}: {exc}"[:300])
            break
        for field in reader["fields"]:
            name = field["name"]
            if name in w_fields:
                if w_fields[name]["type"] == field["type"] and out[name] != datum[name]:
                    problems.append(f"field {name!r} changed: {datum[name]!r} -> {out[name]!r}")
            elif out[name] != field.get("default"):
                problems.append(f"field {name!r} is {out[name]!r}, not its default")
        if problems:
            break
    return problems


def transitive_problems(registry: SchemaRegistry) -> dict[tuple[str, int, int], list[str]]:
    """Every (type, writer i, reader j) with i <= j that fails the check."""
    failures = {}
    for event_type in registry.event_types():
        versions = registry.versions(event_type)
        for w in versions:
            for r in versions:
                if w.version <= r.version:
                    seed = zlib.crc32(f"{event_type}/{w.version}/{r.version}".encode())
                    problems = check_backward(w.schema, r.schema, seed=seed)
                    if problems:
                        failures[(event_type, w.version, r.version)] = problems
    return failures


# --- the packaged schemas ----------------------------------------------------------------


PACKAGED = SchemaRegistry.from_directory()
PAIRS = [
    (name, w.version, r.version)
    for name in PACKAGED.event_types()
    for w in PACKAGED.versions(name)
    for r in PACKAGED.versions(name)
    if w.version <= r.version
]


def test_every_event_type_has_a_schema_family() -> None:
    assert sorted(PACKAGED.event_types()) == sorted(EVENT_TYPES)
    assert {name for name, _, _ in PAIRS} == set(EVENT_TYPES)


@pytest.mark.parametrize("event_type,writer,reader", PAIRS,
                         ids=[f"{n}-v{w}-v{r}" for n, w, r in PAIRS])
def test_reader_reads_every_older_writer(event_type: str, writer: int, reader: int) -> None:
    w = PACKAGED.versions(event_type)[writer - 1]
    r = PACKAGED.versions(event_type)[reader - 1]
    assert (w.version, r.version) == (writer, reader)
    assert check_backward(w.schema, r.schema, seed=writer * 31 + reader) == []


@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES))
def test_generated_records_are_valid_for_their_schema(event_type: str) -> None:
    # The generator must produce data the writer accepts, or the check proves nothing.
    schema = PACKAGED.latest(event_type).schema
    rng = random.Random(event_type)
    for _ in range(20):
        datum = random_datum(schema, rng)
        assert fastavro.validation.validate(datum, fastavro.parse_schema(schema, named_schemas={}),
                                            raise_errors=True)


def test_generator_chooses_every_union_branch() -> None:
    schema = PACKAGED.latest("FailureClassified").schema
    rng = random.Random(1)
    seen = {(d["node"] is None, d["header"]["causation_id"] is None)
            for d in (random_datum(schema, rng) for _ in range(SAMPLES_PER_PAIR))}
    assert seen == {(True, True), (True, False), (False, True), (False, False)}


# --- a synthetic family proves the check can pass and can fail ----------------------------


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text("utf-8"))  # type: ignore[no-any-return]


def write(directory: Path, name: str, version: int, schema: dict[str, Any]) -> None:
    (directory / f"{name}.v{version}.avsc").write_text(json.dumps(schema, indent=2), "utf-8")


def field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [f for f in schema["fields"] if f["name"] == name]
    return found


def header_field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return field(field(schema, "header")["type"], name)


Edit = Callable[[dict[str, Any]], None]


def family(tmp_path: Path, *edits: Edit) -> SchemaRegistry:
    """HeartbeatRecorded v1 (the real file), then v2.. each applying one more edit."""
    v1 = load(SCHEMAS / "HeartbeatRecorded.v1.avsc")
    write(tmp_path, "HeartbeatRecorded", 1, v1)
    schema = v1
    for n, edit in enumerate(edits, start=2):
        schema = json.loads(json.dumps(schema))
        edit(schema)
        write(tmp_path, "HeartbeatRecorded", n, schema)
    registry = SchemaRegistry.from_directory(tmp_path)
    assert [v.version for v in registry.versions("HeartbeatRecorded")] == list(
        range(1, len(edits) + 2))
    return registry


def add(name: str, type_: Any, **default: Any) -> Edit:
    return lambda s: s["fields"].append({"name": name, "type": type_, **default})


def retype(name: str, type_: Any) -> Edit:
    def edit(s: dict[str, Any]) -> None:
        field(s, name)["type"] = type_
    return edit


def test_legal_evolution_passes_transitively(tmp_path: Path) -> None:
    registry = family(
        tmp_path,
        add("rank", ["null", "long"], default=None),
        add("host", "string", default="unknown"),
    )
    assert transitive_problems(registry) == {}


def test_promotion_and_removal_pass(tmp_path: Path) -> None:
    registry = family(tmp_path, retype("step", "double"),
                      lambda s: s["fields"].remove(field(s, "node")))
    assert transitive_problems(registry) == {}


def test_defaults_fill_reader_only_fields(tmp_path: Path) -> None:
    registry = family(tmp_path, add("rank", "long", default=-1),
                      add("tags", {"type": "map", "values": "long"}, default={}))
    v1, _, v3 = registry.versions("HeartbeatRecorded")
    datum = random_datum(v1.schema, random.Random(3))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, v1.parsed, datum)
    buf.seek(0)
    out = fastavro.schemaless_reader(buf, v1.parsed, v3.parsed)
    assert out == {**datum, "rank": -1, "tags": {}}


def drop_null_from_causation_id(schema: dict[str, Any]) -> None:
    causation = header_field(schema, "causation_id")
    del causation["default"]
    causation["type"] = "string"


BREAKING: dict[str, Edit] = {
    "added without a default": add("rank", "long"),
    "long narrowed to int": retype("step", "int"),
    "long changed to string": retype("step", "string"),
    "renamed without an alias": lambda s: field(s, "node").update(name="host"),
    # Only data with causation_id = null breaks this one: the generator must find it.
    "null dropped from a union": drop_null_from_causation_id,
}


@pytest.mark.parametrize("change", sorted(BREAKING))
def test_breaking_changes_are_detected(tmp_path: Path, change: str) -> None:
    registry = family(tmp_path, BREAKING[change])
    problems = transitive_problems(registry)
    assert list(problems) == [("HeartbeatRecorded", 1, 2)], problems


def test_only_the_transitive_check_catches_a_dropped_default(tmp_path: Path) -> None:
    # v2 adds a field with a default; v3 drops that default (and adds another field).
    # Each version reads the one before it, but v3 cannot read v1.
    def drop_default_add_host(s: dict[str, Any]) -> None:
        field(s, "rank").pop("default")
        s["fields"].append({"name": "host", "type": "string", "default": ""})

    registry = family(tmp_path, add("rank", "long", default=0), drop_default_add_host)
    assert set(transitive_problems(registry)) == {("HeartbeatRecorded", 1, 3)}


def test_versions_that_differ_only_in_defaults_are_refused(tmp_path: Path) -> None:
    # Parsing Canonical Form drops defaults, so both would have one fingerprint and
    # a reader could not tell which wrote the bytes.
    def drop_default(s: dict[str, Any]) -> None:
        field(s, "rank").pop("default")

    with pytest.raises(SchemaError, match="same canonical form"):
        family(tmp_path, add("rank", "long", default=0), drop_default)


# --- the codec resolves old bytes into today's classes, then upcasts ------------------------


def old_registry(tmp_path: Path, event_type: str, dropped: str,
                 default: Any = None) -> tuple[SchemaRegistry, dict[str, Any]]:
    """All packaged schemas, but ``event_type``'s real file becomes v2 and a v1 without
    ``dropped`` is synthesised (``dropped`` gets ``default`` in the v2 copy if it has
    none: a temporary copy, never the released file)."""
    for path in SCHEMAS.glob("*.avsc"):
        shutil.copy(path, tmp_path / path.name)
    real = load(SCHEMAS / f"{event_type}.v1.avsc")
    (tmp_path / f"{event_type}.v1.avsc").unlink()
    v2 = json.loads(json.dumps(real))
    field(v2, dropped).setdefault("default", default)
    write(tmp_path, event_type, 2, v2)
    v1 = json.loads(json.dumps(real))
    v1["fields"] = [f for f in v1["fields"] if f["name"] != dropped]
    write(tmp_path, event_type, 1, v1)
    return SchemaRegistry.from_directory(tmp_path), v1


def v1_bytes(registry: SchemaRegistry, event_type: str, record: dict[str, Any]) -> bytes:
    """Bytes an old writer produced: plain fastavro with the v1 schema."""
    v1 = registry.versions(event_type)[0]
    buf = io.BytesIO()
    buf.write(MAGIC + v1.fingerprint)
    fastavro.schemaless_writer(buf, v1.parsed, record)
    return buf.getvalue()


HEADER = {"event_id": "e1", "run_id": "r1", "generation": 2, "occurred_at": 1000,
          "producer": "worker/r1/w0", "causation_id": None, "schema_version": 1}


SUBMITTED = {"header": HEADER, "spec_digest": "sha256:s", "spec_json": "{}",
             "principal": "alice", "world_size": 2}


def test_old_bytes_decode_into_the_newest_shape_with_defaults(tmp_path: Path) -> None:
    registry, _ = old_registry(tmp_path, "RunSubmitted", "dataset_id")
    assert check_backward(registry.versions("RunSubmitted")[0].schema,
                          registry.latest("RunSubmitted").schema) == []
    codec = Codec(registry)
    data = v1_bytes(registry, "RunSubmitted", SUBMITTED)
    decoded = codec.decode(data)
    assert decoded.writer_version == 1
    assert decoded.event == RunSubmitted(
        header=decoded.event.header, spec_digest="sha256:s", spec_json="{}",
        principal="alice", world_size=2, dataset_id=None)
    assert decoded.event.header.schema_version == 1
    # Today's writer uses the newest version.
    new = codec.encode(decoded.event)
    assert new[2:10] == registry.latest("RunSubmitted").fingerprint
    assert codec.decode(new).writer_version == 2


def test_a_default_added_only_in_the_synthetic_copy_is_filled(tmp_path: Path) -> None:
    registry, _ = old_registry(tmp_path, "AgentHeartbeatRecorded", "busy_slots", default=0)
    codec = Codec(registry)
    data = v1_bytes(registry, "AgentHeartbeatRecorded", {
        "header": HEADER, "node": "node-a", "slots": 2, "domain": "rack-1",
        "address": "127.0.0.1"})
    event = codec.decode(data).event
    assert isinstance(event, AgentHeartbeatRecorded) and event.busy_slots == 0


def test_upcasters_apply_to_old_writers_only(tmp_path: Path) -> None:
    registry, _ = old_registry(tmp_path, "RunSubmitted", "dataset_id")
    upcasters = Upcasters()
    # v1 writers had one dataset per deployment: the meaning of "no dataset_id".
    upcasters.register("RunSubmitted", 1,
                       lambda r: {**r, "dataset_id": r["dataset_id"] or "ds-legacy"})
    codec = Codec(registry, upcasters)
    old = v1_bytes(registry, "RunSubmitted", SUBMITTED)
    event = codec.decode(old).event
    assert isinstance(event, RunSubmitted) and event.dataset_id == "ds-legacy"
    current = RunSubmitted(header=event.header, spec_digest="sha256:t", spec_json="{}",
                           principal="bob", world_size=1, dataset_id=None)
    again = codec.decode(codec.encode(current))
    assert again.writer_version == 2
    assert again.event == replace(current, header=replace(current.header, schema_version=2))
    assert isinstance(again.event, RunSubmitted) and again.event.dataset_id is None


def test_upcasters_run_in_version_order(tmp_path: Path) -> None:
    registry, _ = old_registry(tmp_path, "RunSubmitted", "dataset_id")
    calls: list[int] = []

    def step(version: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def fn(record: dict[str, Any]) -> dict[str, Any]:
            calls.append(version)
            return {**record, "spec_json": f"{record['spec_json']}>{version}"}
        return fn

    upcasters = Upcasters()
    upcasters.register("RunSubmitted", 2, step(2))  # registered out of order
    upcasters.register("RunSubmitted", 1, step(1))
    codec = Codec(registry, upcasters)
    old = v1_bytes(registry, "RunSubmitted", SUBMITTED)
    event = codec.decode(old).event
    assert calls == [1, 2]
    assert isinstance(event, RunSubmitted) and event.spec_json == "{}>1>2"
    calls.clear()
    codec.decode(codec.encode(event))
    assert calls == [2]
