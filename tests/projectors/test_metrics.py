"""The projector's ``/metrics``: the pure exposition, then a live projector and the
CLI against the real broker, scraped over HTTP and parsed as Prometheus text."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest
from confluent_kafka import Producer

from events.kafka.clients import EventProducer
from events.kafka.connection import client_config
from events.topics import REPORTS, RUNS
from projectors.metrics import (
    EndOffsets,
    ProjectorCollector,
    Snapshot,
    families,
    lags,
    sdc_counts,
)
from projectors.projector import Projector
from runledger.metricsserver import serve
from tests.events.builders import Ev, members
from tests.promtext import Samples, named, render, scrape, until
from tests.queries.timeline import Timeline, project, sdc_run

# -- pure --------------------------------------------------------------------


def test_lag_counts_from_the_furthest_known_position() -> None:
    ends = {("t", 0): (0, 10), ("t", 1): (5, 9), ("t", 2): (0, 7), ("t", 3): (0, 4)}
    stored = {("t", 0): 6, ("t", 2): 6}
    # t/2: the last record was 5, the marker of its transaction 6; EOF reported 7.
    reached = {("t", 2): 7, ("t", 3): 2}
    assert lags(ends, stored, reached) == {
        ("t", 0): 4,  # stored next offset 6 of 10
        ("t", 1): 4,  # nothing stored: from the low watermark
        ("t", 2): 0,  # caught up: only a transaction marker was after the last record
        ("t", 3): 2,
    }


def test_families_expose_counters_lag_and_ettr() -> None:
    snap = Snapshot(applied=12, quarantined=1, batches=3, last_batch=5, last_batch_s=0.25,
                    lag={("runledger.runs", 0): 0, ("runledger.reports", 4): 7},
                    ettr={"run-a": 0.9, "run-b": 0.5})
    got = render(families(snap))
    assert got[("runledger_projector_records_applied_total", ())] == 12
    assert got[("runledger_projector_quarantined_total", ())] == 1
    assert got[("runledger_projector_batches_total", ())] == 3
    assert got[("runledger_projector_last_batch_records", ())] == 5
    assert got[("runledger_projector_last_batch_seconds", ())] == 0.25
    assert named(got, "runledger_projector_lag_records") == {
        (("partition", "0"), ("topic", "runledger.runs")): 0,
        (("partition", "4"), ("topic", "runledger.reports")): 7,
    }
    assert named(got, "runledger_run_ettr_ratio") == {
        (("run", "run-a"),): 0.9, (("run", "run-b"),): 0.5}


def test_the_snapshot_s_age_and_cost_are_exposed() -> None:
    got = render(families(Snapshot(snapshot_age_s=4.5, snapshot_s=0.125)))
    assert got[("runledger_projector_snapshot_age_seconds", ())] == 4.5
    assert got[("runledger_projector_snapshot_seconds", ())] == 0.125


def test_without_an_ettr_callable_there_is_no_ettr_series() -> None:
    got = render(families(Snapshot()))
    assert not named(got, "runledger_run_ettr_ratio")
    # No snapshot published yet (or none asked for): no age rather than a made-up one.
    assert ("runledger_projector_snapshot_age_seconds", ()) not in got
    assert got[("runledger_projector_records_applied_total", ())] == 0


def test_sdc_suspicions_and_verdicts_are_counted_per_run_from_the_projection() -> None:
    con = duckdb.connect()
    one, two, quiet = Timeline(run_id="run-a"), Timeline(run_id="run-b"), Timeline("run-c")
    sdc_run(one, "node_fault")
    sdc_run(two, None)  # open: suspected, not classified yet
    two.suspect(2, 30, detector="spike")
    quiet.submit()
    project(con, one, two, quiet)
    suspicions, verdicts = sdc_counts(con)
    assert suspicions == {("run-a", "agreement"): 1, ("run-b", "agreement"): 1,
                          ("run-b", "spike"): 1}
    assert verdicts == {("run-a", "node_fault"): 1}
    got = render(families(Snapshot(suspicions=suspicions, verdicts=verdicts)))
    assert named(got, "runledger_run_sdc_suspicions_total") == {
        (("detector", "agreement"), ("run", "run-a")): 1,
        (("detector", "agreement"), ("run", "run-b")): 1,
        (("detector", "spike"), ("run", "run-b")): 1}
    assert named(got, "runledger_run_sdc_verdicts_total") == {
        (("run", "run-a"), ("verdict", "node_fault")): 1}
    # Nothing suspected anywhere: the families are there, without series.
    assert not named(render(families(Snapshot())), "runledger_run_sdc_suspicions_total")


# -- against the broker --------------------------------------------------------


def publish(bootstrap: str, run: str, steps: int) -> int:
    """A small run: submitted, started, ``steps`` steps; the number of records sent."""
    p = EventProducer(bootstrap)
    ev = Ev(run, start=1_000, tick=1, ids="{run}/{n}")
    p.send(RUNS, ev.submitted(spec_digest="sha256:s", world_size=1, dataset_id=None, n=0))
    p.send(RUNS, ev.generation_started(1, members=members("r0", node="n1"), reason="admitted",
                                       n=1))
    for step in range(1, steps + 1):
        p.send(RUNS, ev.step(1, step, tokens=64, loss_tokens=60, step_time_ms=10.0,
                             input_wait_ms=1.0, loss=1.0 / step, n=100 + step))
    p.flush()
    return steps + 2


def corrupt(bootstrap: str, run: str) -> None:
    raw = Producer(client_config(bootstrap, {}))
    raw.produce(RUNS, key=run, value=b"\xc3\x01not an event at all")
    raw.flush(10)


def count(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    row = con.execute(sql).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.kafka
def test_end_offsets_are_cached_for_their_ttl(bootstrap: str, run_id: str) -> None:
    # A broker that has just started may not have elected the partitions'
    # leaders yet, and a failed lookup is cached too: wait until one answers.
    probe = EndOffsets(bootstrap, (RUNS,), ttl_s=0.0)
    try:
        until(probe.get, 60, "the broker to answer watermark lookups")
    finally:
        probe.close()
    now = [0.0]
    ends = EndOffsets(bootstrap, (RUNS,), ttl_s=5.0, clock=lambda: now[0])
    try:
        before = ends.get()
        assert before is not None and {t for t, _ in before} == {RUNS}
        publish(bootstrap, run_id, 3)
        now[0] = 4.9
        assert ends.get() == before  # within the TTL: no broker round trip
        now[0] = 5.0
        after = ends.get()
        assert after is not None
        assert sum(h for _, h in after.values()) >= sum(h for _, h in before.values()) + 5
    finally:
        ends.close()


@pytest.mark.kafka
def test_a_live_projector_reports_applied_records_lag_quarantine_and_ettr(
        bootstrap: str, tmp_path: Path, run_id: str) -> None:
    corrupt(bootstrap, run_id)
    sent = publish(bootstrap, run_id, 20)
    projector = Projector(tmp_path / "p.duckdb", bootstrap, batch=7)
    seen_threads: set[int] = set()

    def ettr_of(con: duckdb.DuckDBPyConnection) -> dict[str, float]:
        seen_threads.add(threading.get_ident())
        rows = con.execute("SELECT run_id, max(step) / 40.0 FROM steps WHERE run_id = ?"
                           " GROUP BY run_id", [run_id]).fetchall()
        return {str(r): float(v) for r, v in rows}

    # TTL 0: every scrape asks the broker, so "caught up" is judged on fresh ends.
    collector = ProjectorCollector(projector, ettr_of=ettr_of, ttl_s=0.0)
    server = serve(collector, "127.0.0.1:0", on_close=collector.close)
    stop = threading.Event()
    worker = threading.Thread(target=projector.run, kwargs={"stop": stop, "poll_s": 0.2})
    try:
        host, port = server.address
        assert host == "127.0.0.1" and port > 0
        assert server.url == f"http://127.0.0.1:{port}/metrics"
        idle = scrape(server.url)
        # Nothing projected yet: at least our records are lag, none applied.
        assert sum(named(idle, "runledger_projector_lag_records").values()) >= sent + 1
        assert idle[("runledger_projector_records_applied_total", ())] == 0
        assert named(idle, "runledger_run_ettr_ratio") == {}
        worker.start()

        def caught_up() -> Samples | None:
            got = scrape(server.url)
            lag = named(got, "runledger_projector_lag_records")
            mine = named(got, "runledger_run_ettr_ratio").get((("run", run_id),))
            return got if mine is not None and lag and not any(lag.values()) else None

        got = until(caught_up, 90, "the projector to catch up")
        assert got[("runledger_run_ettr_ratio", (("run", run_id),))] == 0.5  # step 20 of 40
        assert seen_threads
        assert threading.get_ident() not in seen_threads  # scraped on the server's threads
        con = projector.con.cursor()  # this thread's own, like the collector's
        try:
            # Counted as applied by this process, all of it into a fresh database.
            events, quarantined = (count(con, "SELECT count(*) FROM events"),
                                   count(con, "SELECT count(*) FROM quarantine"))
            assert count(con, f"SELECT count(*) FROM events WHERE run_id = '{run_id}'") == sent
            assert count(con, f"SELECT count(*) FROM quarantine WHERE key = '{run_id}'") == 1
        finally:
            con.close()
        assert got[("runledger_projector_quarantined_total", ())] >= 1
        # The scrape may precede a batch that other tests' records started.
        assert got[("runledger_projector_quarantined_total", ())] <= quarantined
        assert got[("runledger_projector_records_applied_total", ())] <= events + quarantined
        assert got[("runledger_projector_records_applied_total", ())] >= sent + 1
        assert got[("runledger_projector_batches_total", ())] >= 3  # batches of 7
        assert 0 < got[("runledger_projector_last_batch_records", ())] <= 7
        assert got[("runledger_projector_last_batch_seconds", ())] >= 0
        partitions = named(got, "runledger_projector_lag_records")
        assert {dict(k)["topic"] for k in partitions} == {RUNS, REPORTS}
    finally:
        stop.set()
        worker.join(30)
        server.close()  # before the projector: the cursor lives on its connection
        projector.close()


@pytest.mark.kafka
def test_project_cli_prints_the_bound_address_and_serves_metrics(
        bootstrap: str, tmp_path: Path, run_id: str) -> None:
    publish(bootstrap, run_id, 2)
    err = tmp_path / "project.err"
    with err.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runledger.cli", "project", "--db",
             str(tmp_path / "cli.duckdb"), "--metrics", "127.0.0.1:0"],
            env={**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap}, stdout=subprocess.DEVNULL,
            stderr=sink, start_new_session=True)
    try:
        line = r"^metrics at (http://127\.0\.0\.1:(\d+)/metrics)$"
        url = until(lambda: (m.group(1) if (m := re.search(line, err.read_text(), re.M))
                             else None), 60, "the metrics line")
        assert not url.endswith(":0/metrics")
        got = until(lambda: (s if (s := scrape(url)).get(
            ("runledger_projector_records_applied_total", ()), 0) >= 4 else None),
            60, "records applied")
        assert named(got, "runledger_projector_lag_records")
        # The CLI serves the queries package's ETTR: a ratio for each run it covers.
        assert all(0.0 <= v <= 1.0 for v in named(got, "runledger_run_ettr_ratio").values())
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, err.read_text()
