"""The DuckDB read model: its tables, derived from the row types, and the pure
mapping from a log record to rows.

Every record becomes one ``events`` row (the audit trail, payload as JSON)
plus rows of the typed tables its event feeds. Facts come from
``runledger.runs`` (what the controller accepted); observations that never
become facts (heartbeats, restores, staging) come from ``runledger.reports``.
Each row carries its record's ``(topic, partition, offset)``, so a table can
always be traced back to the log, and replay yields identical rows.

A table's DDL, column list and Arrow schema all come from its row type in
``projectors.rows``; queries (``queries/*.sql``) and the replay digests read
these tables by name, so a column's name, place and type are part of the
contract.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from events.model import (
    AlertRaised,
    AlertResolved,
    CheckpointRestored,
    CheckpointRevoked,
    CheckpointStaged,
    CorruptionClassified,
    CorruptionSuspected,
    CursorAdvanced,
    Event,
    FailureClassified,
    GenerationStarted,
    HeartbeatRecorded,
    ManifestCommitted,
    MembersHeartbeatRecorded,
    NodeLost,
    RunCancelled,
    RunFinished,
    RunSubmitted,
    ShardWritten,
    StepCommitted,
    StepTimesRecorded,
    WorkerExited,
    WriteRejected,
)
from events.record import Record
from events.topics import REPORTS, RUNS
from projectors.payload import payload
from projectors.rows import (
    AlertResolutionRow,
    AlertRow,
    CheckpointRow,
    CursorRow,
    EndingRow,
    EventRow,
    ExitRow,
    FailureRow,
    GenerationRow,
    HeartbeatRow,
    LostNodeRow,
    MemberRow,
    OffsetRow,
    QuarantineRow,
    RankStepRow,
    RejectionRow,
    RestoreRow,
    RevocationRow,
    Row,
    RunRow,
    ShardRow,
    SourceCountRow,
    SqlType,
    StagingRow,
    StepRow,
    SuspicionRow,
    VerdictRow,
)


@dataclass(frozen=True, slots=True)
class Table:
    """One table of the read model, everything derived from its row type."""

    name: str
    row: type[Row]
    columns: tuple[tuple[str, SqlType], ...]  # (name, type), in the row's field order
    ddl: str  # the column definitions inside CREATE TABLE (...)
    arrow: pa.Schema  # what a batch of rows is inserted as

    def batch(self, rows: Sequence[tuple[Any, ...]]) -> pa.Table:
        """``rows`` (this table's rows, or plain tuples of their values) as one Arrow
        table of its schema. Rows are tuples in column order: one ``zip`` gives the
        columns."""
        data = list(zip(*rows, strict=True)) or [()] * len(self.arrow)
        return pa.table([pa.array(values, type=field.type)
                         for values, field in zip(data, self.arrow, strict=True)],
                        schema=self.arrow)


def _table(name: str, row: type[Row], primary_key: tuple[str, ...] = ()) -> Table:
    hints = typing.get_type_hints(row, include_extras=True)
    cols = []
    for field in row._fields:
        sql = [m for m in getattr(hints[field], "__metadata__", ()) if isinstance(m, SqlType)]
        if len(sql) != 1:
            raise TypeError(f"{row.__name__}.{field} needs exactly one SQL type, got {sql}")
        cols.append((field, sql[0]))
    parts = [f"{n} {t.name}" for n, t in cols]
    if primary_key:
        parts.append(f"PRIMARY KEY ({', '.join(primary_key)})")
    schema = pa.schema([pa.field(n, t.arrow) for n, t in cols])
    return Table(name, row, tuple(cols), ", ".join(parts), schema)


# In creation order; ``table_digests`` and ``runledger replay`` list them so.
TABLES: tuple[Table, ...] = (
    _table("offsets", OffsetRow, primary_key=("topic", "part")),
    _table("events", EventRow),
    _table("runs", RunRow),
    _table("generations", GenerationRow),
    _table("members", MemberRow),
    _table("steps", StepRow),
    _table("heartbeats", HeartbeatRow),
    _table("checkpoints", CheckpointRow),
    _table("revocations", RevocationRow),
    _table("shards", ShardRow),
    _table("cursors", CursorRow),
    _table("source_counts", SourceCountRow),
    _table("staging", StagingRow),
    _table("restores", RestoreRow),
    _table("rejections", RejectionRow),
    _table("failures", FailureRow),
    _table("endings", EndingRow),
    _table("alerts", AlertRow),
    _table("alert_resolutions", AlertResolutionRow),
    _table("rank_steps", RankStepRow),
    _table("exits", ExitRow),
    _table("lost_nodes", LostNodeRow),
    _table("quarantine", QuarantineRow),
    _table("sdc_suspicions", SuspicionRow),
    _table("sdc_verdicts", VerdictRow),
)
TABLE_OF: dict[type[Row], Table] = {t.row: t for t in TABLES}
DDL: dict[str, str] = {t.name: t.ddl for t in TABLES}

Pos = tuple[str, int, int]  # (topic, partition, offset) of the record a row comes from
_Map = Callable[[Any, Pos], list[Row]]


def _run(e: RunSubmitted, p: Pos) -> list[Row]:
    return [RunRow(*p, run_id=e.run_id, spec_digest=e.spec_digest, principal=e.principal,
                   world_size=e.world_size, dataset_id=e.dataset_id,
                   submitted_at=e.header.occurred_at)]


def _generation(e: GenerationStarted, p: Pos) -> list[Row]:
    out: list[Row] = [GenerationRow(*p, run_id=e.run_id, generation=e.generation,
                                    reason=e.reason, resume_step=e.resume_step,
                                    resume_manifest=e.resume_manifest,
                                    started_at=e.header.occurred_at)]
    out.extend(MemberRow(*p, run_id=e.run_id, generation=e.generation, logical_id=m.logical_id,
                         node=m.node, slot=m.slot, domain=m.domain) for m in e.members)
    return out


def _step(e: StepCommitted, p: Pos) -> list[Row]:
    # Positional here and in the other two mappers of most records (heartbeats, per-rank
    # times): keywords cost a NamedTuple's constructor a third more per row.
    h = e.header
    return [StepRow(p[0], p[1], p[2], h.run_id, h.generation, e.step, e.tokens,
                    e.loss_tokens, e.step_time_ms, e.input_wait_ms, e.loss, h.occurred_at)]


def _checkpoint(e: ManifestCommitted, p: Pos) -> list[Row]:
    return [CheckpointRow(*p, run_id=e.run_id, generation=e.generation, step=e.step,
                          manifest_path=e.manifest_path, manifest_digest=e.manifest_digest,
                          committed_at=e.header.occurred_at)]


def _revocation(e: CheckpointRevoked, p: Pos) -> list[Row]:
    return [RevocationRow(*p, run_id=e.run_id, generation=e.generation, step=e.step,
                          manifest_digest=e.manifest_digest, reason=e.reason,
                          occurred_at=e.header.occurred_at)]


def _shard(e: ShardWritten, p: Pos) -> list[Row]:
    return [ShardRow(*p, run_id=e.run_id, generation=e.generation, step=e.step,
                     logical_id=e.logical_id, path=e.path, bytes=e.bytes, crc32c=e.crc32c)]


def _cursor(e: CursorAdvanced, p: Pos) -> list[Row]:
    out: list[Row] = [CursorRow(*p, run_id=e.run_id, generation=e.generation, step=e.step,
                                dataset_id=e.dataset_id, epoch=e.epoch, position=e.position)]
    targets = e.mixture_targets or {}
    out.extend(SourceCountRow(*p, run_id=e.run_id, step=e.step, source=s, count=n,
                              target=targets.get(s))
               for s, n in sorted(e.source_counts.items()))
    return out


def _rejection(e: WriteRejected, p: Pos) -> list[Row]:
    return [RejectionRow(*p, run_id=e.run_id, generation=e.generation,
                         rejected_event_id=e.rejected_event_id,
                         rejected_event_type=e.rejected_event_type, reason=e.reason,
                         detail=e.detail, occurred_at=e.header.occurred_at, member=e.member,
                         rejected_generation=e.rejected_generation, repeats=e.repeats)]


def _failure(e: FailureClassified, p: Pos) -> list[Row]:
    return [FailureRow(*p, run_id=e.run_id, generation=e.generation,
                       failure_class=e.failure_class, signature=e.signature, action=e.action,
                       attempt=e.attempt, detail=e.detail, logical_id=e.logical_id, node=e.node,
                       backoff_ms=e.backoff_ms, occurred_at=e.header.occurred_at,
                       log_path=e.log_path, stderr_tail=e.stderr_tail)]


def _finished(e: RunFinished, p: Pos) -> list[Row]:
    return [EndingRow(*p, run_id=e.run_id, generation=e.generation, outcome=e.outcome,
                      reason=e.reason, occurred_at=e.header.occurred_at)]


def _cancelled(e: RunCancelled, p: Pos) -> list[Row]:
    return [EndingRow(*p, run_id=e.run_id, generation=e.generation, outcome="cancelled",
                      reason=e.reason, occurred_at=e.header.occurred_at)]


def _alert(e: AlertRaised, p: Pos) -> list[Row]:
    return [AlertRow(*p, run_id=e.run_id, generation=e.generation, event_id=e.header.event_id,
                     alert=e.alert, subject=e.subject, severity=e.severity, owner=e.owner,
                     runbook=e.runbook, threshold=e.threshold, value=e.value, detail=e.detail,
                     occurred_at=e.header.occurred_at)]


def _resolution(e: AlertResolved, p: Pos) -> list[Row]:
    return [AlertResolutionRow(*p, run_id=e.run_id, generation=e.generation, alert=e.alert,
                               subject=e.subject, raised_event_id=e.raised_event_id,
                               detail=e.detail, occurred_at=e.header.occurred_at)]


def _exit(e: WorkerExited, p: Pos) -> list[Row]:
    return [ExitRow(*p, run_id=e.run_id, generation=e.generation, logical_id=e.logical_id,
                    node=e.node, exit_code=e.exit_code, signal=e.signal,
                    occurred_at=e.header.occurred_at)]


def _staging(e: CheckpointStaged, p: Pos) -> list[Row]:
    return [StagingRow(*p, run_id=e.run_id, generation=e.generation, step=e.step, mode=e.mode,
                       stall_ms=e.stall_ms, waited_ms=e.waited_ms, bytes=e.bytes,
                       backlog=e.backlog, durable_step=e.durable_step,
                       occurred_at=e.header.occurred_at)]


def _heartbeat(e: HeartbeatRecorded, p: Pos) -> list[Row]:
    h = e.header
    return [HeartbeatRow(p[0], p[1], p[2], h.run_id, h.generation, e.logical_id, e.node,
                         e.step, h.occurred_at)]


def _members_heartbeat(e: MembersHeartbeatRecorded, p: Pos) -> list[Row]:
    """A node's record of its members' heartbeats: one row per member, as each member's
    own ``HeartbeatRecorded`` would have made (the same table, the same meaning)."""
    h = e.header
    return [HeartbeatRow(p[0], p[1], p[2], h.run_id, h.generation, b.logical_id, e.node,
                         b.step, h.occurred_at) for b in e.beats]


def _rank_steps(e: StepTimesRecorded, p: Pos) -> list[Row]:
    h = e.header
    topic, part, ofs = p
    run_id, gen, lid, node, first, at = (h.run_id, h.generation, e.logical_id, e.node,
                                         e.first_step, h.occurred_at)
    return [RankStepRow(topic, part, ofs, run_id, gen, lid, node, first + i, t, w, at,
                        e.device)
            for i, (t, w) in enumerate(zip(e.step_time_ms, e.input_wait_ms, strict=True))]


def _restore(e: CheckpointRestored, p: Pos) -> list[Row]:
    return [RestoreRow(*p, run_id=e.run_id, generation=e.generation, step=e.step,
                       logical_id=e.logical_id, verify_ms=e.verify_ms, load_ms=e.load_ms,
                       fell_back=e.fell_back, occurred_at=e.header.occurred_at,
                       tier=e.tier)]


def _json_list(values: Sequence[int] | Sequence[str]) -> str:
    """A per-rank tuple as a compact JSON list: a ``JSON`` column's value."""
    return json.dumps(list(values), separators=(",", ":"))


def _lost(e: NodeLost, p: Pos) -> list[Row]:
    return [LostNodeRow(*p, run_id=e.run_id, generation=e.generation, node=e.node,
                        last_seen_at=e.last_seen_at, members=_json_list(e.members),
                        consequences=json.dumps(list(e.consequences)),
                        occurred_at=e.header.occurred_at)]


def _suspicion(e: CorruptionSuspected, p: Pos) -> list[Row]:
    # Which nodes are suspect is worked out once here, so no query indexes JSON lists.
    suspect = [e.nodes[r] for r in e.ranks] if e.ranks else list(e.nodes)
    return [SuspicionRow(*p, run_id=e.run_id, generation=e.generation, step=e.step,
                         detector=e.detector, ranks=_json_list(e.ranks),
                         suspect_nodes=_json_list(suspect),
                         fingerprints=_json_list(e.fingerprints), nodes=_json_list(e.nodes),
                         state_part=e.part, detail=e.detail, occurred_at=e.header.occurred_at)]


def _verdict(e: CorruptionClassified, p: Pos) -> list[Row]:
    return [VerdictRow(*p, run_id=e.run_id, generation=e.generation, step=e.step,
                       suspected_generation=e.suspected_generation, detector=e.detector,
                       verdict=e.verdict, ranks=_json_list(e.ranks), nodes=_json_list(e.nodes),
                       detail=e.detail, occurred_at=e.header.occurred_at)]


_FACTS: dict[type[Event], _Map] = {
    RunSubmitted: _run,
    GenerationStarted: _generation,
    StepCommitted: _step,
    ManifestCommitted: _checkpoint,
    CheckpointRevoked: _revocation,
    ShardWritten: _shard,
    CursorAdvanced: _cursor,
    WriteRejected: _rejection,
    FailureClassified: _failure,
    RunFinished: _finished,
    RunCancelled: _cancelled,
    AlertRaised: _alert,
    AlertResolved: _resolution,
    WorkerExited: _exit,
    CheckpointStaged: _staging,
    NodeLost: _lost,
    # A suspicion is a fact once the controller keeps it (the fold holds it open
    # until the verdict); one it refused never reaches the runs topic.
    CorruptionSuspected: _suspicion,
    CorruptionClassified: _verdict,
}
# Observations that stay reports (the controller does not copy them as facts).
_REPORTS: dict[type[Event], _Map] = {
    HeartbeatRecorded: _heartbeat,
    MembersHeartbeatRecorded: _members_heartbeat,
    StepTimesRecorded: _rank_steps,
    CheckpointRestored: _restore,
}
_NONE: dict[type[Event], _Map] = {}


def mapped_types(topic: str) -> frozenset[str]:
    """The types :func:`rows_for` maps to rows beyond their ``events`` row on ``topic``."""
    mappers = _FACTS if topic == RUNS else _REPORTS if topic == REPORTS else _NONE
    return frozenset(kind.__name__ for kind in mappers)


def rows_for(record: Record) -> list[Row]:
    """The rows one decoded record adds to the tables, its ``events`` row first; pure."""
    e = record.event
    h = e.header
    topic = record.topic
    # Positional: keywords cost a NamedTuple's constructor a third more per row.
    out: list[Row] = [EventRow(topic, record.partition, record.offset, h.run_id,
                               h.generation, e.event_type, h.event_id, h.occurred_at,
                               h.producer, h.causation_id, record.writer_version,
                               payload(e))]
    mappers = _FACTS if topic == RUNS else _REPORTS if topic == REPORTS else _NONE
    mapper = mappers.get(type(e))
    if mapper is not None:
        out.extend(mapper(e, (topic, record.partition, record.offset)))
    return out
