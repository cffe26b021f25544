"""The read model's tables: DDL, columns and Arrow schema derived from one row type
each, and the rows every event type maps to (pure; DuckDB in memory, no broker)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from collections import Counter

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.model import (
    CorruptionClassified,
    CorruptionSuspected,
    CursorAdvanced,
    Event,
    GenerationStarted,
    RunCancelled,
    StepTimesRecorded,
)
from events.record import Record
from events.topics import COMMANDS, REPORTS, REQUESTS, RUNS
from projectors.rows import (
    CursorRow,
    EndingRow,
    EventRow,
    GenerationRow,
    MemberRow,
    OffsetRow,
    QuarantineRow,
    RankStepRow,
    Row,
    SourceCountRow,
    SqlType,
    SuspicionRow,
    VerdictRow,
)
from projectors.tables import DDL, TABLE_OF, TABLES, Table, rows_for
from tests.events.sample_events import one_of_each, variants
from tests.events.strategies import any_event

POSITION = [("topic", "VARCHAR"), ("part", "INTEGER"), ("ofs", "BIGINT")]
SAMPLES = one_of_each("run-t") + variants("run-t")

# Which tables (besides ``events``) a record of each type feeds, per topic. Facts
# come only from the runs topic, the observations that stay reports only from
# the reports topic; everything else is in ``events`` alone.
FEEDS: dict[str, dict[str, set[str]]] = {
    RUNS: {
        "RunSubmitted": {"runs"}, "GenerationStarted": {"generations", "members"},
        "StepCommitted": {"steps"}, "ManifestCommitted": {"checkpoints"},
        "CheckpointRevoked": {"revocations"}, "ShardWritten": {"shards"},
        "CursorAdvanced": {"cursors", "source_counts"}, "WriteRejected": {"rejections"},
        "FailureClassified": {"failures"}, "RunFinished": {"endings"},
        "RunCancelled": {"endings"}, "AlertRaised": {"alerts"},
        "AlertResolved": {"alert_resolutions"}, "WorkerExited": {"exits"},
        "CheckpointStaged": {"staging"}, "NodeLost": {"lost_nodes"},
        "CorruptionSuspected": {"sdc_suspicions"}, "CorruptionClassified": {"sdc_verdicts"},
    },
    REPORTS: {
        "HeartbeatRecorded": {"heartbeats"}, "MembersHeartbeatRecorded": {"heartbeats"},
        "StepTimesRecorded": {"rank_steps"},
        "CheckpointRestored": {"restores"},
    },
}


def record(event: Event, topic: str = RUNS, partition: int = 2, offset: int = 7) -> Record:
    return Record(topic, partition, offset, 0, event, event.header.schema_version)


def python_types(table: Table) -> dict[str, tuple[type, ...]]:
    """Per column, the Python types its row field admits (``None`` as ``NoneType``)."""
    hints = typing.get_type_hints(table.row, include_extras=True)
    out = {}
    for name, _ in table.columns:
        base = typing.get_args(hints[name])[0]
        if typing.get_origin(base) in (typing.Union, types.UnionType):
            out[name] = typing.get_args(base)
        else:
            out[name] = (base,)
    return out


def conforms(row: Row) -> list[str]:
    """The fields of ``row`` whose value is not of the type its column declares."""
    table = TABLE_OF[type(row)]
    bad = []
    for (name, _), value, allowed in zip(table.columns, row, python_types(table).values(),
                                         strict=True):
        ok = isinstance(value, allowed) and not isinstance(value, bool)
        if float in allowed and isinstance(value, int) and not isinstance(value, bool):
            ok = True  # an int is a float value (PEP 484), and DOUBLE takes it
        if not ok:
            bad.append(f"{type(row).__name__}.{name}={value!r}")
    return bad


def table(name: str) -> Table:
    return next(t for t in TABLES if t.name == name)


# --- the declarations ----------------------------------------------------------------


def test_the_tables_are_pinned() -> None:
    """Queries (``queries/*.sql``) read these columns by name, and the digests of a
    projection made before a change must equal a replay's after it: a change to a
    table's name, columns, order or types is deliberate, and updates this pin."""
    text = "\n".join(f"{name}: {ddl}" for name, ddl in DDL.items())
    assert hashlib.sha256(text.encode()).hexdigest() == (
        "4347841e96e2c53075e3a3ec1071a9829170dbc68bfbaf081f1d0b55a4c42155"), text


def test_every_row_type_has_one_table_and_names_are_unique() -> None:
    assert len({t.name for t in TABLES}) == len(TABLES)
    assert len(TABLE_OF) == len(TABLES)
    assert list(DDL) == [t.name for t in TABLES]
    assert set(typing.get_args(Row)) == set(TABLE_OF)


@pytest.mark.parametrize("t", TABLES, ids=lambda t: t.name)
def test_ddl_columns_and_arrow_schema_agree(t: Table) -> None:
    names = [n for n, _ in t.columns]
    assert names == list(t.row._fields)
    assert all(isinstance(k, SqlType) for _, k in t.columns)
    assert t.arrow.names == names
    assert [f.type for f in t.arrow] == [k.arrow for _, k in t.columns]
    defs = ", ".join(f"{n} {k.name}" for n, k in t.columns)
    assert t.ddl == (defs + ", PRIMARY KEY (topic, part)" if t.row is OffsetRow else defs)
    con = duckdb.connect()
    con.execute(f"CREATE TABLE {t.name} ({t.ddl})")
    described = con.execute(f"DESCRIBE {t.name}").fetchall()
    assert [(r[0], r[1]) for r in described] == [(n, k.name) for n, k in t.columns]
    # An Arrow batch of the schema goes in as is: no column is cast or reordered.
    con.register("_batch", t.batch([]))
    con.execute(f"INSERT INTO {t.name} SELECT * FROM _batch")


@pytest.mark.parametrize("t", [t for t in TABLES if t.row is not OffsetRow],
                         ids=lambda t: t.name)
def test_every_row_starts_with_its_records_position(t: Table) -> None:
    assert [(n, k.name) for n, k in t.columns[:3]] == POSITION


# --- the mapping -----------------------------------------------------------------------


@pytest.mark.parametrize("topic", [RUNS, REPORTS, REQUESTS, COMMANDS])
def test_each_event_type_feeds_exactly_its_tables(topic: str) -> None:
    feeds = FEEDS.get(topic, {})
    for event in SAMPLES:
        rows = rows_for(record(event, topic))
        assert isinstance(rows[0], EventRow)
        assert [r for r in rows if isinstance(r, EventRow)] == rows[:1]
        fed = {TABLE_OF[type(r)].name for r in rows[1:]}
        assert fed == feeds.get(event.event_type, set()), (topic, event.event_type)


@given(st.sampled_from([RUNS, REPORTS, REQUESTS]), any_event,
       st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1))
def test_any_event_maps_to_rows_of_their_declared_types(topic: str, event: Event,
                                                        partition: int, offset: int) -> None:
    rows = rows_for(record(event, topic, partition, offset))
    e = rows[0]
    assert isinstance(e, EventRow)
    assert (e.run_id, e.generation, e.event_type, e.event_id) == (
        event.run_id, event.generation, event.event_type, event.header.event_id)
    for row in rows:
        assert row[:3] == (topic, partition, offset)
        assert conforms(row) == []


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([RUNS, REPORTS]), any_event)
def test_any_event_fits_its_columns(topic: str, event: Event) -> None:
    """Every value an event may carry (any Avro long, e.g. ``world_size = 2**40``)
    has a column wide enough: the Arrow batch builds and DuckDB stores it as it was."""
    con = duckdb.connect()
    for row in rows_for(record(event, topic, 5, 2**40)):
        t = TABLE_OF[type(row)]
        con.execute(f"CREATE TABLE IF NOT EXISTS {t.name} ({t.ddl})")
        con.register("_batch", t.batch([row]))
        con.execute(f"INSERT INTO {t.name} SELECT * FROM _batch")
        con.unregister("_batch")
        assert tuple(row) in con.execute(f"SELECT * FROM {t.name}").fetchall(), t.name


def test_mapped_values() -> None:
    def rows_of(kind: type[Event], topic: str = RUNS) -> list[Row]:
        (event,) = [e for e in SAMPLES if type(e) is kind]
        return rows_for(record(event, topic, 3, 11))[1:]

    (ending,) = rows_of(RunCancelled)
    assert isinstance(ending, EndingRow)
    assert (ending.outcome, ending.reason) == ("cancelled", "budget")
    ranks = rows_of(StepTimesRecorded, REPORTS)
    assert [(r.step, r.step_time_ms, r.input_wait_ms) for r in ranks
            if isinstance(r, RankStepRow)] == [(41, 810.0, 3.0), (42, 812.5, 0.5)]
    cursor, *counts = rows_of(CursorAdvanced)
    assert isinstance(cursor, CursorRow) and (cursor.step, cursor.position) == (100, 6400)
    assert [(c.source, c.count, c.target) for c in counts if isinstance(c, SourceCountRow)] == [
        ("code", 2400, 0.375), ("web", 4000, 0.625)]
    generation, *members = rows_of(GenerationStarted)
    assert isinstance(generation, GenerationRow) and generation.reason == "admitted"
    assert [(m.logical_id, m.node, m.slot, m.domain) for m in members
            if isinstance(m, MemberRow)] == [("r0", "node-a", 0, "rack-1"),
                                             ("r1", "node-b", 1, None)]
    assert {r[:3] for r in (ending, cursor, *counts, generation, *members)} == {(RUNS, 3, 11)}
    assert {r[:3] for r in ranks} == {(REPORTS, 3, 11)}


def test_a_suspicion_names_its_suspect_nodes_and_a_verdict_its_suspicion() -> None:
    (suspected,) = [e for e in SAMPLES if isinstance(e, CorruptionSuspected)]
    (row,) = rows_for(record(suspected))[1:]
    assert isinstance(row, SuspicionRow)
    assert (row.step, row.detector, row.state_part) == (12, "agreement",
                                                         "grad:block.linear1.weight")
    assert (json.loads(row.ranks), json.loads(row.suspect_nodes)) == ([1], ["node-b"])
    assert json.loads(row.nodes) == ["node-a", "node-b"]
    # No deviating minority (every rank suspect): every rank's node is suspect.
    everyone = dataclasses.replace(suspected, ranks=(), nodes=("node-c", "node-a"))
    (row,) = rows_for(record(everyone))[1:]
    assert isinstance(row, SuspicionRow) and json.loads(row.suspect_nodes) == ["node-c", "node-a"]
    (classified,) = [e for e in SAMPLES if isinstance(e, CorruptionClassified)]
    (verdict,) = rows_for(record(classified))[1:]
    assert isinstance(verdict, VerdictRow)
    assert (verdict.suspected_generation, verdict.step, verdict.verdict) == (1, 12, "transient")
    assert json.loads(verdict.nodes) == ["node-b"]


def test_rows_go_through_duckdb_unchanged() -> None:
    """Every table gets rows (one of each event type on both topics, a quarantined
    record, an offset); what DuckDB hands back equals what went in."""
    by_table: dict[str, list[Row]] = {}
    offset = 0
    for topic in (RUNS, REPORTS):
        for event in SAMPLES:
            for row in rows_for(record(event, topic, 0, offset)):
                by_table.setdefault(TABLE_OF[type(row)].name, []).append(row)
            offset += 1
    by_table["quarantine"] = [
        QuarantineRow(RUNS, 0, offset, key="run-t", reason="unknown_fingerprint",
                      detail="fingerprint 00ff", raw=b"\xc3\x01\x00\xff"),
        QuarantineRow(REPORTS, 1, 0, key=None, reason="empty", detail="tombstone", raw=None)]
    by_table["offsets"] = [OffsetRow(RUNS, 0, offset + 1), OffsetRow(REPORTS, 0, 9)]
    assert set(by_table) == set(DDL), "a table got no row: extend the samples"
    con = duckdb.connect()
    for name, rows in by_table.items():
        t = table(name)
        assert [c for r in rows for c in conforms(r)] == []
        con.execute(f"CREATE TABLE {t.name} ({t.ddl})")
        con.register("_batch", t.batch(rows))
        con.execute(f"INSERT INTO {t.name} SELECT * FROM _batch")
        con.unregister("_batch")
        back = con.execute(f"SELECT * FROM {t.name}").fetchall()
        assert Counter(back) == Counter(tuple(r) for r in rows), t.name


def test_payload_is_the_json_of_every_field_but_the_header() -> None:
    for event in SAMPLES:
        row = rows_for(record(event))[0]
        assert isinstance(row, EventRow)
        doc = json.loads(row.payload)
        assert list(doc) == sorted(f.name for f in dataclasses.fields(event)
                                   if f.name != "header"), event.event_type
        for f in dataclasses.fields(event):
            value = getattr(event, f.name)
            if isinstance(value, str | int | float) or value is None:
                assert doc[f.name] == value, (event.event_type, f.name)
