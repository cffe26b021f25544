"""A node lost mid-run, then an elastic grow, through the queries: `incidents` names the
lost node and its consequences and starts detection at its last report, `recovery`
has a host row naming it, and ETTR names the grow's stop, rendezvous and restore
(worked out by hand from the times below)."""

from __future__ import annotations

import json

import duckdb
import pytest

from events.topics import RUNS
from queries.ettr import ettr
from queries.recovery import recovery
from queries.report import report
from queries.runner import run_query
from tests.queries.ettr_oracle import ettr_parts
from tests.queries.timeline import Timeline, project


def lost_then_grow(tl: Timeline) -> None:
    """Steps 1-10 (a checkpoint at 8); node-b last heard 200 ms before step 10 ended;
    the survivor exits 8 s after it; a shrink from 8; steps 9-12 (a checkpoint at 12);
    a grow from 12; steps 13-14."""
    tl.submit()
    tl.admit()
    tl.start(1)
    tl.advance(1_000)  # launch: idle
    for s in range(1, 11):
        tl.step(1, s)
        if s == 8:
            tl.checkpoint(1, s, stall=0)
    seen = tl.ev.now - 200
    tl.advance(8_000)  # the survivor's collective times out
    tl.add(tl.ev.exited(1, "r0", exit_code=1, signal=None, node="node-a"))
    tl.lose(1, "node-b", last_seen_at=seen)
    tl.fail_lost(1, "node-b")
    tl.advance(2_000)  # recovery: undecided, backoff, relaunch
    tl.start(2, resume=8, reason="shrink")
    tl.advance(1_000)
    for s in range(9, 13):
        tl.step(2, s)
    tl.checkpoint(2, 12, stall=0)
    tl.advance(300)  # the grow's decision: resize_stop
    tl.start(3, resume=12, reason="grow")
    tl.advance(4_000)  # old workers stopped, new ones launched: resize_rendezvous
    tl.confirm(3)
    tl.advance(2_500)  # the restore: resize_restore
    for s in range(13, 15):
        tl.step(3, s)
    tl.finish(3)


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect()
    tl = Timeline()
    lost_then_grow(tl)
    project(c, tl)
    c.execute("SET VARIABLE oracle = ?", [json.dumps(ettr_parts(
        [r.event for r in tl.records() if r.topic == RUNS]))])
    return c


def test_incidents_name_the_lost_node_and_the_survivors_exit_as_a_consequence(con) -> None:
    (inc,) = run_query(con, "incidents", "run-a").records()
    assert (inc["failure_class"], inc["signature"], inc["node"], inc["lost_node"]) == (
        "infrastructure", "infrastructure:node_lost", "node-b", "node-b")
    assert json.loads(inc["consequences"]) == ["r0 on node-a exited with 1"]
    # Detection from the last step (node-b was heard from until just before it ended,
    # and a step needs every rank), not from the survivor's exit 8 s later.
    assert inc["detection_s"] == pytest.approx(8.0)
    assert (inc["last_step"], inc["resumed_from"], inc["rpo_steps"]) == (10, 8, 2)


def test_recovery_has_a_host_row_naming_the_lost_node(con) -> None:
    rows = [r for r in recovery(con, "run-a").records()
            if r["event_type"] == "FailureClassified"]
    assert [(r["domain"], r["node"], r["incidents"]) for r in rows] == [("host", "node-b", 1)]


def test_ettr_names_detection_and_the_grows_parts_and_closes(con) -> None:
    e = ettr(con, "run-a")
    p = e.parts_s
    assert p["detection"] == pytest.approx(8.0)
    assert p["recovery"] == pytest.approx(2.0 + 1.0)
    assert (p["resize_stop"], p["resize_rendezvous"], p["resize_restore"]) == pytest.approx(
        (0.3, 4.0, 2.5))
    assert p["other"] == pytest.approx(0.0)
    assert e.unexplained_s == pytest.approx(0.0, abs=1e-3)
    oracle = json.loads(con.execute("SELECT getvariable('oracle')").fetchone()[0])
    for part, seconds in p.items():
        assert seconds == pytest.approx(oracle[part], abs=1e-3), part


def test_the_report_names_the_lost_node_and_the_grows_parts(con) -> None:
    page = report(con, "run-a")
    incidents = page[page.index('id="incidents"'):page.index('id="sdc"')]
    assert "node-b" in incidents and "infrastructure:node_lost" in incidents
    assert "r0 on node-a exited with 1" in incidents  # as a consequence, in its own column
    ettr_part = page[page.index('id="ettr"'):page.index('id="incidents"')]
    for part in ("resize_stop", "resize_rendezvous", "resize_restore"):
        assert f'data-part="{part}"' in ettr_part
