"""The DuckDB read model: tables, and the pure mapping from a log record to rows.

Every record becomes one ``events`` row (the audit trail, payload as JSON)
plus rows of the typed tables its event feeds. Facts come from
``runledger.runs`` (what the controller accepted); observations that never
become facts (heartbeats, restores, staging) come from ``runledger.reports``.
Each row carries its record's ``(topic, partition, offset)``, so a table can
always be traced back to the log, and replay yields identical rows.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from events.kafka import Record
from events.model import (
    AlertRaised,
    AlertResolved,
    CheckpointRestored,
    CheckpointRevoked,
    CheckpointStaged,
    CursorAdvanced,
    Event,
    FailureClassified,
    GenerationStarted,
    HeartbeatRecorded,
    ManifestCommitted,
    RunCancelled,
    RunFinished,
    RunSubmitted,
    ShardWritten,
    StepCommitted,
    StepTimesRecorded,
    WorkerExited,
    WriteRejected,
)
from events.topics import REPORTS, RUNS

POS = "topic VARCHAR, part INTEGER, ofs BIGINT"

DDL = {
    "offsets": "topic VARCHAR, part INTEGER, next_offset BIGINT, PRIMARY KEY (topic, part)",
    "events": f"{POS}, run_id VARCHAR, generation BIGINT, event_type VARCHAR, "
              "event_id VARCHAR, occurred_at BIGINT, producer VARCHAR, causation_id VARCHAR, "
              "writer_version INTEGER, payload JSON",
    "runs": f"{POS}, run_id VARCHAR, spec_digest VARCHAR, principal VARCHAR, "
            "world_size INTEGER, dataset_id VARCHAR, submitted_at BIGINT",
    "generations": f"{POS}, run_id VARCHAR, generation BIGINT, reason VARCHAR, "
                   "resume_step BIGINT, resume_manifest VARCHAR, started_at BIGINT",
    "members": f"{POS}, run_id VARCHAR, generation BIGINT, logical_id VARCHAR, node VARCHAR, "
               "slot INTEGER, domain VARCHAR",
    "steps": f"{POS}, run_id VARCHAR, generation BIGINT, step BIGINT, tokens BIGINT, "
             "loss_tokens BIGINT, step_time_ms DOUBLE, input_wait_ms DOUBLE, loss DOUBLE, "
             "occurred_at BIGINT",
    "heartbeats": f"{POS}, run_id VARCHAR, generation BIGINT, logical_id VARCHAR, "
                  "node VARCHAR, step BIGINT, occurred_at BIGINT",
    "checkpoints": f"{POS}, run_id VARCHAR, generation BIGINT, step BIGINT, "
                   "manifest_path VARCHAR, manifest_digest VARCHAR, committed_at BIGINT",
    "revocations": f"{POS}, run_id VARCHAR, generation BIGINT, step BIGINT, "
                   "manifest_digest VARCHAR, reason VARCHAR, occurred_at BIGINT",
    "shards": f"{POS}, run_id VARCHAR, generation BIGINT, step BIGINT, logical_id VARCHAR, "
              "path VARCHAR, bytes BIGINT, crc32c BIGINT",
    "cursors": f"{POS}, run_id VARCHAR, generation BIGINT, step BIGINT, dataset_id VARCHAR, "
               "epoch BIGINT, position BIGINT",
    "source_counts": f"{POS}, run_id VARCHAR, step BIGINT, source VARCHAR, count BIGINT, "
                     "target DOUBLE",
    "staging": f"{POS}, run_id VARCHAR, generation BIGINT, step BIGINT, mode VARCHAR, "
               "stall_ms DOUBLE, waited_ms DOUBLE, bytes BIGINT, backlog INTEGER, "
               "durable_step BIGINT, occurred_at BIGINT",
    "restores": f"{POS}, run_id VARCHAR, generation BIGINT, step BIGINT, logical_id VARCHAR, "
                "verify_ms DOUBLE, load_ms DOUBLE, fell_back INTEGER, occurred_at BIGINT",
    "rejections": f"{POS}, run_id VARCHAR, generation BIGINT, rejected_event_id VARCHAR, "
                  "rejected_event_type VARCHAR, reason VARCHAR, detail VARCHAR, "
                  "occurred_at BIGINT",
    "failures": f"{POS}, run_id VARCHAR, generation BIGINT, failure_class VARCHAR, "
                "signature VARCHAR, action VARCHAR, attempt INTEGER, detail VARCHAR, "
                "logical_id VARCHAR, node VARCHAR, backoff_ms BIGINT, occurred_at BIGINT",
    "endings": f"{POS}, run_id VARCHAR, generation BIGINT, outcome VARCHAR, reason VARCHAR, "
               "occurred_at BIGINT",
    "alerts": f"{POS}, run_id VARCHAR, generation BIGINT, event_id VARCHAR, alert VARCHAR, "
              "subject VARCHAR, severity VARCHAR, owner VARCHAR, runbook VARCHAR, "
              "threshold VARCHAR, value DOUBLE, detail VARCHAR, occurred_at BIGINT",
    "alert_resolutions": f"{POS}, run_id VARCHAR, generation BIGINT, alert VARCHAR, "
                         "subject VARCHAR, raised_event_id VARCHAR, detail VARCHAR, "
                         "occurred_at BIGINT",
    "rank_steps": f"{POS}, run_id VARCHAR, generation BIGINT, logical_id VARCHAR, node VARCHAR, "
                  "step BIGINT, step_time_ms DOUBLE, input_wait_ms DOUBLE, occurred_at BIGINT",
    "exits": f"{POS}, run_id VARCHAR, generation BIGINT, logical_id VARCHAR, node VARCHAR, "
             "exit_code INTEGER, signal INTEGER, occurred_at BIGINT",
    "quarantine": f"{POS}, key VARCHAR, reason VARCHAR, detail VARCHAR, raw BLOB",
}

def columns(table: str) -> list[tuple[str, str]]:
    """``(name, SQL type)`` of a table's columns, in order, from its DDL."""
    out = []
    for item in DDL[table].split(","):
        name, _, kind = item.strip().partition(" ")
        if name != "PRIMARY":
            out.append((name, kind.strip()))
    return out


Row = tuple[str, tuple[Any, ...]]  # (table, values after the position columns)
_Map = Callable[[Any], list[tuple[str, tuple[Any, ...]]]]


def _at(e: Event) -> int:
    return e.header.occurred_at


_FACTS: dict[type[Event], _Map] = {
    RunSubmitted: lambda e: [("runs", (e.run_id, e.spec_digest, e.principal, e.world_size,
                                       e.dataset_id, _at(e)))],
    GenerationStarted: lambda e: [("generations", (e.run_id, e.generation, e.reason,
                                                   e.resume_step, e.resume_manifest, _at(e)))]
    + [("members", (e.run_id, e.generation, m.logical_id, m.node, m.slot, m.domain))
       for m in e.members],
    StepCommitted: lambda e: [("steps", (e.run_id, e.generation, e.step, e.tokens,
                                         e.loss_tokens, e.step_time_ms, e.input_wait_ms,
                                         e.loss, _at(e)))],
    ManifestCommitted: lambda e: [("checkpoints", (e.run_id, e.generation, e.step,
                                                   e.manifest_path, e.manifest_digest, _at(e)))],
    CheckpointRevoked: lambda e: [("revocations", (e.run_id, e.generation, e.step,
                                                   e.manifest_digest, e.reason, _at(e)))],
    ShardWritten: lambda e: [("shards", (e.run_id, e.generation, e.step, e.logical_id, e.path,
                                         e.bytes, e.crc32c))],
    CursorAdvanced: lambda e: [("cursors", (e.run_id, e.generation, e.step, e.dataset_id,
                                            e.epoch, e.position))]
    + [("source_counts", (e.run_id, e.step, s, n, (e.mixture_targets or {}).get(s)))
       for s, n in sorted(e.source_counts.items())],
    WriteRejected: lambda e: [("rejections", (e.run_id, e.generation, e.rejected_event_id,
                                              e.rejected_event_type, e.reason, e.detail,
                                              _at(e)))],
    FailureClassified: lambda e: [("failures", (e.run_id, e.generation, e.failure_class,
                                                e.signature, e.action, e.attempt, e.detail,
                                                e.logical_id, e.node, e.backoff_ms, _at(e)))],
    RunFinished: lambda e: [("endings", (e.run_id, e.generation, e.outcome, e.reason, _at(e)))],
    RunCancelled: lambda e: [("endings", (e.run_id, e.generation, "cancelled", e.reason,
                                          _at(e)))],
    AlertRaised: lambda e: [("alerts", (e.run_id, e.generation, e.header.event_id, e.alert,
                                        e.subject, e.severity, e.owner, e.runbook, e.threshold,
                                        e.value, e.detail, _at(e)))],
    AlertResolved: lambda e: [("alert_resolutions", (e.run_id, e.generation, e.alert, e.subject,
                                                     e.raised_event_id, e.detail, _at(e)))],
    WorkerExited: lambda e: [("exits", (e.run_id, e.generation, e.logical_id, e.node,
                                        e.exit_code, e.signal, _at(e)))],
    CheckpointStaged: lambda e: [("staging", (e.run_id, e.generation, e.step, e.mode,
                                              e.stall_ms, e.waited_ms, e.bytes, e.backlog,
                                              e.durable_step, _at(e)))],
}
# Observations that stay reports (the controller does not copy them as facts).
_REPORTS: dict[type[Event], _Map] = {
    HeartbeatRecorded: lambda e: [("heartbeats", (e.run_id, e.generation, e.logical_id,
                                                  e.node, e.step, _at(e)))],
    StepTimesRecorded: lambda e: [
        ("rank_steps", (e.run_id, e.generation, e.logical_id, e.node, e.first_step + i, t, w,
                        _at(e)))
        for i, (t, w) in enumerate(zip(e.step_time_ms, e.input_wait_ms, strict=True))],
    CheckpointRestored: lambda e: [("restores", (e.run_id, e.generation, e.step, e.logical_id,
                                                 e.verify_ms, e.load_ms, e.fell_back,
                                                 _at(e)))],
}


def rows_for(record: Record) -> list[Row]:
    """The rows one decoded record adds (position columns excluded); pure."""
    e = record.event
    h = e.header
    out: list[Row] = [("events", (e.run_id, h.generation, e.event_type, h.event_id,
                                  h.occurred_at, h.producer, h.causation_id,
                                  record.writer_version, _payload(e)))]
    table = _FACTS if record.topic == RUNS else _REPORTS if record.topic == REPORTS else {}
    mapper = table.get(type(e))
    if mapper is not None:
        out.extend(mapper(e))
    return out


def _payload(e: Event) -> str:
    doc = {f.name: getattr(e, f.name) for f in dataclasses.fields(e) if f.name != "header"}
    return json.dumps(doc, sort_keys=True, default=_plain, separators=(",", ":"))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    raise TypeError(f"cannot put {type(value).__name__} in a payload")
