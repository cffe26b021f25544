"""``runledger query`` over a projection file: tables, JSON, PROV and OpenLineage."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import duckdb
import jsonschema
import pytest
from prov.model import ProvDocument
from typer.testing import CliRunner

from dataplane.catalog import Catalog
from events.model import RunSubmitted
from queries import consumed, lineage
from runledger.cli import app
from tests.dataplane.corpus import write_dataset
from tests.queries.lineage_check import end_as, own_loader, prov_document, run_event
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


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """The exit code and stdout (the result); on failure, the error message from stderr."""
    res = runner.invoke(app, list(args), env=env)
    return res.exit_code, res.stdout if res.exit_code == 0 else res.output


def own_job_db(tmp_path: Path, dataset_id: str = "sha256:d", outcome: str = "failed") -> Path:
    """A projection of the README's own job (no data cursor), submitted with
    ``dataset_id``, that ended ``outcome``."""
    path = tmp_path / "own.duckdb"
    tl = Timeline()
    crash_and_recover(tl)
    own_loader(tl)
    end_as(tl, outcome)
    first = tl.events[0]
    assert isinstance(first, RunSubmitted)
    tl.events[0] = dataclasses.replace(first, dataset_id=dataset_id)
    con = duckdb.connect(str(path))
    project(con, tl)
    con.close()
    return path


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
    (data,) = ev["inputs"]
    assert (data["namespace"], data["name"]) == ("runledger", "sha256:d")
    facet = data["inputFacets"]["runledger_consumption"]
    assert facet["positions"] == {"known": True, "from": 0, "to": 240, "segments": 3,
                                  "segments_recorded": 3}
    assert [s["positions"]["from"] for s in facet["segments"]] == [160, 80, 0]
    assert facet["recordedBy"] == "cursor"
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
    return prov_document(out)  # a warning from prov fails the test


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
    run_event(event)  # and openlineage-python's own classes read it back exactly
    # the run ended (RunFinished) just after its last checkpoint: the event is its end
    assert dt.datetime.fromisoformat(event["eventTime"]) == dt.datetime(
        1970, 1, 1, 0, 16, 45, 800000, tzinfo=dt.UTC)
    # the checker does enforce the offset: a naive time, as exported before, is refused
    with pytest.raises(jsonschema.ValidationError, match="date-time"):
        validator.validate(event | {"eventTime": "1970-01-01T00:16:45.700000"})


def test_an_own_job_says_what_is_not_recorded_and_exports_as_failed(tmp_path: Path) -> None:
    db = str(own_job_db(tmp_path))
    code, out = cli("query", "provenance", "run-a", "--db", db)
    assert code == 0, out
    assert "None" not in out and "reachable" not in out  # "sha256:d" is no manifest id
    assert "dataset   sha256:d (as submitted: the job loads its own data)" in out
    assert f"consumed  positions {consumed.NO_POSITIONS} (3 segment(s))" in out
    assert "position_from" not in out and "step_from" in out  # no column of unknowns
    code, out = cli("query", "provenance", "run-a", "--db", db, "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["run"] == {"outcome": "failed", "ended_at": "1970-01-01T00:16:45.800000",
                          "reason": "worker_crash: restart budget spent"}
    assert doc["consumed"]["dataset"] == {"known": True, "id": "sha256:d",
                                          "recorded_by": "run_spec"}
    assert doc["consumed"]["positions"] == {"known": False, "reason": consumed.NO_POSITIONS}
    assert doc["catalog"]["known"] is False and "not a dataset manifest id" in \
        doc["catalog"]["reason"]
    code, out = cli("query", "provenance", "run-a", "--db", db, "--format", "openlineage")
    assert code == 0, out
    event = json.loads(out)
    run_event(event)
    assert event["eventType"] == "FAIL" and len(event["inputs"]) == 1
    code, out = cli("query", "provenance", "run-a", "--db", db, "--format", "prov")
    assert code == 0, out
    prov = prov_document(out)
    data_uses = [dict((str(k), v) for k, v in r.attributes) for r in prov.get_records()
                 if any(str(v) == "runledger:sha256:d" for _, v in r.attributes)]
    assert len(data_uses) == 3
    assert all(u["runledger:positionsRecorded"] is False and "runledger:positionTo" not in u
               for u in data_uses)


def _catalog_with_a_dataset(tmp_path: Path) -> tuple[str, str]:
    catalog = str(tmp_path / "catalog")
    manifest = write_dataset(tmp_path / "data", {"web": [[40, 30], [50]]})
    return catalog, Catalog(catalog).put(manifest)


def test_the_catalog_is_blamed_only_when_it_is_unreachable(tmp_path: Path) -> None:
    catalog, ds = _catalog_with_a_dataset(tmp_path)
    db = str(own_job_db(tmp_path, dataset_id=ds, outcome="succeeded"))
    args = ("query", "provenance", "run-a", "--db", db)
    # The catalog the dataset was built in: its tokenizer, in every format.
    code, out = cli(*args, env={"RUNLEDGER_DATASETS": catalog})
    assert code == 0, out
    manifest = Catalog(catalog).get(ds)
    assert f"tokenizer test 1 ({manifest.tokenizer.vocab_digest})" in out
    code, out = cli(*args, "--format", "openlineage", env={"RUNLEDGER_DATASETS": catalog})
    event = json.loads(out)
    run_event(event)
    facts = event["inputs"][0]["facets"]["runledger_dataset"]
    assert facts["sources"] == ["web"] and event["inputs"][0]["name"] == ds
    assert event["eventType"] == "COMPLETE"
    code, out = cli(*args, "--format", "prov", env={"RUNLEDGER_DATASETS": catalog})
    assert code == 0, out
    prov_document(out)
    assert json.loads(out)["entity"][f"runledger:{ds}"]["runledger:recordedBy"] == "run_spec"
    # Another catalog, which does not hold it: said so, and nothing is unreachable.
    empty = str(tmp_path / "other")
    code, out = cli(*args, env={"RUNLEDGER_DATASETS": empty})
    assert code == 0, out
    assert f"tokenizer not known here: unknown dataset manifest {ds}" in out
    assert "reachable" not in out
    # A catalog that cannot be read (its directory is a file): that one is blamed.
    blocked = tmp_path / "blocked"
    blocked.write_text("not a directory")
    code, out = cli(*args, env={"RUNLEDGER_DATASETS": str(blocked / "catalog")})
    assert code == 0, out
    assert f"the catalog {blocked / 'catalog'} is not reachable" in out


def test_the_strict_readers_refuse_what_the_exports_must_not_contain(db: Path) -> None:
    """The checks above can fail: a null, an unknown event type and a standard facet
    without its required field are refused."""
    code, out = cli("query", "provenance", "run-a", "--db", str(db), "--format", "prov")
    assert code == 0, out
    doc = json.loads(out)
    prov_document(out)  # as exported: no warning
    doc["entity"]["runledger:sha256:g2s30"]["runledger:positionTo"] = None
    with pytest.raises(Warning, match="null"):
        prov_document(json.dumps(doc))
    code, out = cli("query", "provenance", "run-a", "--db", str(db), "--format", "openlineage")
    assert code == 0, out
    event = json.loads(out)
    run_event(event)  # as exported: read back exactly
    with pytest.raises(ValueError):
        run_event(event | {"eventType": "DONE"})
    nulled = json.loads(out)
    nulled["outputs"][0]["facets"]["runledger_checkpoint"]["parent"] = None
    with pytest.raises(AssertionError, match="write back"):
        run_event(nulled)
    failed = json.loads(out)
    failed["run"]["facets"]["errorMessage"] = {
        "_producer": failed["producer"], "_schemaURL": lineage.ERROR_MESSAGE_SCHEMA,
        "message": "boom"}
    with pytest.raises(TypeError):
        run_event(failed)


def test_a_multi_line_cell_keeps_the_table_one_row_per_record() -> None:
    """#34: a traceback in stderr_tail broke the text incidents table over many lines."""
    from queries.render import table
    from queries.runner import Result

    tb = ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
          "    step()\nRuntimeError: CUDA error: an illegal memory access\n")
    text = table(Result("incidents", "run-a", ["generation", "stderr_tail"],
                        [(1, tb), (2, "one line\t tabbed"), (3, None)]))
    rows = text.splitlines()
    assert len(rows) == 5  # header, rule, a line per record
    assert rows[2].endswith("RuntimeError: CUDA error: an illegal memo… (last of 4 lines)")
    assert len(rows[2].split(None, 1)[1]) == 60  # the cell's limit, its "last of" kept
    assert rows[3].split(None, 1)[1] == "one line  tabbed" and rows[4].split()[1] == "-"
