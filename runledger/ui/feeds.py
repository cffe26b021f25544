"""What the live view reads, each kept fresh off the request path by its own thread.

- :class:`StatusFeed`: the newest summary of every run on the compacted
  ``runledger.status`` (``events.kafka.statuslog.read_status``), read again every
  ``poll_s``;
- :class:`NodeFeed`: the node rows ``runledger nodes`` shows (the agents'
  signed registrations and heartbeats and the node facts, folded by
  ``runledger.views.nodeview``), read again every ``nodes_every_s``;
- :class:`Projection`: the projector's read-only snapshot (``queries.source``),
  opened again whenever the projector publishes a newer one.

No feed keeps a second copy of the truth: each holds the last answer it read
and when, and the error of its last try, so a page can say how old what it
shows is and why it is not newer. A feed never raises into a request: a broker
that is down or a projection that is missing is a state the page shows.

Tested in tests/runledger/ui/test_feeds.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

import duckdb

from events.errors import EventsError
from projectors.errors import ProjectorError
from queries.errors import QueryError
from runledger.errors import RunledgerError

LOG = logging.getLogger("runledger.ui")
T = TypeVar("T")
# What a feed's read may fail with that the page reports instead of crashing on.
EXPECTED = (EventsError, ProjectorError, QueryError, RunledgerError, duckdb.Error, OSError)


@dataclass(slots=True)
class Reading(Generic[T]):
    """A feed's last answer, when it was read (epoch seconds) and its last failure."""

    value: T | None = None
    read_at: float | None = None
    error: str | None = None
    failed_at: float | None = None
    tries: int = 0

    def health(self, now: float, stale_after_s: float) -> dict[str, Any]:
        """For the page: how old the answer is and whether it is to be trusted now."""
        age = None if self.read_at is None else round(now - self.read_at, 1)
        stale = age is None or age > stale_after_s
        return {"age_s": age, "stale": stale, "error": self.error,
                "state": ("unreachable" if self.error and stale else
                          "starting" if self.read_at is None else
                          "behind" if stale else "ok")}


class Feed(Generic[T]):
    """One reader in its own daemon thread, every ``every_s`` seconds until closed."""

    def __init__(self, name: str, read: Callable[[], T], every_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self._read = read
        self.every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._reading: Reading[T] = Reading()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"ui-{name}", daemon=True)

    def start(self) -> Feed[T]:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._wake.set()

    def poke(self) -> None:
        """Read again now (a page asked for something the last answer did not have)."""
        self._wake.set()

    def reading(self) -> Reading[T]:
        with self._lock:
            r = self._reading
            return Reading(r.value, r.read_at, r.error, r.failed_at, r.tries)

    def once(self) -> None:
        """One read, its answer or its error kept (the thread's step; tests call it)."""
        try:
            value = self._read()
        except EXPECTED as exc:
            with self._lock:
                self._reading.error = f"{type(exc).__name__}: {exc}"
                self._reading.failed_at = self._clock()
                self._reading.tries += 1
            return
        with self._lock:
            self._reading = Reading(value, self._clock(), None, None,
                                    self._reading.tries + 1)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.once()
            except Exception as exc:  # a bug: logged, shown, and the feed goes on
                LOG.exception("the %s feed failed", self.name)
                with self._lock:
                    self._reading.error = f"{type(exc).__name__}: {exc} (a bug; see the log)"
                    self._reading.failed_at = self._clock()
            self._wake.wait(self.every_s)
            self._wake.clear()


@dataclass(slots=True)
class _Open:
    con: duckdb.DuckDBPyConnection
    freshness: Any
    stamp: tuple[int, int] | None
    version: str = ""
    opened_at: float = field(default_factory=time.time)


class Projection:
    """The projection a page reads: reopened when the snapshot file changes.

    DuckDB connections are not shared between threads here: each use takes the
    lock, so one request reads at a time (the pages are small queries)."""

    def __init__(self, db: Path, reopen_every_s: float = 1.0) -> None:
        self.db = db
        self._reopen_every_s = reopen_every_s
        self._lock = threading.Lock()
        self._open: _Open | None = None
        self.error: str | None = None
        # Which projection ``use`` yields (read inside it): answers computed from it
        # may be kept until it changes.
        self.version = ""

    def _stamp(self) -> tuple[int, int] | None:
        from projectors.snapshot import snapshot_path
        try:
            st = snapshot_path(self.db).stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    def _current(self) -> _Open:
        stamp = self._stamp()
        cur = self._open
        fresh = (cur is not None and cur.stamp == stamp
                 and (stamp is not None or time.time() - cur.opened_at < self._reopen_every_s))
        if cur is not None and fresh:
            return cur
        from queries.source import open_projection
        if cur is not None:
            # First: DuckDB keeps one instance per path in a process, and a connection
            # still open to the replaced file would hand the new one the old database.
            cur.con.close()
            self._open = None
        con, freshness = open_projection(self.db)
        self._open = _Open(con, freshness, stamp, self._version(stamp))
        return self._open

    def _version(self, stamp: tuple[int, int] | None) -> str:
        """Which projection is open: the snapshot's inode and mtime, else the live file's
        (unchanged while no projector writes it)."""
        if stamp is not None:
            return f"snapshot:{stamp[0]}:{stamp[1]}"
        try:
            st = self.db.stat()
        except OSError:
            return "live:?"
        return f"live:{st.st_ino}:{st.st_mtime_ns}"

    @contextmanager
    def use(self) -> Iterator[tuple[duckdb.DuckDBPyConnection, Any]]:
        """The open projection and its ``queries.source.Freshness``; QueryError (with
        what to do) when there is none to read."""
        with self._lock:
            try:
                opened = self._current()
            except EXPECTED as exc:
                self.error = str(exc)
                raise QueryError(str(exc)) from None
            self.error = None
            self.version = opened.version
            cur = opened.con.cursor()
            fresh = opened.freshness
            if fresh.taken_at is not None:  # its age now, not when it was opened
                fresh = replace(fresh, age_s=max(time.time() - fresh.taken_at, 0.0))
            try:
                yield cur, fresh
            finally:
                cur.close()

    def close(self) -> None:
        with self._lock:
            if self._open is not None:
                self._open.con.close()
                self._open = None


__all__ = ["EXPECTED", "Feed", "Projection", "Reading"]
