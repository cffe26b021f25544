"""Kafka -> DuckDB: batches of records applied with their offsets in one transaction.

The projector reads every partition of ``runledger.runs`` and
``runledger.reports`` with ``events.kafka.reader.LogReader`` from the offsets stored
in the database (from the beginning when there are none), so a restart
resumes exactly after the last committed batch: a crash mid-batch loses the
whole batch's transaction, never half of it, and nothing is applied twice.
A record that cannot be decoded becomes a ``quarantine`` row and projection
goes on, and so does a record whose rows cannot be stored (``UNPROJECTABLE``).
Replay is the same loop into an empty database, stopping at the ends the log had
when it started, however much keeps arriving. A stored offset that retention or
``delete_records`` has left below its partition's start (``events.kafka.offsets``)
stops the projector with :class:`~projectors.errors.ProjectionGap` naming the
records lost and the rebuild, never a silent skip past them, live or not.

Reports pass the controller's door (``events.kafka.reportdoor``) before they are
projected: an agent's report believed only under its node's key, a worker's only
under its run's certified key, each judged as the keys were when the record was
appended (so a projection rebuilt after a revocation believes what was believed
then). A refused report becomes a ``quarantine`` row with the door's reason, as
the controller quarantines it: a forged heartbeat never reaches ETTR. A batch's
signatures are verified ahead, in one compiled call on other cores, while the
next batch is read (``events.kafka.ahead``); the door's verdicts are the same.

With ``snapshot_every_s`` the loop also publishes a read-only snapshot of the
file for readers (``projectors.snapshot``) once something changed and at least
that long after the previous one, and once more when it stops.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from events.codec import Codec, default_codec
from events.errors import EventsError
from events.kafka.ahead import DEFAULT_THREADS, Ahead, Checking
from events.kafka.clients import decode_or_quarantine
from events.kafka.keys import read_ring_or_empty
from events.kafka.offsets import LogGap
from events.kafka.reader import LogReader
from events.kafka.reportdoor import ReportDoor
from events.record import Quarantined, Record
from events.topics import REPORTS, RUNS
from projectors.errors import ProjectionGap, ProjectionLayoutError, ProjectorError
from projectors.fastpath import NATIVE, FastPath, Split
from projectors.fastrows import events_of, insert
from projectors.rows import EventRow, QuarantineRow, Row
from projectors.snapshot import LiveFile, publish
from projectors.tables import DDL, TABLE_OF, TABLES, Table, rows_for

TOPICS = (RUNS, REPORTS)
# The quarantine reason of a record whose rows cannot be stored (a value no column of
# this projection file holds, text Arrow refuses, a payload that cannot be mapped).
UNPROJECTABLE = "unprojectable"
# What storing such a record raises; a broken database or disk raises something
# else, and that stops the projector instead of quarantining the whole log.
UNSTORABLE: tuple[type[BaseException], ...] = (
    ValueError, TypeError, OverflowError, pa.ArrowException, duckdb.DataError)
log = logging.getLogger("runledger.projectors.projector")
# Test hook: ``<run id>:<n>`` kills the projector with SIGKILL inside the
# transaction of the batch that takes that run past n projected records.
CRASH_ENV = "RUNLEDGER_PROJECTOR_CRASH"
# How long a projector waits for a reader (``query``, ``report``) of the file to let go.
LOCK_WAIT_S = 30.0


# Records per transaction at most. A commit and each table's insert cost a fixed
# ~30 ms a batch here whatever its size: batches of 20,000 spend a quarter of the
# DuckDB time of batches of 5,000 on them, and a batch only fills when records wait.
BATCH = 20_000


class Projector:
    def __init__(self, db_path: str | Path, bootstrap: str, *, codec: Codec | None = None,
                 batch: int = BATCH, snapshot_every_s: float | None = None,
                 verify_threads: int = DEFAULT_THREADS, compiled: bool = True) -> None:
        self.db_path = str(db_path)
        self.bootstrap = bootstrap
        self.codec = codec or default_codec()
        self.batch = batch
        # Threads that verify a batch's report signatures ahead of the door
        # (events.kafka.ahead); 0: the door verifies each on this thread.
        self.verify_threads = verify_threads
        # The compiled route for the records that need only their fields
        # (projectors.fastpath); None: every record takes the Python route.
        self.fastpath = FastPath(self.codec) if compiled and NATIVE else None
        # None: never publish a snapshot (replay, tests); 0: after every batch.
        self.snapshot_every_s = snapshot_every_s
        self.published_at: float | None = None  # wall clock of the last snapshot
        self.snapshot_s = 0.0  # how long publishing the last one took
        self._published_mono = float("-inf")
        self._dirty = True  # the first loop publishes even an empty projection
        # Held by whoever uses this connection from another thread (the metrics
        # scrape) and while a snapshot is taken, so a checkpoint never waits on a read.
        self.db_lock = threading.Lock()
        self.con = _connect(self.db_path, LOCK_WAIT_S)
        for table, ddl in DDL.items():
            self.con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({ddl})")
        self._check_layout()
        # Only a publisher needs it (and must keep it open: projectors.snapshot.LiveFile).
        self._live = LiveFile(self.db_path) if snapshot_every_s is not None else None
        self.applied = 0
        # The door of reports, made when the loop starts (it reads the keys log).
        self.door: ReportDoor | None = None
        # Counters for projectors.metrics. Only this thread writes them; a scrape
        # thread reads single attributes, and rebinding a whole dict is atomic.
        self.quarantined = 0
        self.compiled_records = 0  # of ``applied``, those the compiled route took
        self.batches = 0
        self.last_batch = 0
        self.last_batch_s = 0.0
        # The offset each partition's end-of-partition event reported: past the
        # transaction markers, which the stored next offset (one past the last
        # record applied) never covers, so a caught-up topic shows no lag.
        self.reached: dict[tuple[str, int], int] = {}
        crash = os.environ.get(CRASH_ENV, "")
        run, _, n = crash.rpartition(":")
        self._crash = (run, int(n)) if run and n.isdigit() else None
        self._seen = 0

    def close(self) -> None:
        self.con.close()
        if self._live is not None:
            self._live.close()  # after the connection: this drops the file's lock

    def _check_layout(self) -> None:
        """Refuse a file whose tables another runledger version made: rows would not fit."""
        for table in TABLES:
            found = [r[0] for r in self.con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position", [table.name]).fetchall()]
            expected = [name for name, _ in table.columns]
            if found != expected:
                self.con.close()
                raise ProjectionLayoutError(
                    f"{self.db_path}: table {table.name} has columns {', '.join(found)}; this "
                    f"runledger writes {', '.join(expected)}. The file was made by another "
                    "version: rebuild it from the log with `runledger replay --db NEW`")

    def offsets(self) -> dict[tuple[str, int], int]:
        rows = self.con.execute("SELECT topic, part, next_offset FROM offsets").fetchall()
        return {(t, p): o for t, p, o in rows}

    def run(self, *, until_caught_up: bool = False, stop: threading.Event | None = None,
            poll_s: float = 0.5, retry_s: float = 0.0) -> int:
        """Project until ``stop`` is set, or (``until_caught_up``) exactly the records
        below the ends the partitions had when this call started, however many keep
        arriving. ``retry_s``: how long a broker that is down or failing over is
        waited for before ``BrokerUnavailable`` (at the start, and while catching up)."""
        if self.door is None:
            self.door = ReportDoor(lambda: read_ring_or_empty(
                self.bootstrap, name="runledger-projector-keys", retry_s=max(retry_s, 5.0)),
                historic=True)
        try:
            # raw: the door judges the exact value bytes and headers of each report.
            reader = LogReader(self.bootstrap, TOPICS, start=self.offsets(), codec=self.codec,
                               name="runledger-projector", bounded=until_caught_up,
                               strict=until_caught_up and retry_s > 0, retry_s=retry_s,
                               raw=True)
        except LogGap as gap:
            raise self._gap(gap) from None
        ahead = Ahead(self.verify_threads) if self.verify_threads else None
        try:
            total = 0
            # A full batch whose signatures are being verified while the next one is
            # read: applied after that read, before anything read later. A batch that
            # is not full (the reader is at the log's head) is applied at once, so
            # reading ahead never delays a live projection.
            held: tuple[list[Record | Quarantined], Checking | None, float,
                        Split | None] | None = None
            while not (stop is not None and stop.is_set()):
                items, split, decode_s = self._read(reader, poll_s)
                size = len(split.messages) if split is not None else len(items)
                self.reached = {**self.reached, **reader.reached}
                judged: list[Record | Quarantined] = (
                    [record for _, record in split.judged] if split is not None else [])
                checking = (ahead.check(self.door.ring, items + judged)
                            if ahead is not None and self.door is not None else None)
                if held is not None:
                    total += self._apply(*held)
                    held = None
                if size:
                    if size >= self.batch and not (until_caught_up and reader.caught_up):
                        held = (items, checking, decode_s, split)
                    else:
                        total += self._apply(items, checking, decode_s, split)
                    self._dirty = True
                if until_caught_up and reader.caught_up and held is None:
                    break
                if held is None:
                    self._maybe_publish(reader)
            if held is not None:  # stopped while a batch was held: it is read, apply it
                total += self._apply(*held)
            self._maybe_publish(reader, final=True)
            return total
        except LogGap as gap:
            raise self._gap(gap) from None
        finally:
            reader.close()
            if ahead is not None:
                ahead.close()

    def _gap(self, gap: LogGap) -> ProjectionGap:
        """The one line a projector that meets a gap stops with: what is lost, what to do."""
        return ProjectionGap(
            f"{self.db_path}: {gap}; the projection stops rather than skip them. Rebuild it "
            "from what the log still holds with `runledger replay --db NEW` (without the "
            "deleted records' rows), or keep this file as it is")

    def _maybe_publish(self, reader: LogReader, *, final: bool = False) -> None:
        """Publish a snapshot when one is due: something changed since the last one, and
        it is at least ``snapshot_every_s`` old (or this is the loop's last call)."""
        every = self.snapshot_every_s
        if every is None or self._live is None or not self._dirty:
            return
        if not final and time.monotonic() - self._published_mono < every:
            return
        started = time.monotonic()
        try:
            ends: dict[tuple[str, int], tuple[int, int]] | None = reader.watermarks(2.0)
        except EventsError as exc:
            log.warning("log ends unavailable, the snapshot says its lag is unknown: %s", exc)
            ends = None
        reached = self.reached
        positions = {tp: max(o, reached.get(tp, o)) for tp, o in self.offsets().items()}
        positions.update({tp: o for tp, o in reached.items() if tp not in positions})
        taken_at = time.time()
        try:
            with self.db_lock:
                done = publish(self.con, self._live, positions=positions, ends=ends,
                               taken_at=taken_at)
        except (OSError, duckdb.Error) as exc:
            # The projection matters more than its copy: go on, try again next time.
            log.warning("could not publish the snapshot of %s: %s", self.db_path, exc)
            done = None
        if done is not None:
            self._dirty = False
            self.published_at, self.snapshot_s = taken_at, time.monotonic() - started
        self._published_mono = time.monotonic()

    def _read(self, reader: LogReader, poll_s: float
              ) -> tuple[list[Record | Quarantined], Split | None, float]:
        """A batch: the Python route's records, the compiled route's rows (None without
        it), and how long decoding took."""
        if self.fastpath is None:
            return reader.read_batch(self.batch, poll_s), None, reader.last_read_s
        messages = reader.read_messages(self.batch, poll_s)
        started = time.perf_counter()
        split = self.fastpath.split(messages)
        items = [decode_or_quarantine(self.codec, m, raw=True) for m in split.slow]
        return items, split, time.perf_counter() - started

    def _apply(self, items: list[Record | Quarantined], checking: Checking | None = None,
               decode_s: float = 0.0, split: Split | None = None) -> int:
        started = time.monotonic() - decode_s
        if checking is not None:
            checking.wait()  # every good signature is now known to the door
        if self.door is not None:
            items = [self._judged(item) for item in items]
        refused: frozenset[int] = frozenset()
        if split is not None and split.judged:  # compiled-route reports: rows if believed
            verdicts = [(i, self._judged(record)) for i, record in split.judged]
            refused = frozenset(i for i, v in verdicts if isinstance(v, Quarantined))
            items += [v for _, v in verdicts if isinstance(v, Quarantined)]
        quarantined = self._commit_or_isolate(items, split, refused)
        size = len(split.messages) if split is not None else len(items)
        self.compiled_records += split.fast - len(refused) if split is not None else 0
        self.applied += size
        self.quarantined += quarantined
        self.batches += 1
        self.last_batch, self.last_batch_s = size, time.monotonic() - started
        return size

    def _judged(self, item: Record | Quarantined) -> Record | Quarantined:
        """A report the door refuses, as the quarantine row the controller would keep."""
        if isinstance(item, Quarantined) or item.topic != REPORTS or self.door is None:
            return item
        refusal = self.door.judge(item)
        if refusal is None:
            return item
        return Quarantined(item.topic, item.partition, item.offset, refusal[0], refusal[1],
                           key=item.event.run_id, value=item.value)

    def _commit_or_isolate(self, items: list[Record | Quarantined], split: Split | None = None,
                           refused: frozenset[int] = frozenset()) -> int:
        """Commit ``items`` (and ``split``'s rows); when a value in them cannot be stored,
        find the records that hold one (halving the batch; the whole batch on the
        Python route first) and commit each as a ``quarantine`` row, so one bad record
        never stalls projection. Returns the quarantine rows written."""
        try:
            return self._commit(items, split, refused)
        except UNSTORABLE as exc:
            if split is not None and split.fast:
                items = [self._judged(decode_or_quarantine(self.codec, m, raw=True))
                         for m in split.messages]
                return self._commit_or_isolate(items)
            if len(items) > 1:
                mid = len(items) // 2
                return self._commit_or_isolate(items[:mid]) + self._commit_or_isolate(items[mid:])
            bad = unprojectable(items[0], exc, self.codec)
            log.warning("%s", bad)
            return self._commit([bad])

    def _commit(self, items: list[Record | Quarantined], split: Split | None = None,
                refused: frozenset[int] = frozenset()) -> int:
        """One transaction: every item's rows, the compiled route's, and the partitions'
        next offsets."""
        by_table: dict[type[Row], list[tuple[Any, ...]]] = {}
        ends: dict[tuple[str, int], int] = {}
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            for item in items:
                topic, part, ofs = item.topic, item.partition, item.offset
                if isinstance(item, Quarantined):
                    by_table.setdefault(QuarantineRow, []).append(QuarantineRow(
                        topic, part, ofs, key=item.key or None, reason=item.reason,
                        detail=item.detail, raw=item.value))
                else:
                    for row in rows_for(item):
                        kept = by_table.get(type(row))
                        if kept is None:
                            kept = by_table[type(row)] = []
                        # Kept as a plain tuple: CPython's GC stops tracking a tuple of
                        # scalars but never a NamedTuple, and a batch's rows kept tracked
                        # made collections cost about a third more Python time per batch.
                        kept.append(tuple(row))
                ends[(topic, part)] = ofs + 1
            for row_type, rows in by_table.items():
                _insert(con, TABLE_OF[row_type], rows)
                if row_type is EventRow:
                    self._maybe_crash(rows)
            if split is not None:
                tables = split.tables(refused)
                insert(con, tables)
                ends = split.ends
                self._maybe_crash([], events_of(tables, self._crash[0]) if self._crash else 0)
            _store_offsets(con, ends)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return len(by_table.get(QuarantineRow, ()))

    def _maybe_crash(self, rows: list[tuple[Any, ...]], more: int = 0) -> None:
        if self._crash is None:
            return
        run, n = self._crash
        self._seen += sum(1 for r in rows if EventRow._make(r).run_id == run) + more
        if self._seen >= n:
            os.kill(os.getpid(), signal.SIGKILL)  # mid-transaction: nothing of it may stick


def _connect(path: str, wait_s: float) -> duckdb.DuckDBPyConnection:
    """The writer's connection. Readers open the live file only while no projector
    holds it, and only for as long as one query or report takes: wait them out."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return duckdb.connect(path)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():
                raise
            if time.monotonic() >= deadline:
                raise ProjectorError(
                    f"{path} is held by another process ({exc}); if another `runledger"
                    " project` writes it, stop that one or give this one another --db") from None
            time.sleep(0.2)


# DuckDB binds ``executemany`` parameters row by row (~1,300 rows/s here); an
# Arrow table of the batch is scanned as a whole, about 100 times faster. A
# relation over it costs a third less per call than registering a view, running
# an INSERT and unregistering it again, and a batch makes one call per table.
def _insert(con: duckdb.DuckDBPyConnection, table: Table, rows: list[tuple[Any, ...]]) -> None:
    con.from_arrow(table.batch(rows)).insert_into(table.name)


# One statement for every partition of the batch: ``executemany`` of the upsert
# took ~12 ms a batch for a handful of rows, a multi-row VALUES about 2 ms.
def _store_offsets(con: duckdb.DuckDBPyConnection, ends: dict[tuple[str, int], int]) -> None:
    if not ends:
        return
    values = ", ".join(["(?, ?, ?)"] * len(ends))
    con.execute(f"INSERT INTO offsets VALUES {values} ON CONFLICT (topic, part)"
                " DO UPDATE SET next_offset = excluded.next_offset",
                [v for (t, p), o in ends.items() for v in (t, p, o)])


def unprojectable(item: Record | Quarantined, exc: BaseException, codec: Codec) -> Quarantined:
    """The quarantine entry of a record none of whose rows could be stored: where it
    was, why (the event and the error), and its bytes (re-encoded: the codec's
    encoding is deterministic). Text is made storable whatever the record held."""
    if isinstance(item, Quarantined):
        what, key, raw = f"{item.reason}: {item.detail}", item.key, item.value
    else:
        event = item.event
        what, key = f"{event.event_type} {event.header.event_id}", event.run_id
        try:
            raw = codec.encode(event)
        except Exception:  # the bytes are a courtesy; the row is what matters
            raw = None
    detail = f"{what}: {type(exc).__name__}: {exc}"
    return Quarantined(item.topic, item.partition, item.offset, UNPROJECTABLE,
                       _storable(detail), key=_storable(key) if key else None, value=raw)


def _storable(text: str) -> str:
    # Lone surrogates (from a key or a message) are the text Arrow refuses.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def table_digests(db_path: str | Path) -> dict[str, str]:
    """A content hash per table (order-independent), for comparing a replay with the live one."""
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        out = {}
        for table in DDL:
            if table == "offsets":
                continue
            row = con.execute(
                f"SELECT count(*), coalesce(sum(hash(t)), 0) FROM {table} t").fetchone()
            out[table] = f"{row[0]}:{row[1]}" if row else "0:0"
        return out
    finally:
        con.close()
