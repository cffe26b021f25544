"""Which file a reader opens: the live projection, or the snapshot a running projector publishes.

DuckDB lets no other process open a file while one writes it, so ``query`` and
``report`` read the live file only when no projector holds it, and otherwise
the newest snapshot (``projectors.snapshot``). ``choose`` is the decision, a
pure function of what was found, with numbered rules and a closed set of
actions; ``open_projection`` looks, decides and opens. Every answer carries
its ``Freshness``: how far behind the log end the projection was, and when.

Tested in tests/queries/test_source.py and tests/runledger/commands/test_live_queries.py.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from projectors.snapshot import LAYOUT, SnapshotError, SnapshotMeta, read_meta, snapshot_path
from projectors.tables import TABLES
from queries.errors import QueryError

Partition = tuple[str, int]


# -- what was found ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LiveMissing:
    """No file at the live path."""


@dataclass(frozen=True, slots=True)
class LiveLocked:
    """A writer (``runledger project``) holds the live file."""


@dataclass(frozen=True, slots=True)
class LiveOpen:
    """The live file, open read-only: no writer holds it."""

    offsets: Mapping[Partition, int]
    layout_problem: str | None = None


@dataclass(frozen=True, slots=True)
class SnapMissing:
    """No snapshot beside the live file."""


@dataclass(frozen=True, slots=True)
class SnapBad:
    """A file at the snapshot's path that is no readable snapshot."""

    reason: str


Live = LiveMissing | LiveLocked | LiveOpen
Snap = SnapMissing | SnapBad | SnapshotMeta


# -- what a reader is told -----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Freshness:
    """How current the projection a reader opened is."""

    path: str
    snapshot: bool  # the snapshot, else the live file
    projector_running: bool
    taken_at: float | None = None  # when the lag below was measured (epoch seconds)
    age_s: float | None = None
    behind: Mapping[str, int] | None = None  # records behind the log end, per topic

    def line(self) -> str:
        """One sentence for a terminal or the report's header."""
        when = "" if self.taken_at is None else (
            f" {_age(self.age_s)} ago ({_iso(self.taken_at)})")
        if self.behind is None:
            lag = "records behind the log end: unknown"
        else:
            per = ", ".join(f"{t} {n}" for t, n in sorted(self.behind.items())) or "none"
            lag = f"records behind the log end then: {per}"
        if self.snapshot:
            run = ("while `runledger project` runs" if self.projector_running
                   else "no projector holds the live file")
            return f"projection: snapshot {self.path} taken{when} {run}; {lag}"
        if self.taken_at is None:
            return (f"projection: {self.path} (no projector running; {lag}: run `runledger "
                    "project` to catch up)")
        return (f"projection: {self.path} (no projector running; at its last snapshot{when}"
                f" {lag}; records appended since are not in it)")

    def short(self) -> str:
        """A few words for a query's stderr: which file, how old, how far behind."""
        source = "snapshot" if self.snapshot else "live file"
        age = "" if self.age_s is None else f", {_age(self.age_s)} old"
        if self.behind is None:
            lag = ", lag unknown"
        else:
            behind = sum(self.behind.values())
            lag = ", caught up" if behind == 0 else f", {behind:,} records behind"
        catch_up = "" if self.snapshot or self.projector_running else (
            "; `runledger project` catches it up")
        return f"projection: {source}{age}{lag}{catch_up} ({self.path})"

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "source": "snapshot" if self.snapshot else "live",
                "projector_running": self.projector_running,
                "taken_at": None if self.taken_at is None else _iso(self.taken_at),
                "age_s": None if self.age_s is None else round(self.age_s, 3),
                "behind": None if self.behind is None else dict(sorted(self.behind.items()))}


def _age(seconds: float | None) -> str:
    s = seconds or 0.0
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


@dataclass(frozen=True, slots=True)
class ReadLive:
    freshness: Freshness


@dataclass(frozen=True, slots=True)
class ReadSnapshot:
    freshness: Freshness


@dataclass(frozen=True, slots=True)
class Refuse:
    message: str


Choice = ReadLive | ReadSnapshot | Refuse


def choose(live_path: str, live: Live, snap: Snap, now: float,
           nearby: tuple[str, ...] = ()) -> Choice:
    """Rules, first match wins:

    1. a live file no writer holds, of another layout: refuse (rebuild it);
    2. a live file no writer holds: read it; its lag is the snapshot's when the
       snapshot holds everything it holds, else unknown;
    3. neither file: refuse (run ``runledger project``);
    4. a snapshot that is no snapshot: refuse (remove it);
    5. a snapshot of another layout: refuse (run this version's projector);
    6. a snapshot: read it, with the lag it recorded;
    7. a writer and no snapshot yet: refuse (wait for its first, or restart it).
    """
    snap_path = str(snapshot_path(live_path))
    if isinstance(live, LiveOpen):
        if live.layout_problem is not None:  # 1
            return Refuse(live.layout_problem)
        return ReadLive(_live_freshness(live_path, live, snap, now))  # 2
    if isinstance(snap, SnapMissing):
        if isinstance(live, LiveMissing):  # 3
            listed = f"; projections beside it: {', '.join(nearby)}" if nearby else ""
            return Refuse(f"no projection at {live_path}; run `runledger project --db"
                          f" {live_path}` first{listed}")
        return Refuse(  # 7
            f"{live_path} is being written by a running `runledger project` and there is no"
            f" snapshot at {snap_path} to read instead; a projector of this version publishes"
            " one after its first batch: wait a moment, or restart `runledger project`")
    if isinstance(snap, SnapBad):  # 4
        return Refuse(snap.reason)
    if snap.layout != LAYOUT:  # 5
        return Refuse(
            f"snapshot {snap_path} has layout {snap.layout}, another runledger version's (this"
            f" one reads layout {LAYOUT}): run `runledger project --db {live_path}` with this"
            " version, which publishes a snapshot it can read")
    return ReadSnapshot(Freshness(  # 6
        snap_path, True, isinstance(live, LiveLocked), snap.taken_at,
        max(0.0, now - snap.taken_at), snap.behind()))


def _live_freshness(path: str, live: LiveOpen, snap: Snap, now: float) -> Freshness:
    if (isinstance(snap, SnapshotMeta) and snap.layout == LAYOUT
            and all(snap.positions.get(tp, -1) >= o for tp, o in live.offsets.items())):
        return Freshness(path, False, False, snap.taken_at, max(0.0, now - snap.taken_at),
                         snap.behind())
    return Freshness(path, False, False)


# -- looking, deciding, opening -------------------------------------------------------

def layout_problem(con: duckdb.DuckDBPyConnection, path: str | Path) -> str | None:
    """Why the tables of the file open on ``con`` do not fit this runledger, or None."""
    for table in TABLES:
        found = [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
            "ORDER BY ordinal_position", [table.name]).fetchall()]
        expected = [name for name, _ in table.columns]
        if found != expected:
            return (f"{path}: table {table.name} has columns {', '.join(found) or 'none'};"
                    f" this runledger reads {', '.join(expected)}. The file was made by"
                    " another version: rebuild it from the log with `runledger replay --db"
                    " NEW` and query that")
    return None


def _open_live(path: Path) -> tuple[Live, duckdb.DuckDBPyConnection | None]:
    if not path.exists():
        return LiveMissing(), None
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            return LiveLocked(), None
        raise QueryError(f"cannot open {path}: {exc}") from None
    except duckdb.Error as exc:
        raise QueryError(f"cannot open {path}: {exc}") from None
    problem = layout_problem(con, path)
    offsets = {} if problem else {(t, p): o for t, p, o in con.execute(
        "SELECT topic, part, next_offset FROM offsets").fetchall()}
    return LiveOpen(offsets, problem), con


def _open_snapshot(path: Path) -> tuple[Snap, duckdb.DuckDBPyConnection | None]:
    if not path.exists():
        return SnapMissing(), None
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        return SnapBad(f"cannot open the snapshot {path} ({exc}); remove it: a running"
                       " `runledger project` publishes a new one"), None
    try:
        return read_meta(con, path), con
    except SnapshotError as exc:
        con.close()
        return SnapBad(str(exc)), None


def open_projection(db: str | Path) -> tuple[duckdb.DuckDBPyConnection, Freshness]:
    """A read-only connection to the live projection or its snapshot, and how fresh it is."""
    live_path = Path(db)
    live, live_con = _open_live(live_path)
    # Looked at even beside an open live file: it may say how far behind that file is.
    snap, snap_con = _open_snapshot(snapshot_path(live_path))
    near = (tuple(sorted(p.name for p in live_path.parent.glob("*.duckdb")))
            if live_path.parent.is_dir() else ())
    choice = choose(str(live_path), live, snap, time.time(), near)
    keep = live_con if isinstance(choice, ReadLive) else (
        snap_con if isinstance(choice, ReadSnapshot) else None)
    for con in (live_con, snap_con):
        if con is not None and con is not keep:
            con.close()
    if isinstance(choice, Refuse) or keep is None:
        raise QueryError(choice.message if isinstance(choice, Refuse) else str(choice))
    return keep, choice.freshness
