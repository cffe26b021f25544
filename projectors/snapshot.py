"""Read-only snapshots of a live projection, so readers never meet the writer's lock.

DuckDB lets one process write a file and no other process open it meanwhile,
not even read-only. The projector therefore publishes a copy beside the file it
writes (``projection.duckdb`` -> ``projection.snapshot.duckdb``) after a batch,
at most every ``--snapshot-every`` seconds: ``CHECKPOINT`` (the main file then
holds every committed batch), copy the file to a temporary name, add two
tables saying what it reflects, fsync, and ``rename`` it over the previous
snapshot. A rename is atomic, so a reader opens either the whole old snapshot
or the whole new one, never a torn copy; a reader that holds the old one keeps
its inode until it closes it.

What a snapshot carries (``snapshot_meta``, ``snapshot_positions``): the
layout of its tables (``LAYOUT``, a digest of the DDL, so a reader of another
version refuses it), when it was taken (wall clock, seconds since the epoch),
and per partition the projected position and the log's (low, high)
watermarks at that moment, from which ``lags`` gives the records behind.
Readers choose between the live file and the snapshot in
``queries.source``.

Tested in tests/projectors/test_snapshot.py.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb

from projectors.errors import ProjectorError
from projectors.tables import DDL

Partition = tuple[str, int]
# Changes whenever a table, column or type of the projection changes.
LAYOUT = hashlib.sha256(repr(sorted(DDL.items())).encode()).hexdigest()[:16]
SUFFIX = ".snapshot.duckdb"
META_DDL = {
    "snapshot_meta": "layout VARCHAR, taken_at DOUBLE, live VARCHAR, ends_known BOOLEAN",
    "snapshot_positions": "topic VARCHAR, part INTEGER, position BIGINT, "
                          "log_low BIGINT, log_high BIGINT",
}


class SnapshotError(ProjectorError):
    """A snapshot that cannot be read: not a DuckDB file, or no snapshot tables."""


def snapshot_path(live: str | Path) -> Path:
    """``projection.duckdb`` -> ``projection.snapshot.duckdb`` (beside it)."""
    path = Path(live)
    stem = path.name[:-len(".duckdb")] if path.name.endswith(".duckdb") else path.name
    return path.with_name(stem + SUFFIX)


_PUBLISHED = itertools.count()


def _temp_path(live: str | Path) -> Path:
    # Not ending in .duckdb: nobody lists or opens it as a projection. A new name for
    # every publish, never one this process opened before: DuckDB keeps an instance per
    # path in the process, and a connect to a name it still held would write through
    # that instance into the file it was, which is by then the published snapshot.
    name = snapshot_path(live).name
    return snapshot_path(live).with_name(f".{name}.{os.getpid()}.{next(_PUBLISHED)}.tmp")


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    """What a snapshot reflects: read back by readers, written by ``publish``."""

    layout: str
    taken_at: float  # seconds since the epoch
    positions: Mapping[Partition, int]
    # (low, high) per partition when it was taken; None: the broker did not answer.
    ends: Mapping[Partition, tuple[int, int]] | None

    def behind(self) -> dict[str, int] | None:
        """Records between the projected position and the log end, per topic."""
        if self.ends is None:
            return None
        out: dict[str, int] = {}
        for (topic, _part), n in lags(self.ends, dict(self.positions), {}).items():
            out[topic] = out.get(topic, 0) + n
        return dict(sorted(out.items()))


def lags(ends: Mapping[Partition, tuple[int, int]], stored: Mapping[Partition, int],
         reached: Mapping[Partition, int]) -> dict[Partition, int]:
    """Records still to project per partition, from its (low, high) watermarks.

    The position is the furthest of the stored next offset (committed with the
    tables), the end the consumer last reached (past transaction markers, which
    no record covers), and the low watermark (retention may have removed what
    was never projected: nothing below it can still be read).
    """
    out = {}
    for tp, (low, high) in ends.items():
        position = max(low, stored.get(tp, low), reached.get(tp, low))
        out[tp] = max(0, high - position)
    return out


class LiveFile:
    """A descriptor on the live file, open for as long as its writer is.

    DuckDB guards the file with a POSIX record lock, and POSIX drops every such
    lock a process holds on a file when the process closes *any* descriptor of
    it: copying the file with a fresh ``open`` would let a second writer in
    after the first snapshot. So the copy reads through this one descriptor,
    closed only after the writer's connection.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDONLY)

    def copy_to(self, dest: Path) -> None:
        size = os.fstat(self.fd).st_size
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            done = 0
            while done < size:
                n = os.copy_file_range(self.fd, out, size - done, done, done)
                if n == 0:
                    break
                done += n
        finally:
            os.close(out)

    def close(self) -> None:
        os.close(self.fd)


def publish(con: duckdb.DuckDBPyConnection, live: LiveFile, *,
            positions: Mapping[Partition, int], ends: Mapping[Partition, tuple[int, int]] | None,
            taken_at: float) -> Path | None:
    """Publish the state of ``con`` (the writer's connection to ``live``) as its snapshot.

    ``positions``: the next offsets the writer stored, after the transaction
    markers it passed. Returns the snapshot's path, or None when the copy did
    not hold exactly those offsets (a checkpoint a concurrent reader of the
    same connection deferred): nothing is replaced, the next call tries again.
    """
    target, temp = snapshot_path(live.path), _temp_path(live.path)
    con.execute("CHECKPOINT")
    stored = {(t, p): o for t, p, o in
              con.execute("SELECT topic, part, next_offset FROM offsets").fetchall()}
    try:
        live.copy_to(temp)
        copy = duckdb.connect(str(temp))
        try:
            copied = {(t, p): o for t, p, o in copy.execute(
                "SELECT topic, part, next_offset FROM offsets").fetchall()}
            if copied != stored:
                return None
            _write_meta(copy, live.path, positions, ends, taken_at)
        finally:
            copy.close()
        if not _whole(temp, positions):
            return None
        _fsync(temp)
        os.replace(temp, target)
        _fsync(target.parent)  # the rename itself survives a crash
        return target
    finally:
        temp.unlink(missing_ok=True)
        Path(f"{temp}.wal").unlink(missing_ok=True)


def _write_meta(copy: duckdb.DuckDBPyConnection, live: str | Path,
                positions: Mapping[Partition, int],
                ends: Mapping[Partition, tuple[int, int]] | None, taken_at: float) -> None:
    for table, ddl in META_DDL.items():
        copy.execute(f"CREATE OR REPLACE TABLE {table} ({ddl})")
    copy.execute("INSERT INTO snapshot_meta VALUES (?, ?, ?, ?)",
                 [LAYOUT, taken_at, str(live), ends is not None])
    parts = sorted(set(positions) | set(ends or {}))
    copy.executemany("INSERT INTO snapshot_positions VALUES (?, ?, ?, ?, ?)", [
        (t, p, positions.get((t, p)), *(ends[(t, p)] if ends and (t, p) in ends
                                        else (None, None)))
        for t, p in parts])
    copy.execute("CHECKPOINT")


def _whole(temp: Path, positions: Mapping[Partition, int]) -> bool:
    """Whether the closed copy, opened afresh, holds its meta and the positions it was
    given, with nothing of it left in a write-ahead log: only such a file is renamed
    over the snapshot, since a reader opens the snapshot without its log (a CI run once
    met a snapshot with no ``snapshot_meta``)."""
    if Path(f"{temp}.wal").exists():
        return False
    con = duckdb.connect(str(temp), read_only=True)
    try:
        meta = read_meta(con, temp)
    except SnapshotError:
        return False
    finally:
        con.close()
    return dict(meta.positions) == dict(positions)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_meta(con: duckdb.DuckDBPyConnection, path: str | Path) -> SnapshotMeta:
    """What the snapshot open on ``con`` reflects; SnapshotError when it holds no record
    of that (a file that is no snapshot)."""
    try:
        row = con.execute("SELECT layout, taken_at, ends_known FROM snapshot_meta").fetchone()
        parts = con.execute("SELECT topic, part, position, log_low, log_high"
                            " FROM snapshot_positions").fetchall()
    except duckdb.Error as exc:
        raise SnapshotError(f"{path} is not a projection snapshot ({exc}); remove it:"
                            " a running `runledger project` publishes a new one") from None
    if row is None:
        raise SnapshotError(f"{path} has an empty snapshot_meta table; remove it: a running"
                            " `runledger project` publishes a new one")
    positions = {(t, p): pos for t, p, pos, _, _ in parts if pos is not None}
    ends = {(t, p): (lo, hi) for t, p, _, lo, hi in parts if hi is not None} if row[2] else None
    return SnapshotMeta(str(row[0]), float(row[1]), positions, ends)
