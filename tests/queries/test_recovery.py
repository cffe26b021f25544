"""`runledger query recovery`: RPO per failure domain over time and RTO per domain, from a
hand-timed projection with two storage tiers (no broker: the fold and the SQL are the
subject), and the report's section of it."""

from __future__ import annotations

import json

import duckdb
import pytest

from events.state import Checkpoint
from queries.recovery import latest, recovery, targets
from queries.report import report
from queries.runner import run_query
from tests.queries.test_report import parse
from tests.queries.timeline import Timeline, project

TIERS = [{"name": "local", "root": "/nvme/ck", "protects": ["process"]},
         {"name": "remote", "root": "s3://b/ck", "protects": ["process", "host"]}]
SPEC = {"checkpoint": {"tiers": TIERS, "rpo": {"process": 5, "host": 12}}}


def last_commit(tl: Timeline) -> Checkpoint:
    c = tl.events[-2]  # checkpoint() ends with the commit and its cursor
    return Checkpoint(c.step, c.manifest_path, c.manifest_digest, 1, 0)  # type: ignore[attr-defined]


def two_tiers(tl: Timeline) -> None:
    """Steps 1-24 (100 ms each), commits at 10 and 20, the remote copy of 20 late;
    a node lost after step 24 (infrastructure), restart from 20, steps 21-22."""
    tl.add(tl.ev.submitted(spec_digest="sha256:s", spec_json=json.dumps(SPEC), world_size=2,
                           dataset_id="sha256:d"))
    tl.admit()
    tl.start(1)
    for s in range(1, 25):
        tl.step(1, s, wait=0)
        if s in (10, 20):
            tl.checkpoint(1, s, stall=0)
            if s == 10:
                tl.add(tl.ev.replicated(1, last_commit(tl), tier="remote", protects="host"))
            else:
                twenty = last_commit(tl)
    tl.add(tl.ev.replicated(1, twenty, tier="remote", protects="host"))
    tl.exit(1)
    tl.advance(50)
    tl.add(tl.ev.failure(1, "restart", "infra:node-a", failure_class="infrastructure",
                         detail="node-a lost", logical_id="r1", node="node-a", backoff_ms=0))
    tl.advance(250)
    tl.start(2, resume=20)
    for s in range(21, 23):
        tl.step(2, s, wait=0)


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect()
    tl = Timeline()
    two_tiers(tl)
    project(c, tl)
    return c


def test_the_series_follows_commits_replicas_steps_and_the_restart(con) -> None:
    rows = [(r["event_type"], r["domain"], r["committed_step"], r["recoverable_step"],
             r["rpo_steps"], r["violated"]) for r in recovery(con, "run-a").records()]
    assert rows[4:12] == [
        # Step 6 is past the process rpo of 5 with nothing committed: a point of its own.
        ("StepCommitted", "process", 6, None, 6, True),
        ("ManifestCommitted", "process", 10, 10, 0, False),
        # The local commit survives a process crash only; the remote copy covers a host.
        ("CheckpointReplicated", "host", 10, 10, 0, False),
        ("StepCommitted", "process", 16, 10, 6, True),
        ("ManifestCommitted", "process", 20, 20, 0, False),
        # The remote copy of 20 is late: at step 23 a host loss would cost 13 > 12.
        ("StepCommitted", "host", 23, 10, 13, True),
        ("CheckpointReplicated", "host", 24, 20, 4, False),
        ("FailureClassified", "host", 24, 20, 4, False),
    ]
    now = {r["domain"]: r for r in latest(recovery(con, "run-a"))}
    assert [now[d]["recoverable_step"] for d in ("process", "host", "domain", "cluster")] == [
        20, 20, None, None]
    assert (now["host"]["rpo_steps"], now["host"]["rpo_target_steps"]) == (2, 12)
    # From step 20's commit to step 22's, the outage included.
    assert now["host"]["rpo_s"] == pytest.approx(0.9)
    assert (now["cluster"]["rpo_steps"], now["cluster"]["rpo_target_steps"]) == (22, None)
    assert not any(r["violated"] for r in now.values())
    # The node loss is a host incident; its RTO is the incidents query's.
    (inc,) = run_query(con, "incidents", "run-a").records()
    assert (now["host"]["incidents"], now["host"]["rto_s"]) == (1, inc["rto_s"])
    assert inc["rto_s"] == pytest.approx(0.3)
    assert (now["process"]["incidents"], now["process"]["rto_s"]) == (0, None)


def test_targets_read_the_first_tier_and_the_rpo_from_the_spec() -> None:
    assert targets(json.dumps(SPEC)) == ("process", {"process": 5, "host": 12})
    assert targets(json.dumps({"checkpoint": {"root": "/shared"}})) == ("host", {})
    assert targets(None) == targets("not json") == ("host", {})


def test_the_report_has_the_recovery_section(con) -> None:
    doc = parse(report(con, "run-a"))
    section = doc.by_id("recovery")
    assert "Recovery per failure domain" in section.text()
    hosts = doc.by_id("recovery-table").find("tr", data_domain="host")
    assert hosts[-1].cell("recoverable_step") == "20" and hosts[-1].cell("incidents") == "1"
