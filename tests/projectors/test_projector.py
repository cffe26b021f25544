"""The DuckDB projection against a real broker: batches with offsets in one
transaction, a replay equal to the live tables, a crash mid-batch, a corrupt record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
from confluent_kafka import Producer

from events.kafka import runkeys
from events.kafka.clients import EventProducer
from events.kafka.connection import client_config
from events.signed.keyring import UNSIGNED
from events.topics import RUNS
from projectors.projector import BATCH, UNPROJECTABLE, Projector, table_digests
from projectors.tables import DDL
from tests.events.builders import Ev, members
from tests.stacks import send_report, session_key

pytestmark = pytest.mark.kafka


def publish(bootstrap: str, run: str, steps: int, start: int = 0) -> int:
    """A small run's facts and reports; the number of records sent.

    Event ``n`` is ``<run>/<n>`` at ``1000 + n`` ms, so a second call (``start``) for the
    same run writes new events, never a copy of an earlier one."""
    p = EventProducer(bootstrap)
    ev = Ev(run, start=1_000, tick=1, ids="{run}/{n}")
    n = start
    sent = 0
    if start == 0:
        p.send(RUNS, ev.submitted(spec_digest="sha256:s", world_size=2, dataset_id=None, n=0))
        p.send(RUNS, ev.generation_started(1, members=members("r0", "r1", node="n1"),
                                           reason="admitted", n=1))
        sent += 2
        n = 2
    for i in range(steps):
        step = n + i
        p.send(RUNS, ev.step(1, step, tokens=64, loss_tokens=60, step_time_ms=10.0,
                             input_wait_ms=1.0, loss=1.0 / (step + 1), n=100 + step))
        send_report(bootstrap, p, ev.heartbeat(1, "r0", step=step, node="n1", n=10_000 + step))
        sent += 2
        if step % 10 == 0:
            p.send(RUNS, ev.committed(1, step, manifest_path=f"m{step}",
                                      manifest_digest=f"d{step}", n=20_000 + step))
            sent += 1
    p.flush()
    return sent


def count(db: Path, sql: str) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute(sql).fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def test_live_projection_and_replay_are_identical(bootstrap: str, tmp_path: Path,
                                                   run_id: str) -> None:
    live = tmp_path / "live.duckdb"
    projector = Projector(live, bootstrap, batch=50)
    stop = threading.Event()
    worker = threading.Thread(target=projector.run, kwargs={"stop": stop})
    worker.start()
    sent = publish(bootstrap, run_id, 120)
    time.sleep(1.0)
    stop.set()
    worker.join(30)
    projector.close()
    catch_up = Projector(live, bootstrap)
    catch_up.run(until_caught_up=True)  # resumes after the stored offsets
    catch_up.close()
    assert count(live, f"SELECT count(*) FROM events WHERE run_id = '{run_id}'") == sent
    assert count(live, f"SELECT count(*) FROM steps WHERE run_id = '{run_id}'") == 120
    assert count(live, f"SELECT count(*) FROM heartbeats WHERE run_id = '{run_id}'") == 120
    assert count(live, f"SELECT count(*) FROM checkpoints WHERE run_id = '{run_id}'") == 12
    assert count(live, f"SELECT count(*) FROM members WHERE run_id = '{run_id}'") == 2
    replayed = tmp_path / "replay.duckdb"
    # Other tests append to the shared broker's topics meanwhile: compare the two
    # projections at the same offsets, catching both up until they stand level.
    for _ in range(10):
        for db in (replayed, live):
            again = Projector(db, bootstrap)
            again.run(until_caught_up=True)
            again.close()
        if offsets(live) == offsets(replayed):
            break
    assert offsets(live) == offsets(replayed)
    assert table_digests(live) == table_digests(replayed)


def test_batches_read_while_their_signatures_are_verified_project_as_one_thread_does(
        bootstrap: str, tmp_path: Path, run_id: str) -> None:
    """Full batches are held while the next is read and their reports' signatures are
    verified on threads (events.kafka.ahead); the tables are the same as with no
    threads and one batch size, and every signed report is believed."""
    publish(bootstrap, run_id, 60)
    ahead, alone = tmp_path / "ahead.duckdb", tmp_path / "alone.duckdb"
    for _ in range(10):  # other tests append meanwhile: until both stand level
        for db, batch, threads in ((ahead, 500, 2), (alone, BATCH, 0)):
            projector = Projector(db, bootstrap, batch=batch, verify_threads=threads)
            projector.run(until_caught_up=True)
            projector.close()
        if offsets(ahead) == offsets(alone):
            break
    assert offsets(ahead) == offsets(alone)
    assert table_digests(ahead) == table_digests(alone)
    assert count(ahead, f"SELECT count(*) FROM heartbeats WHERE run_id = '{run_id}'") == 60
    assert count(ahead, f"SELECT count(*) FROM quarantine WHERE key = '{run_id}'") == 0


def test_the_compiled_route_projects_as_the_python_route_does(
        bootstrap: str, tmp_path: Path, run_id: str) -> None:
    """projectors.fastpath takes the runs topic's facts that need only their fields;
    the tables are those of every record through the codec and rows_for."""
    publish(bootstrap, run_id, 60)
    compiled, python = tmp_path / "compiled.duckdb", tmp_path / "python.duckdb"
    for attempt in range(10):  # other tests append meanwhile: until both stand level
        for db, on in ((compiled, True), (python, False)):
            projector = Projector(db, bootstrap, batch=300, compiled=on)
            projector.run(until_caught_up=True)
            assert (projector.fastpath is not None) == on
            if attempt == 0:  # steps and heartbeats take it; the packed GenerationStarted not
                assert (0 < projector.compiled_records < projector.applied) == on
            assert projector.compiled_records == 0 or on
            projector.close()
        if offsets(compiled) == offsets(python):
            break
    assert offsets(compiled) == offsets(python)
    assert table_digests(compiled) == table_digests(python)
    assert count(compiled, f"SELECT count(*) FROM steps WHERE run_id = '{run_id}'") == 60


def test_a_forged_report_is_quarantined_and_leaves_no_row_on_either_route(
        bootstrap: str, tmp_path: Path, run_id: str) -> None:
    """A heartbeat signed as its worker signs it is projected; one sent unsigned (what
    any holder of the reports topic's credentials could write) is a quarantine row
    with the door's reason and no heartbeat, through the compiled route and the
    Python route alike."""
    assert session_key("admin") is not None, "the suite runs on a secure stack"
    p = EventProducer(bootstrap)
    ev = Ev(run_id, start=1_000, tick=1, ids="{run}/{n}")
    send_report(bootstrap, p, ev.heartbeat(1, "r0", step=1, node="n1", n=1))
    runkeys.send_report(p, ev.heartbeat(1, "r0", step=2, node="n1", n=2), None)
    p.flush()
    for on in (True, False):
        db = tmp_path / f"{on}.duckdb"
        projector = Projector(db, bootstrap, compiled=on)
        projector.run(until_caught_up=True)
        projector.close()
        assert count(db, f"SELECT count(*) FROM heartbeats WHERE run_id = '{run_id}'") == 1
        assert count(db, f"SELECT count(*) FROM heartbeats WHERE run_id = '{run_id}' "
                         "AND step = 1") == 1
        assert count(db, f"SELECT count(*) FROM events WHERE run_id = '{run_id}'") == 1
        assert count(db, f"SELECT count(*) FROM quarantine WHERE key = '{run_id}' "
                         f"AND reason = '{UNSIGNED}'") == 1


def offsets(db: Path) -> dict[tuple[str, int], int]:
    """Where a projection stands: the next offset per topic partition."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT topic, part, next_offset FROM offsets").fetchall()
    finally:
        con.close()
    return {(t, p): o for t, p, o in rows}


def test_a_crash_mid_batch_loses_and_doubles_nothing(bootstrap: str, tmp_path: Path,
                                                      run_id: str) -> None:
    db = tmp_path / "crash.duckdb"
    sent = publish(bootstrap, run_id, 400)
    code = ("import sys; from projectors.projector import Projector;"
            f" Projector(sys.argv[1], {bootstrap!r}, batch=50).run()")
    env = {**os.environ, "RUNLEDGER_PROJECTOR_CRASH": f"{run_id}:300"}
    done = subprocess.run([sys.executable, "-c", code, str(db)], env=env, timeout=120)
    assert done.returncode == -signal.SIGKILL  # killed inside a batch's transaction
    # what survived is whole batches only: some of the run, not all of it
    before = count(db, f"SELECT count(*) FROM events WHERE run_id = '{run_id}'")
    assert 0 < before < sent
    resumed = Projector(db, bootstrap)
    resumed.run(until_caught_up=True)
    resumed.close()
    assert count(db, f"SELECT count(*) FROM events WHERE run_id = '{run_id}'") == sent
    assert count(db, "SELECT count(DISTINCT (topic, part, ofs)) FROM events") == count(
        db, "SELECT count(*) FROM events")  # no record applied twice
    assert count(db, f"SELECT count(*) FROM steps WHERE run_id = '{run_id}'") == 400


def test_a_corrupt_record_is_quarantined_and_projection_goes_on(
        bootstrap: str, tmp_path: Path, run_id: str) -> None:
    raw = Producer(client_config(bootstrap, {}))
    raw.produce(RUNS, key=run_id, value=b"\xc3\x01not an event at all")
    raw.flush(10)
    sent = publish(bootstrap, run_id, 5)
    db = tmp_path / "q.duckdb"
    p = Projector(db, bootstrap)
    p.run(until_caught_up=True)
    p.close()
    assert count(db, f"SELECT count(*) FROM quarantine WHERE key = '{run_id}'") == 1
    assert count(db, f"SELECT count(*) FROM events WHERE run_id = '{run_id}'") == sent


def test_values_past_32_bits_are_stored_and_an_unstorable_one_is_quarantined(
        bootstrap: str, tmp_path: Path, run_id: str) -> None:
    """world_size = 2**40 and exit_code = 2**33 are valid events. A new projection
    stores them as they are; a projection file whose columns are still 32-bit (made
    before they were widened) cannot, and quarantines exactly those two records,
    with the reason, and projects everything else: it never stalls on them."""
    ev = Ev(run_id, start=1_000, tick=1, ids="{run}/big/{n}")
    p = EventProducer(bootstrap)
    p.send(RUNS, ev.submitted(world_size=2**40))
    p.send(RUNS, ev.exited(1, exit_code=2**33))
    p.flush()
    sent = publish(bootstrap, run_id, 20) + 2

    new = tmp_path / "new.duckdb"
    projector = Projector(new, bootstrap)
    projector.run(until_caught_up=True)
    projector.close()
    assert count(new, f"SELECT max(world_size) FROM runs WHERE run_id = '{run_id}'") == 2**40
    assert count(new, f"SELECT max(exit_code) FROM exits WHERE run_id = '{run_id}'") == 2**33

    old = tmp_path / "old.duckdb"
    con = duckdb.connect(str(old))
    for table, column in (("runs", "world_size"), ("exits", "exit_code")):
        ddl = DDL[table].replace(f"{column} BIGINT", f"{column} INTEGER")
        con.execute(f"CREATE TABLE {table} ({ddl})")
    con.close()
    projector = Projector(old, bootstrap)
    worker = threading.Thread(target=projector.run, kwargs={"until_caught_up": True})
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "the projector stalled on a value it cannot store"
    projector.close()
    rows = duckdb.connect(str(old), read_only=True).execute(
        "SELECT reason, detail, raw IS NOT NULL FROM quarantine WHERE key = ? ORDER BY ofs",
        [run_id]).fetchall()
    assert [(r[0], r[2]) for r in rows] == [(UNPROJECTABLE, True)] * 2
    assert "RunSubmitted" in rows[0][1] and "out of range" in rows[0][1]
    assert "WorkerExited" in rows[1][1]
    assert count(old, f"SELECT count(*) FROM events WHERE run_id = '{run_id}'") == sent - 2
    assert count(old, f"SELECT count(*) FROM steps WHERE run_id = '{run_id}'") == 20


def test_a_file_another_version_made_is_refused_with_what_to_do(tmp_path: Path) -> None:
    import duckdb

    from projectors.errors import ProjectionLayoutError

    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE rejections (topic VARCHAR, part INTEGER)")  # an older layout
    con.close()
    with pytest.raises(ProjectionLayoutError) as refused:
        Projector(db, "127.0.0.1:1")
    assert "table rejections has columns topic, part" in str(refused.value)
    assert "runledger replay --db NEW" in str(refused.value)
