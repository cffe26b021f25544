"""``runledger query`` over a projection file: tables, JSON, PROV and OpenLineage."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb
import jsonschema
import pytest
from prov.model import ProvDocument
from typer.testing import CliRunner

from runledger.cli import app
from tests.queries.timeline import Timeline, crash_and_recover, project

runner = CliRunner()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "p.duckdb"
    con = duckdb.connect(str(path))
    tl = Timeline()
    crash_and_recover(tl)
    project(con, tl)
    con.close()
    return path


def cli(*args: str) -> tuple[int, str]:
    """The exit code and stdout (the result); on failure, the error message from stderr."""
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout if res.exit_code == 0 else res.output


def test_ettr_table_shows_parts_and_the_ratio(db: Path) -> None:
    code, out = cli("query", "ettr", "run-a", "--db", str(db))
    assert code == 0, out
    assert "productive" in out and "lost_work" in out
    assert "ETTR 0.509" in out and "parts sum to 5.300 s of 5.300 s allocated" in out


def test_json_rows(db: Path) -> None:
    code, out = cli("query", "incidents", "run-a", "--db", str(db), "--json")
    assert code == 0, out
    doc = json.loads(out)
    (row,) = doc["rows"]
    assert row["rpo_steps"] == 5 and row["fault_at"].startswith("1970-01-01T00:")
    # A file no projector holds, and no snapshot beside it: how far behind is unknown.
    assert doc["projection"] == {"path": str(db), "source": "live", "projector_running": False,
                                 "taken_at": None, "age_s": None, "behind": None}


def test_recovery_folds_per_domain_in_table_and_json(db: Path) -> None:
    code, out = cli("query", "recovery", "run-a", "--db", str(db), "--json")
    assert code == 0, out
    rows = json.loads(out)["rows"]
    last = {r["domain"]: r for r in rows}
    # A lone checkpoint root: one tier protecting a host loss, not a wider one.
    assert (last["host"]["recoverable_step"], last["cluster"]["recoverable_step"]) == (30, None)
    assert last["process"]["incidents"] == 1 and last["process"]["rto_s"] == 0.53
    assert rows[0]["at"].startswith("1970-01-01T00:")
    code, out = cli("query", "recovery", "run-a", "--db", str(db))
    assert code == 0 and "recoverable_step" in out and "cluster" in out


def test_provenance_exports(db: Path) -> None:
    code, out = cli("query", "provenance", "run-a", "--db", str(db))
    assert code == 0, out
    assert "checkpoint step 30 (generation 2)" in out and "positions [0, 240)" in out
    code, out = cli("query", "provenance", "run-a", "--db", str(db), "--format", "prov")
    assert code == 0, out
    doc = json.loads(out)
    ck = "runledger:sha256:g2s30"
    assert doc["entity"][ck]["runledger:positionFrom"] == 160
    assert {"prov:generatedEntity": ck, "prov:usedEntity": "runledger:sha256:g1s20"} in \
        doc["wasDerivedFrom"].values()
    code, out = cli("query", "provenance", "run-a", "--db", str(db), "--format", "openlineage")
    assert code == 0, out
    ev = json.loads(out)
    assert ev["eventType"] == "COMPLETE" and ev["job"] == {"namespace": "runledger",
                                                           "name": "run-a"}
    facet = ev["inputs"][0]["facets"]["runledger_consumption"]
    assert facet["positions"] == [0, 240] and len(facet["segments"]) == 3
    again = cli("query", "provenance", "run-a", "--db", str(db), "--format", "openlineage")[1]
    assert again == out  # no clock, no random: the same document every time


def test_bad_input_names_what_exists(db: Path, tmp_path: Path) -> None:
    code, out = cli("query", "etr", "run-a", "--db", str(db))
    assert code == 1 and "unknown query 'etr'; queries: alerts, audit" in out
    code, out = cli("query", "ettr", "nope", "--db", str(db))
    assert code == 1 and "unknown run 'nope'" in out and "run-a" in out
    code, out = cli("query", "ettr", "run-a", "--db", str(tmp_path / "missing.duckdb"))
    assert code == 1 and "no projection at" in out
    code, out = cli("query", "audit", "run-a", "--db", str(db), "--format", "prov")
    assert code == 1 and "provenance query only" in out


def _prov(db: Path) -> ProvDocument:
    code, out = cli("query", "provenance", "run-a", "--db", str(db), "--format", "prov")
    assert code == 0, out
    return ProvDocument.deserialize(content=out, format="json")


def test_prov_export_loads_in_the_prov_library_with_ranges_and_times(db: Path) -> None:
    doc = _prov(db)
    ns = doc.get_registered_namespaces()
    (rl,) = [n for n in ns if n.prefix == "runledger"]
    (ck,) = doc.get_record(rl["sha256:g2s30"])
    attrs = {str(k): v for k, v in ck.attributes}
    assert attrs["runledger:positionFrom"] == 160 and attrs["runledger:positionTo"] == 240
    # an object-valued attribute survives as one typed literal, not as loose values
    counts = [v for k, v in ck.attributes if str(k) == "runledger:sourceCounts"]
    assert len(counts) == 1 and json.loads(counts[0].value) == {"code": 90, "web": 150}
    assert str(dict(ck.attributes)[ck.bundle.valid_qualified_name("prov:type")]) \
        == "runledger:Checkpoint"
    (seg,) = doc.get_record(rl["run-a/g2/steps-20-30"])
    assert seg.get_startTime() == dt.datetime(1970, 1, 1, 0, 16, 44, 250000, tzinfo=dt.UTC)
    assert seg.get_endTime() == dt.datetime(1970, 1, 1, 0, 16, 45, 700000, tzinfo=dt.UTC)
    # the first segment of a generation began when the generation started
    (first,) = doc.get_record(rl["run-a/g1/steps-0-10"])
    assert first.get_startTime() is not None
    assert first.get_startTime() < first.get_endTime()
    # round trip: what prov writes back is the document we wrote, relation for relation
    again = ProvDocument.deserialize(content=doc.serialize(format="json"), format="json")
    assert again == doc and len(doc.get_records()) == len(again.get_records()) > 10


SCHEMA = Path(__file__).parents[2] / "queries" / "openlineage_runevent.schema.json"


def test_openlineage_export_passes_the_run_event_schema(db: Path) -> None:
    code, out = cli("query", "provenance", "run-a", "--db", str(db), "--format", "openlineage")
    assert code == 0, out
    event = json.loads(out)
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    validator.validate(event)
    assert dt.datetime.fromisoformat(event["eventTime"]) == dt.datetime(
        1970, 1, 1, 0, 16, 45, 700000, tzinfo=dt.UTC)
    # the checker does enforce the offset: a naive time, as exported before, is refused
    with pytest.raises(jsonschema.ValidationError, match="date-time"):
        validator.validate(event | {"eventTime": "1970-01-01T00:16:45.700000"})
