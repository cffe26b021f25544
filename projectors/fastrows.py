"""Rows from columns: the compiled route's twin of ``projectors.tables.rows_for``.

For the records ``projectors.fastpath`` sends down the compiled route, the rows
are built as Arrow columns from a type's decoded columns (``events.columnar``):
the ``events`` row of every record (its payload written in compiled code,
``events.columnar.payloads``), and the rows ``PICKS`` declares for a type on a
topic, each row field picked from the record's position, its fields or its
header. A type ``rows_for`` maps that is not declared here stays on the Python
route on that topic.

Tested in tests/projectors/test_fastpath.py (each pick held to ``rows_for``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from events.columnar import payloads
from events.topics import REPORTS, RUNS
from projectors.rows import (
    AlertResolutionRow,
    CheckpointRow,
    EndingRow,
    EventRow,
    ExitRow,
    HeartbeatRow,
    RejectionRow,
    RevocationRow,
    Row,
    ShardRow,
    StepRow,
)
from projectors.tables import TABLE_OF, Table


@dataclass(frozen=True, slots=True)
class Pick:
    """A table's rows from a type's columns: one per record, or with ``each`` one per
    item of that list field. Each row field is taken from the record's position
    (``topic``, ``part``, ``ofs``), from ``sources`` (a field path such as
    ``header.occurred_at``, ``each.step`` for the item's, or ``=text`` for a
    constant), else from the event's field of the same name, else from the item's,
    else from the header's."""

    row: type[Row]
    sources: tuple[tuple[str, str], ...] = ()
    each: str | None = None


_AT = (("occurred_at", "header.occurred_at"),)
# (topic, type): what rows_for maps it to there.
PICKS: dict[tuple[str, str], Pick] = {
    (RUNS, "StepCommitted"): Pick(StepRow, _AT),
    (RUNS, "ManifestCommitted"): Pick(CheckpointRow, (("committed_at", "header.occurred_at"),)),
    (RUNS, "CheckpointRevoked"): Pick(RevocationRow, _AT),
    (RUNS, "ShardWritten"): Pick(ShardRow),
    (RUNS, "WriteRejected"): Pick(RejectionRow, _AT),
    (RUNS, "AlertResolved"): Pick(AlertResolutionRow, _AT),
    (RUNS, "RunCancelled"): Pick(EndingRow, (*_AT, ("outcome", "=cancelled"))),
    (RUNS, "WorkerExited"): Pick(ExitRow, _AT),
    (REPORTS, "HeartbeatRecorded"): Pick(HeartbeatRow, _AT),
    # A node's record of its members' beats: one row per member, as each member's
    # own HeartbeatRecorded would have made.
    (REPORTS, "MembersHeartbeatRecorded"): Pick(HeartbeatRow, _AT, each="beats"),
}

# The rows of one type on one topic: (topic, partition of each, offset of each).
Pos = tuple[str, np.ndarray, np.ndarray]


def event_rows(name: str, batch: pa.RecordBatch, pos: Pos, versions: np.ndarray) -> pa.Table:
    """The ``events`` rows of ``batch``'s records (all of type ``name``)."""
    h = batch.column("header")
    topic, parts, offsets = pos
    n = len(batch)
    return _table(TABLE_OF[EventRow], {
        "topic": pa.array([topic] * n, pa.string()), "part": parts, "ofs": offsets,
        "run_id": h.field("run_id"), "generation": h.field("generation"),
        "event_type": pa.array([name] * n, pa.string()), "event_id": h.field("event_id"),
        "occurred_at": h.field("occurred_at"), "producer": h.field("producer"),
        "causation_id": h.field("causation_id"), "writer_version": versions,
        "payload": payloads(batch),
    })


def picked_rows(pick: Pick, batch: pa.RecordBatch, pos: Pos) -> pa.Table:
    """``pick``'s rows of ``batch``'s records."""
    topic, parts, offsets = pos
    header = batch.column("header")
    fields = set(batch.schema.names)
    # Each row's record: itself, or with ``each`` the record of each item.
    record = np.arange(len(batch))
    item: Any = None
    items: set[str] = set()
    if pick.each is not None:
        listed = batch.column(pick.each)
        record = pc.list_parent_indices(listed).to_numpy()
        item = pc.list_flatten(listed)
        items = {f.name for f in item.type}
    n = len(record)
    sources = dict(pick.sources)
    columns: dict[str, Any] = {"topic": pa.array([topic] * n, pa.string()),
                               "part": parts[record], "ofs": offsets[record]}
    for name in pick.row._fields[3:]:
        source = sources.get(name) or (name if name in fields else f"each.{name}"
                                       if name in items else f"header.{name}")
        if source.startswith("="):
            columns[name] = pa.array([source[1:]] * n, pa.string())
        elif source.startswith("each."):
            columns[name] = item.field(source[len("each."):])
        elif source.startswith("header."):
            columns[name] = header.field(source[len("header."):]).take(record)
        else:
            columns[name] = batch.column(source).take(record)
    return _table(TABLE_OF[pick.row], columns)


def _table(table: Table, columns: dict[str, Any]) -> pa.Table:
    """``columns`` cast to ``table``'s Arrow schema (an Avro int to a BIGINT column, as
    the Python route's Arrow conversion does)."""
    arrays = [_arrow(columns[f.name]).cast(f.type) for f in table.arrow]
    return pa.Table.from_arrays(arrays, schema=table.arrow)


def _arrow(values: Any) -> pa.Array:
    return values if isinstance(values, pa.Array | pa.ChunkedArray) else pa.array(values)


def insert(con: duckdb.DuckDBPyConnection, tables: dict[type[Row], pa.Table]) -> None:
    """Insert the compiled route's rows, inside the caller's transaction."""
    for row, data in tables.items():
        con.from_arrow(data).insert_into(TABLE_OF[row].name)


def events_of(tables: dict[type[Row], pa.Table], run_id: str) -> int:
    """How many of the compiled route's ``events`` rows are of ``run_id``."""
    events = tables.get(EventRow)
    if events is None:
        return 0
    return int(pc.sum(pc.equal(events.column("run_id"), run_id)).as_py() or 0)


def concat(parts: Mapping[type[Row], Sequence[pa.Table]]) -> dict[type[Row], pa.Table]:
    """Each table's parts as one Arrow table."""
    return {row: pa.concat_tables(list(tables)) for row, tables in parts.items()}
