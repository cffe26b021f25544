"""The live view's answers, from a summary and a projection of the same hand-written run.

No broker: the feeds are given their read as a function and stepped with
``once``; the projection is a real DuckDB file the projector's own mapping wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from events.status import RunStatusChanged
from queries.ettr import ettr
from queries.source import open_projection
from runledger.errors import RunledgerError
from runledger.ui.api import LiveView, NotFound, projection_state
from runledger.ui.feeds import Feed, Projection
from tests.runledger.ui.fixtures import recovered_run


def no_logs(run: str, gen: int | None, rank: str | None, tail: int) -> dict[str, Any]:
    return {"run_id": run, "generation": gen, "rank": rank, "tail": tail}


@pytest.fixture
def world(tmp_path: Path) -> tuple[LiveView, RunStatusChanged, Path]:
    db = tmp_path / "projection.duckdb"
    _, summary = recovered_run(db)
    status = Feed("status", lambda: {summary.run_id: summary}, 60.0)
    nodes = Feed("nodes", lambda: [{"node": "node-a", "state": "ready"}], 60.0)
    status.once()
    nodes.once()
    return LiveView(status, nodes, Projection(db), no_logs), summary, db


def test_the_runs_table_joins_the_summary_with_the_projection(
        world: tuple[LiveView, RunStatusChanged, Path]) -> None:
    view, summary, db = world
    doc = view.runs()
    (row,) = doc["runs"]
    assert row["run_id"] == summary.run_id and row["state"] == summary.state
    con, _ = open_projection(db)
    try:
        expected = ettr(con, summary.run_id).ratio
        top = con.execute("SELECT max(step) FROM steps").fetchone()
    finally:
        con.close()
    assert expected is not None and row["ettr"] == pytest.approx(expected, abs=1e-4)
    # The summary is at step 20; the projection has seen the run reach 30.
    assert summary.step == 20 and top is not None and row["step"] == top[0] == 30
    assert row["step_source"] == "projection"
    assert doc["health"]["status"]["state"] == "ok"
    assert doc["health"]["projection"]["state"] == "stopped"  # no projector holds the file


def test_a_run_page_has_members_failures_with_output_and_ettr_parts(
        world: tuple[LiveView, RunStatusChanged, Path]) -> None:
    view, summary, _ = world
    page = view.run(summary.run_id)
    assert not isinstance(page, NotFound)
    assert [m["logical_id"] for m in page["members"]] == ["r0", "r1"]
    (failure,) = page["failures"]
    assert failure["signature"] == "crash:r1:signal 9"
    assert "Segmentation fault" in failure["stderr_tail"]
    assert failure["log_href"] == f"/runs/{summary.run_id}/logs?generation=1&rank=r1"
    parts = page["ettr"]["parts"]
    assert sum(parts.values()) == pytest.approx(page["ettr"]["allocated_s"], abs=0.01)
    assert parts["productive"] > 0 and parts["detection"] > 0


def test_the_sections_are_the_reports_and_unchanged_until_a_new_snapshot(
        world: tuple[LiveView, RunStatusChanged, Path]) -> None:
    view, summary, db = world
    sec = view.run_sections(summary.run_id, None)
    assert not isinstance(sec, NotFound) and sec["html"] is not None
    for section in ('id="timeline"', 'id="curves"', 'id="ettr"', 'id="incidents"',
                    'id="provenance"'):
        assert section in sec["html"]
    assert 'id="audit"' not in sec["html"]  # the postmortem's trail, not a live view's
    again = view.run_sections(summary.run_id, sec["stamp"])
    assert again == {"unchanged": True, "stamp": sec["stamp"]}
    # A new step lands in the projection (here the live file, as `project --once` leaves it).
    view.projection.close()
    con = duckdb.connect(str(db))
    try:
        con.execute("INSERT INTO steps SELECT * REPLACE (step + 1 AS step, ofs + 1000 AS ofs)"
                    " FROM steps ORDER BY step DESC LIMIT 1")
    finally:
        con.close()
    moved = view.run_sections(summary.run_id, sec["stamp"])
    assert not isinstance(moved, NotFound) and moved["unchanged"] is False
    assert moved["stamp"] != sec["stamp"] and moved["html"] != sec["html"]
    page = view.run(summary.run_id)
    assert not isinstance(page, NotFound) and page["latest"]["step"] == 31


def test_an_unknown_run_is_not_found_and_says_what_to_do(
        world: tuple[LiveView, RunStatusChanged, Path]) -> None:
    view, _, _ = world
    missing = view.run("no-such-run")
    assert isinstance(missing, NotFound) and "runledger runs" in missing.message
    gone = view.run_sections("no-such-run", None)
    assert isinstance(gone, NotFound) and "projection" in gone.message


def test_a_missing_projection_and_a_failing_broker_are_states_not_errors(
        tmp_path: Path) -> None:
    def down() -> dict[str, RunStatusChanged]:
        raise RunledgerError("no Kafka broker answered at 127.0.0.1:1")

    status: Feed[dict[str, RunStatusChanged]] = Feed("status", down, 60.0)
    status.once()
    nodes: Feed[list[dict[str, Any]]] = Feed("nodes", list, 60.0)
    view = LiveView(status, nodes, Projection(tmp_path / "none.duckdb"), no_logs)
    doc = view.runs()
    assert doc["runs"] == []
    assert doc["health"]["status"]["state"] == "unreachable"
    assert "no Kafka broker answered" in doc["health"]["status"]["error"]
    assert doc["health"]["projection"]["state"] == "unreachable"
    assert "runledger project" in doc["health"]["projection"]["error"]


def test_a_projection_is_behind_only_when_its_snapshot_is_old_or_nobody_projects() -> None:
    assert projection_state(2.0, True) == "ok"
    assert projection_state(120.0, True) == "behind"
    assert projection_state(None, True) == "behind"
    assert projection_state(2.0, False) == "stopped"
