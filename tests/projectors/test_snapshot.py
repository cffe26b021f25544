"""projectors/snapshot.py: a snapshot is published whole or not at all, and carries what it
reflects. A real writer process holds the live file (its DuckDB lock) while this one reads;
no broker: the writer stores offsets itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from projectors.projector import Projector
from projectors.snapshot import LAYOUT, LiveFile, publish, read_meta, snapshot_path
from queries.source import open_projection
from tests.promtext import until

# Appends rows to a table of its own and stores the count as the offset of t[0], one
# transaction per round, and publishes a snapshot after each: in every whole snapshot
# the rows, the stored offset and the recorded position agree.
WRITER = textwrap.dedent("""
    import sys, time
    from projectors.projector import Projector
    from projectors.snapshot import LiveFile, publish
    live, rounds = sys.argv[1], int(sys.argv[2])
    p = Projector(live, "unused:9092")
    con, handle = p.con, LiveFile(live)
    con.execute("CREATE TABLE IF NOT EXISTS marks (n BIGINT, pad VARCHAR)")
    n = 0
    for i in range(rounds):
        con.execute("BEGIN TRANSACTION")
        con.execute("INSERT INTO marks SELECT range + ?, repeat('x', 200) FROM range(2000)", [n])
        n += 2000
        con.execute("INSERT INTO offsets VALUES ('t', 0, ?) ON CONFLICT (topic, part)"
                    " DO UPDATE SET next_offset = excluded.next_offset", [n])
        con.execute("COMMIT")
        publish(con, handle, positions={("t", 0): n}, ends={("t", 0): (0, n + 5)},
                taken_at=1000.0 + i)
        print(i, flush=True)
    time.sleep(600)  # holds the live file until killed
""")


def writer(live: Path, rounds: int, out: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as sink:
        return subprocess.Popen([sys.executable, "-c", WRITER, str(live), str(rounds)],
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": os.getcwd()})


def check_whole(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    """The snapshot's rows, stored offset and recorded position agree; returns the count."""
    meta = read_meta(con, path)
    rows = con.execute("SELECT count(*) FROM marks").fetchone()
    stored = con.execute("SELECT next_offset FROM offsets WHERE topic = 't'").fetchone()
    assert rows is not None and stored is not None
    assert rows[0] == stored[0] == meta.positions[("t", 0)]
    assert meta.layout == LAYOUT and meta.behind() == {"t": 5}
    return int(rows[0])


def test_readers_see_only_whole_snapshots_even_when_the_writer_is_killed(
        tmp_path: Path) -> None:
    live, log = tmp_path / "projection.duckdb", tmp_path / "writer.out"
    proc = writer(live, 400, log)
    seen: set[int] = set()
    try:
        until(lambda: snapshot_path(live).exists() or None, 120, "the first snapshot")
        # Read while the writer republishes, until several different snapshots were seen.
        while len(seen) < 5 and proc.poll() is None:
            con, fresh = open_projection(live)  # the writer holds the live file
            try:
                assert fresh.snapshot and fresh.projector_running
                seen.add(check_whole(con, snapshot_path(live)))
            finally:
                con.close()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # wherever it is, a publish included
        proc.wait(30)
    assert len(seen) >= 5, log.read_text()
    con = duckdb.connect(str(snapshot_path(live)), read_only=True)
    try:
        check_whole(con, snapshot_path(live))
    finally:
        con.close()
    # Nothing a killed publish left behind is ever taken for a projection.
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".duckdb")
                and p.name not in ("projection.duckdb", "projection.snapshot.duckdb")]


def test_a_failed_copy_leaves_the_previous_snapshot_and_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    live = tmp_path / "p.duckdb"
    projector = Projector(live, "unused:9092")
    handle = LiveFile(live)
    try:
        con = projector.con
        con.execute("INSERT INTO offsets VALUES ('t', 0, 7)")
        first = publish(con, handle, positions={("t", 0): 7}, ends=None, taken_at=1.0)
        assert first == snapshot_path(live) == tmp_path / "p.snapshot.duckdb"
        before = first.read_bytes()
        con.execute("UPDATE offsets SET next_offset = 9")

        def torn(self: LiveFile, dest: Path) -> None:  # half a file, then the disk fails
            dest.write_bytes(os.pread(self.fd, 4096, 0))
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(LiveFile, "copy_to", torn)
        with pytest.raises(OSError):
            publish(con, handle, positions={("t", 0): 9}, ends=None, taken_at=2.0)
        assert first.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["p.duckdb", "p.snapshot.duckdb"]
    finally:
        projector.close()
        handle.close()
    con2, fresh = open_projection(live)  # no writer now: the live file, which went further
    con2.close()
    assert not fresh.snapshot and fresh.behind is None
    snap = duckdb.connect(str(first), read_only=True)
    try:
        meta = read_meta(snap, first)
    finally:
        snap.close()
    assert meta.taken_at == 1.0 and meta.positions == {("t", 0): 7} and meta.ends is None


def test_a_projector_that_stops_leaves_a_snapshot_equal_to_its_file(tmp_path: Path) -> None:
    live = tmp_path / "p.duckdb"
    projector = Projector(live, "unused:9092", snapshot_every_s=3600.0)
    try:
        projector.con.execute("INSERT INTO offsets VALUES ('t', 0, 3)")
        assert projector._live is not None  # it publishes: it keeps the file open
        done = publish(projector.con, projector._live, positions=projector.offsets(),
                       ends={("t", 0): (0, 3)}, taken_at=50.0)
    finally:
        projector.close()
    assert done is not None
    con, fresh = open_projection(live)
    con.close()
    # The live file is read (no writer), and the snapshot, which holds all of it, says its lag.
    assert not fresh.snapshot and fresh.taken_at == 50.0 and fresh.behind == {"t": 0}
