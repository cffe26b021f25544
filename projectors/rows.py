"""The projection's row types: one typed, immutable row declaration per DuckDB table.

Each row is a ``NamedTuple`` whose field annotations carry the column's
DuckDB type (``Varchar``, ``Bigint``, ...; an ``Opt`` alias where the column
may be NULL; ``projectors.columns``). ``projectors.tables`` derives each
table's DDL, column list and Arrow schema from these declarations, so the
three cannot drift apart. Rows are tuples on purpose: the projector turns a
batch of them into Arrow columns with one ``zip``, the fastest way in (see
``projectors.projector._insert``).

Every table but ``offsets`` starts with the position of the record a row came
from (``topic``, ``part``, ``ofs``), so a row can always be traced to the log.

Tested in tests/projectors/test_tables.py.
"""

from typing import NamedTuple

from projectors.columns import (
    Bigint,
    Double,
    Integer,
    Json,
    OptBigint,
    OptBlob,
    OptDouble,
    OptVarchar,
    Varchar,
)
from projectors.columns import SqlType as SqlType  # re-exported: tables derive from it


class OffsetRow(NamedTuple):
    """The next offset to read per partition; stored with each batch, in its transaction."""

    topic: Varchar
    part: Integer
    next_offset: Bigint


class EventRow(NamedTuple):
    """Every decoded record: the audit trail, payload as canonical JSON."""

    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    event_type: Varchar
    event_id: Varchar
    occurred_at: Bigint
    producer: Varchar
    causation_id: OptVarchar
    writer_version: Integer
    payload: Json


class QuarantineRow(NamedTuple):
    """A record that could not be decoded, with its raw bytes."""

    topic: Varchar
    part: Integer
    ofs: Bigint
    key: OptVarchar
    reason: Varchar
    detail: Varchar
    raw: OptBlob


class RunRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    spec_digest: Varchar
    principal: Varchar
    world_size: Bigint
    dataset_id: OptVarchar
    submitted_at: Bigint


class GenerationRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    reason: Varchar
    resume_step: OptBigint
    resume_manifest: OptVarchar
    started_at: Bigint


class MemberRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    logical_id: Varchar
    node: Varchar
    slot: Bigint
    domain: OptVarchar


class StepRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    step: Bigint
    tokens: Bigint
    loss_tokens: Bigint
    step_time_ms: Double
    input_wait_ms: Double
    loss: OptDouble
    occurred_at: Bigint


class HeartbeatRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    logical_id: Varchar
    node: Varchar
    step: Bigint
    occurred_at: Bigint


class CheckpointRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    step: Bigint
    manifest_path: Varchar
    manifest_digest: Varchar
    committed_at: Bigint


class RevocationRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    step: Bigint
    manifest_digest: Varchar
    reason: Varchar
    occurred_at: Bigint


class ShardRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    step: Bigint
    logical_id: Varchar
    path: Varchar
    bytes: Bigint
    crc32c: Bigint


class CursorRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    step: Bigint
    dataset_id: Varchar
    epoch: Bigint
    position: Bigint


class SourceCountRow(NamedTuple):
    """One source's count of a ``CursorAdvanced``, with the mixture's target weight."""

    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    step: Bigint
    source: Varchar
    count: Bigint  # type: ignore[assignment]  # shadows tuple.count; the column is named so
    target: OptDouble


class StagingRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    step: Bigint
    mode: Varchar
    stall_ms: Double
    waited_ms: Double
    bytes: Bigint
    backlog: Bigint
    durable_step: OptBigint
    occurred_at: Bigint


class RestoreRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    step: Bigint
    logical_id: Varchar
    verify_ms: Double
    load_ms: Double
    fell_back: Bigint
    occurred_at: Bigint
    tier: Varchar  # the storage tier it was loaded from ('' with one root, or before v2)


class RejectionRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    rejected_event_id: Varchar
    rejected_event_type: Varchar
    reason: Varchar
    detail: Varchar
    occurred_at: Bigint
    member: OptVarchar  # v2 (None from a v1 record)
    rejected_generation: OptBigint
    repeats: Bigint  # further refusals this row stands for: it counts 1 + repeats


class FailureRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    failure_class: Varchar
    signature: Varchar
    action: Varchar
    attempt: Bigint
    detail: Varchar
    logical_id: OptVarchar
    node: OptVarchar
    backoff_ms: OptBigint
    occurred_at: Bigint
    log_path: Varchar  # v2: the failed worker's log on its node ("" from a v1 record)
    stderr_tail: Varchar  # v2: its last lines of output


class EndingRow(NamedTuple):
    """A run's end: ``RunFinished``'s outcome, or ``cancelled``."""

    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    outcome: Varchar
    reason: Varchar
    occurred_at: Bigint


class AlertRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    event_id: Varchar
    alert: Varchar
    subject: Varchar
    severity: Varchar
    owner: Varchar
    runbook: Varchar
    threshold: Varchar
    value: OptDouble
    detail: Varchar
    occurred_at: Bigint


class AlertResolutionRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    alert: Varchar
    subject: Varchar
    raised_event_id: Varchar
    detail: Varchar
    occurred_at: Bigint


class RankStepRow(NamedTuple):
    """One rank's own times for one step (from a batched ``StepTimesRecorded``)."""

    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    logical_id: Varchar
    node: Varchar
    step: Bigint
    step_time_ms: Double
    input_wait_ms: Double
    occurred_at: Bigint
    device: OptVarchar  # StepTimesRecorded v2; NULL from v1 writers


class ExitRow(NamedTuple):
    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    logical_id: Varchar
    node: Varchar
    exit_code: OptBigint
    signal: OptBigint
    occurred_at: Bigint


class LostNodeRow(NamedTuple):
    """A ``NodeLost``: the node a generation lost, and what followed it elsewhere."""

    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    node: Varchar
    last_seen_at: Bigint  # the fault's first evidence
    members: Json  # its members' logical ids
    consequences: Json  # the survivors' failures that followed (not causes)
    occurred_at: Bigint


class SuspicionRow(NamedTuple):
    """A kept ``CorruptionSuspected``; the lists are JSON, per rank in rank order."""

    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    step: Bigint
    detector: Varchar
    ranks: Json  # the deviating ranks; [] means every rank
    suspect_nodes: Json  # those ranks' nodes (every node for [])
    fingerprints: Json
    nodes: Json
    state_part: Varchar  # the event's ``part``: which state diverged ("part" is taken)
    detail: Varchar
    occurred_at: Bigint


class VerdictRow(NamedTuple):
    """A ``CorruptionClassified``: closes the suspicion (suspected_generation, step)."""

    topic: Varchar
    part: Integer
    ofs: Bigint
    run_id: Varchar
    generation: Bigint
    step: Bigint
    suspected_generation: Bigint
    detector: Varchar
    verdict: Varchar
    ranks: Json
    nodes: Json
    detail: Varchar
    occurred_at: Bigint


Row = (
    OffsetRow | EventRow | QuarantineRow | RunRow | GenerationRow | MemberRow | StepRow
    | HeartbeatRow | CheckpointRow | RevocationRow | ShardRow | CursorRow | SourceCountRow
    | StagingRow | RestoreRow | RejectionRow | FailureRow | EndingRow | AlertRow
    | AlertResolutionRow | RankStepRow | ExitRow | LostNodeRow | SuspicionRow | VerdictRow
)
