"""Provenance of a job that loads its own data, and of runs however they ended.

The logs are what the controller writes: a checkpoint proposed without a data
cursor (the README's own job: the session knows the dataset id it was given,
not positions) goes through ``controller.checkpoints.commit_events``, the
controller's own mapping, and is projected by the projector's (no broker: the
SQL and its reading are the subject).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import duckdb
import pytest

from events.model import RunSubmitted
from queries import consumed, lineage, render
from queries.runner import run_query
from tests.queries.lineage_check import end_as, own_loader, prov_document, run_event
from tests.queries.timeline import Timeline, crash_and_recover, project


def _chain(tl: Timeline, **params: Any) -> list[dict[str, Any]]:
    con = duckdb.connect()
    project(con, tl)
    rows = run_query(con, "provenance", tl.run_id, **params).records()
    con.close()
    return [{k: render.plain(v) for k, v in r.items()} for r in rows]


def _nulls(value: Any, at: str = "") -> list[str]:
    if value is None:
        return [at]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nulls(v, f"{at}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nulls(v, f"{at}[{i}]")]
    return []


def test_an_own_loader_chain_has_the_submitted_dataset_and_no_positions() -> None:
    tl = Timeline()
    crash_and_recover(tl)
    own_loader(tl)
    chain = _chain(tl)
    assert [(c["generation"], c["step"], c["step_from"]) for c in chain] == [
        (2, 30, 20), (1, 20, 10), (1, 10, 0)]
    assert {(c["dataset_id"], c["dataset_from"], c["positions_recorded"]) for c in chain} == {
        ("sha256:d", "run_spec", False)}
    # not recorded, so not guessed: the root's range does not start at 0 either
    assert all(c[k] is None for c in chain for k in consumed.CURSOR_COLUMNS)
    head = chain[0]
    assert consumed.dataset(head) == {"known": True, "id": "sha256:d",
                                      "recorded_by": "run_spec"}
    assert consumed.positions(chain) == consumed.unknown(consumed.NO_POSITIONS)
    assert consumed.source_counts(head) == consumed.unknown(consumed.NO_COUNTS)
    catalog = consumed.unknown("not known here: no catalog in this test")
    text = "\n".join(consumed.lines(chain, catalog))
    assert "None" not in text and "[0, " not in text
    assert "dataset   sha256:d (as submitted: the job loads its own data)" in text
    assert f"positions {consumed.NO_POSITIONS} (3 segment(s))" in text
    doc = consumed.document(tl.run_id, chain, catalog)
    assert _nulls(doc) == [".chain[2].parent_digest"]  # the root's: it has no parent
    assert all(not c["positions_recorded"] and "position_to" not in c for c in doc["chain"])


def test_the_data_plane_run_keeps_its_cursor_and_its_ranges() -> None:
    tl = Timeline()
    crash_and_recover(tl)
    chain = _chain(tl)
    assert {(c["dataset_from"], c["positions_recorded"]) for c in chain} == {("cursor", True)}
    assert consumed.positions(chain) == {"known": True, "from": 0, "to": 240, "segments": 3,
                                         "segments_recorded": 3}
    assert consumed.source_counts(chain[0]) == {"known": True,
                                                "counts": {"code": 90, "web": 150}}
    doc = consumed.document(tl.run_id, chain, {"known": True, "tokenizer": "t"})
    assert _nulls(doc) == [".chain[2].parent_digest"]
    assert [c["position_from"] for c in doc["chain"]] == [160, 80, 0]


def test_a_link_whose_parent_has_no_cursor_has_no_range_but_the_head_knows_the_total() -> None:
    tl = Timeline()
    crash_and_recover(tl)
    own_loader(tl, keep_cursor_of=(20, 30))  # the checkpoint of step 10 had none
    chain = _chain(tl)
    assert [(c["position_from"], c["position_to"]) for c in chain] == [
        (160, 240), (None, 160), (None, None)]
    assert [consumed.segment_positions(c)["known"] for c in chain] == [True, False, False]
    assert "parent checkpoint has no data cursor" in consumed.segment_positions(
        chain[1])["reason"]
    assert consumed.positions(chain) == {"known": True, "from": 0, "to": 240, "segments": 3,
                                         "segments_recorded": 2}


def test_a_run_submitted_without_a_dataset_says_so_everywhere() -> None:
    tl = Timeline()
    crash_and_recover(tl)
    own_loader(tl)
    first = tl.events[0]
    assert isinstance(first, RunSubmitted)
    tl.events[0] = dataclasses.replace(first, dataset_id=None)
    chain = _chain(tl)
    assert {(c["dataset_id"], c["dataset_from"]) for c in chain} == {(None, None)}
    assert consumed.dataset(chain[0]) == consumed.unknown(consumed.NO_DATASET)
    text = "\n".join(consumed.lines(chain, consumed.unknown(consumed.NO_DATASET)))
    assert f"dataset   {consumed.NO_DATASET}" in text and "None" not in text
    event = lineage.openlineage(tl.run_id, chain)
    assert event["inputs"] == []
    run_event(event)
    doc = lineage.prov(tl.run_id, chain)
    assert [e["prov:type"]["$"] for e in doc["entity"].values()] == ["runledger:Checkpoint"] * 3
    assert all(k.endswith("/parent") for k in doc["used"]) and len(doc["used"]) == 2
    assert len(prov_document(json.dumps(doc)).get_records()) == 3 + 3 + 1 + 2 + 3 + 2 + 3


@pytest.mark.parametrize(("outcome", "event_type"), [
    ("succeeded", "COMPLETE"), ("failed", "FAIL"), ("cancelled", "ABORT"),
    ("unfinished", "RUNNING")])
def test_the_openlineage_event_is_the_runs_outcome(outcome: str, event_type: str) -> None:
    tl = Timeline()
    crash_and_recover(tl)
    own_loader(tl)
    end_as(tl, outcome)
    chain = _chain(tl)
    assert {c["run_outcome"] for c in chain} == {outcome}
    event = lineage.openlineage(tl.run_id, chain)
    run_event(event)  # openlineage-python reads it back exactly
    assert event["eventType"] == event_type
    # the run's end when it ended, else the checkpoint's commit
    assert event["eventTime"] == ("1970-01-01T00:16:45.700000+00:00" if outcome == "unfinished"
                                  else "1970-01-01T00:16:45.800000+00:00")
    facets = event["run"]["facets"]
    assert facets["runledger_run"]["outcome"] == outcome
    assert ("errorMessage" in facets) == (outcome == "failed")
    if outcome == "failed":
        assert facets["errorMessage"]["message"] == "worker_crash: restart budget spent"
    (data,) = event["inputs"]
    assert (data["namespace"], data["name"]) == ("runledger", "sha256:d")
    use = data["inputFacets"]["runledger_consumption"]
    assert use["positions"] == consumed.unknown(consumed.NO_POSITIONS)
    assert use["recordedBy"] == "run_spec"
    prov = prov_document(json.dumps(lineage.prov(tl.run_id, chain)))
    agent = {str(k): v for r in prov.get_records() if str(r.identifier).endswith("run/run-a")
             for k, v in r.attributes}
    assert agent["runledger:outcome"] == outcome
