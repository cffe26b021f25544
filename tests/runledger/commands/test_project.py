"""``runledger project --once`` and ``runledger replay --db NEW``, run as docs/cli.md writes them.

The shared broker's log holds every test's records, so the checks are about this
test's run and about the two files agreeing, not about absolute totals. Both
commands end however much keeps arriving: they read up to the ends the log had
when they started, under a steady trickle of another run's reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from events.kafka.clients import EventProducer
from events.kafka.connection import client_config
from events.kafka.reader import Watermarks
from events.partition import partition_for
from events.topics import REPORTS
from projectors.projector import table_digests
from tests.events.builders import Ev
from tests.projectors.test_projector import count, publish
from tests.stacks import private_stack, send_report

pytestmark = pytest.mark.kafka


def cli(*args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runledger.cli", *args, "--bootstrap", bootstrap],
                          capture_output=True, text=True, timeout=300)


def test_replay_rebuilds_the_projection_and_prints_equal_digests(
        bootstrap: str, tmp_path: Path, run_id: str) -> None:
    publish(bootstrap, run_id, 30)
    live = tmp_path / "live.duckdb"
    projected = cli("project", "--db", str(live), "--once", bootstrap=bootstrap)
    assert projected.returncode == 0, projected.stderr
    assert projected.stdout.startswith("projected ") and str(live) in projected.stdout
    assert count(live, f"SELECT count(*) FROM steps WHERE run_id = '{run_id}'") == 30
    mine = f"SELECT count(*) FROM events WHERE run_id = '{run_id}'"
    before = count(live, mine)
    again = cli("project", "--db", str(live), "--once", "--json", bootstrap=bootstrap)
    assert again.returncode == 0, again.stderr
    # Resumed after the stored offsets: none of this run's records a second time (what
    # other tests appended to the shared broker since, it may project).
    doc = json.loads(again.stdout)
    assert set(doc) == {"records", "db"} and doc["db"] == str(live)
    assert count(live, mine) == before

    new = tmp_path / "replay.duckdb"
    replayed = cli("replay", "--db", str(new), "--json", bootstrap=bootstrap)
    assert replayed.returncode == 0, replayed.stderr
    doc = json.loads(replayed.stdout)
    assert doc["records"] > 0
    assert count(new, f"SELECT count(*) FROM steps WHERE run_id = '{run_id}'") == 30
    # Both files stopped at the end of the log each saw; nobody else writes this
    # test's run, so its rows agree, and the printed digests are the file's own.
    assert doc["tables"] == table_digests(new)
    for table in ("steps", "checkpoints", "members", "generations"):
        sql = f"SELECT count(*) FROM {table} WHERE run_id = '{run_id}'"
        assert count(new, sql) == count(live, sql), table


def test_replay_refuses_an_existing_file(bootstrap: str, tmp_path: Path) -> None:
    existing = tmp_path / "there.duckdb"
    existing.write_bytes(b"")
    out = cli("replay", "--db", str(existing), bootstrap=bootstrap)
    assert out.returncode == 1
    assert out.stderr.strip() == (f"runledger: {existing} exists; replay builds a new database"
                                  " (remove it or pick another path)")
    assert existing.read_bytes() == b""


@pytest.fixture
def trickle(bootstrap: str) -> Iterator[None]:
    """An unrelated run's agent, reporting a heartbeat every ~50 ms throughout."""
    stop = threading.Event()

    def report() -> None:
        producer = EventProducer(bootstrap)
        ev = Ev(f"run-trickle-{uuid.uuid4().hex[:8]}", ids="{run}/{n}")
        n = 0
        while not stop.is_set():
            send_report(bootstrap, producer, ev.heartbeat(1, "r0", step=n, node="n1"))
            producer.flush()
            n += 1
            time.sleep(0.05)

    worker = threading.Thread(target=report, daemon=True)
    worker.start()
    time.sleep(0.5)  # reporting before the command starts, and after it ends
    try:
        yield
    finally:
        stop.set()
        worker.join(10)


@pytest.mark.usefixtures("trickle")
@pytest.mark.parametrize("command", [["project", "--once"], ["replay"]])
def test_it_ends_under_a_steady_trickle_with_everything_written_before(
        bootstrap: str, tmp_path: Path, run_id: str, command: list[str]) -> None:
    publish(bootstrap, run_id, 30)
    db = tmp_path / "p.duckdb"
    started = time.monotonic()
    done = cli(*command, "--db", str(db), bootstrap=bootstrap)  # times out if it never ends
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 120
    assert count(db, f"SELECT count(*) FROM steps WHERE run_id = '{run_id}'") == 30
    assert count(db, f"SELECT count(*) FROM heartbeats WHERE run_id = '{run_id}'") == 30
    assert count(db, f"SELECT count(*) FROM checkpoints WHERE run_id = '{run_id}'") == 3


def ends(address: str) -> dict[tuple[str, int], int]:
    marks = Watermarks(address, [REPORTS])
    try:
        return {tp: high for tp, (_, high) in marks.get().items()}
    finally:
        marks.close()


def test_a_stored_offset_below_the_log_start_stops_project_naming_the_gap(
        tmp_path: Path) -> None:
    """Reports deleted (retention, here ``delete_records``) before the projector read them:
    ``project --once`` and a live ``project`` both exit 1 with one line naming the
    partition, the offsets lost and the rebuild; ``replay`` rebuilds from what is left.
    A private broker: the records of the shared one are every test's."""
    stack = private_stack(tmp_path / "kafka")
    try:
        address = stack.up().bootstrap
        run = f"run-{uuid.uuid4().hex[:8]}"
        publish(address, run, 10)
        db = tmp_path / "live.duckdb"
        first = cli("project", "--db", str(db), "--once", bootstrap=address)
        assert first.returncode == 0, first.stderr
        part = partition_for(run, len(ends(address)))
        stored = count(db, "SELECT next_offset FROM offsets "
                           f"WHERE topic = '{REPORTS}' AND part = {part}")
        publish(address, run, 10, start=10)  # ten more reports, then all of them deleted
        end = ends(address)[(REPORTS, part)]
        admin = AdminClient(client_config(address, {}))
        for done in admin.delete_records([TopicPartition(REPORTS, part, end)]).values():
            done.result(30)
        gap = (f"{REPORTS}[{part}]: the next offset to read, {stored}, is below the "
               f"partition's low watermark {end}: offsets {stored}..{end - 1} (up to "
               f"{end - stored} records) were deleted")
        for live in (False, True):
            args = ("project", "--db", str(db)) + (() if live else ("--once",))
            out = cli(*args, bootstrap=address)
            assert out.returncode == 1 and out.stdout == "", out
            (line,) = out.stderr.strip().splitlines()
            assert line.startswith(f"runledger: {db}: {gap}"), line
            assert "`runledger replay --db NEW`" in line
        new = tmp_path / "rebuilt.duckdb"
        rebuilt = cli("replay", "--db", str(new), bootstrap=address)
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert count(new, f"SELECT count(*) FROM steps WHERE run_id = '{run}'") == 20
    finally:
        stack.down(purge=True)
