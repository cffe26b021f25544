"""A run's status summary: the record of ``runledger.status``, and how it is made. Pure.

``runledger.status`` is a compacted changelog, keyed by run id, of the fold of
``runledger.runs`` (as Kafka Streams keeps one per state store): the
controller writes a :class:`RunStatusChanged` in the same transaction as the
facts that changed it, so ``status`` reads one record instead of folding the
whole log. It is a derived view, not a fact: nothing folds it, it is not in
the event catalog (``events.model.EVENT_TYPES``) and carries no signature; the
facts on ``runs`` stay the only authority, and ``runledger status --refold``
recomputes any summary from them.

The summary is a pure function of the fold's ``RunState`` plus three notes the
state does not keep (:class:`StatusNotes`: the spec's name, the last accepted
failures, how many failures were retried), folded by :func:`note` over the
accepted facts. :func:`worth_writing` decides when a new summary is written
(numbered rules), so heartbeats never write one and progress writes at most one
per ``PROGRESS_EVERY_MS``. The record has its own schema,
``schemas/views/RunStatusChanged.v<N>.avsc``, encoded as Avro single-object
(:func:`encode`, :func:`decode`), like every event, with the members as blocks
(``events.placement``); a v1 summary (members one record each) still decodes.

Tested in tests/events/test_status.py.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any, ClassVar

import fastavro

from events.base import Event, Header, Member
from events.convert import from_record, to_record
from events.errors import DecodeError, EventsError
from events.facts import FailureClassified
from events.placement import deflate, inflate
from events.registry import SchemaVersion, load_schema_text
from events.requests import RunSubmitted
from events.state import Checkpoint, Cursor, RunState
from events.topics import STATUS

PRODUCER = "controller"
# Progress alone (step, tokens, cursor) writes a new summary at most this often:
# steps are most of a log, and the changelog must stay a small fraction of it.
PROGRESS_EVERY_MS = 10_000
# Failures a summary keeps, with their output tails (each at most 4 KiB): the latest
# ones are what a person reads; `status --refold` shows every one.
HISTORY = 8
_RETRY_ACTIONS = ("restart", "requeue")
_PROGRESS = frozenset({"step", "tokens", "cursor_json", "updated_at", "header"})
SCHEMA_FILE = "RunStatusChanged.v2.avsc"
VERSION = 2
# Older writers' schemas this reader resolves (v1: members one record each).
OLDER_FILES = ("RunStatusChanged.v1.avsc",)
MAGIC = b"\xc3\x01"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStatusChanged(Event):
    """One run's folded summary as ``status`` and ``runs`` show it."""

    name: str
    principal: str
    state: str
    spec_digest: str
    world_size: int
    dataset_id: str | None = None
    submitted_at: int
    updated_at: int
    members: tuple[Member, ...]
    step: int
    tokens: int
    queue_reason: str
    failure_count: int
    retries: int
    retry_not_before: int
    rejections: int
    alerts: int
    cancel_requested: bool
    outcome_reason: str
    checkpoint_json: str
    cursor_json: str
    failures_json: str
    failure_history_json: str
    TOPIC: ClassVar[str] = STATUS


@dataclass(frozen=True, slots=True)
class StatusNotes:
    """What the summary shows that ``RunState`` does not keep, folded over accepted facts."""

    name: str = "?"
    failure_history_json: str = "[]"  # the last HISTORY failures, oldest first
    retries: int = 0


NO_NOTES = StatusNotes()


def note(notes: StatusNotes, event: Event) -> StatusNotes:
    """The notes after one fact the run fold accepted (a refused one must not be noted).

    1. The first ``RunSubmitted`` names the run (its spec's ``name``).
    2. A ``FailureClassified`` joins the failure history (its last ``HISTORY``); a restart
       or requeue is a retry.
    3. Anything else changes nothing.
    """
    if isinstance(event, RunSubmitted):
        return notes if notes.name != "?" else replace(notes, name=spec_name(event))
    if isinstance(event, FailureClassified):
        history = [*json.loads(notes.failure_history_json), failure_doc(event)][-HISTORY:]
        return StatusNotes(notes.name, json.dumps(history, sort_keys=True),
                           notes.retries + (event.action in _RETRY_ACTIONS))
    return notes


def summarize(state: RunState, notes: StatusNotes, at: int) -> RunStatusChanged:
    """The summary of ``state``, taken at ``at`` (ms; the writer's clock, in the header)."""
    return RunStatusChanged(
        header=Header(f"{state.run_id}/status/g{state.generation}/{at}", state.run_id,
                      state.generation, at, PRODUCER, schema_version=VERSION),
        name=notes.name, principal=state.principal, state=state.status.value,
        spec_digest=state.spec_digest, world_size=state.world_size,
        dataset_id=state.dataset_id, submitted_at=state.submitted_at,
        updated_at=state.updated_at, members=state.members, step=state.step,
        tokens=state.tokens, queue_reason=state.queue_reason,
        failure_count=state.failure_count, retries=notes.retries,
        retry_not_before=state.retry_not_before, rejections=state.rejections,
        alerts=state.alerts, cancel_requested=state.cancel_requested,
        outcome_reason=state.outcome_reason,
        checkpoint_json=json.dumps(checkpoint_doc(state.checkpoint), sort_keys=True),
        cursor_json=json.dumps(cursor_doc(state.cursor), sort_keys=True),
        failures_json=json.dumps(dict(state.failures), sort_keys=True),
        failure_history_json=notes.failure_history_json,
    )


def worth_writing(prev: RunStatusChanged | None, new: RunStatusChanged) -> bool:
    """Whether ``new`` goes onto ``runledger.status`` after ``prev`` (the last one there).

    1. Nothing there yet: write.
    2. Anything but progress (step, tokens, cursor) and the times changed: write.
    3. Only progress changed: write when ``prev`` is ``PROGRESS_EVERY_MS`` old.
    4. Otherwise (a heartbeat, or nothing): do not.
    """
    if prev is None:
        return True
    changed = {n for n in _FIELDS if getattr(prev, n) != getattr(new, n)} - {"header"}
    if changed - _PROGRESS:
        return True
    progress = changed & {"step", "tokens", "cursor_json"}
    return bool(progress) and new.header.occurred_at - prev.header.occurred_at >= \
        PROGRESS_EVERY_MS


def checkpoint_doc(c: Checkpoint | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"step": c.step, "path": c.manifest_path, "digest": c.manifest_digest,
            "generation": c.generation, "committed_at": c.committed_at}


def cursor_doc(c: Cursor | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"step": c.step, "dataset_id": c.dataset_id, "epoch": c.epoch,
            "position": c.position, "source_counts": dict(c.source_counts)}


def failure_doc(f: FailureClassified | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {"failure_class": f.failure_class, "signature": f.signature, "action": f.action,
            "attempt": f.attempt, "backoff_ms": f.backoff_ms, "detail": f.detail,
            "generation": f.generation, "logical_id": f.logical_id, "node": f.node,
            "log_path": f.log_path, "stderr_tail": f.stderr_tail}


def spec_name(submitted: RunSubmitted | None) -> str:
    """The spec's ``name``, or ``?`` when there is none this version can read."""
    if submitted is None:
        return "?"
    try:
        name = json.loads(submitted.spec_json).get("name")
    except (ValueError, AttributeError):
        return "?"
    return name if isinstance(name, str) else "?"


# --- the wire: Avro single-object encoding with the view's own schema ----------------


def _load(filename: str) -> SchemaVersion:
    text = resources.files("schemas").joinpath("views", filename).read_text("utf-8")
    return load_schema_text(filename, text)


@cache
def schema() -> SchemaVersion:
    return _load(SCHEMA_FILE)


@cache
def _writers() -> dict[bytes, SchemaVersion]:
    """Every schema a summary may have been written with, by fingerprint."""
    return {sv.fingerprint: sv for sv in (schema(), *map(_load, OLDER_FILES))}


def encode(record: RunStatusChanged) -> bytes:
    sv = schema()
    body = deflate(to_record(record))  # the members as blocks (events.placement)
    body["header"]["schema_version"] = sv.version
    buf = io.BytesIO()
    buf.write(MAGIC + sv.fingerprint)
    fastavro.schemaless_writer(buf, sv.parsed, body)
    return buf.getvalue()


def decode(data: bytes) -> RunStatusChanged:
    """The record in ``data``; ``DecodeError`` names what is wrong (another writer's
    schema version this reader does not know, or bytes that are not a summary)."""
    sv = schema()
    writer = _writers().get(bytes(data[2:10])) if data[:2] == MAGIC else None
    if writer is None:
        raise DecodeError("unknown_fingerprint", f"not a {SCHEMA_FILE} record (writer schema "
                          f"{data[2:10].hex() or 'none'}); a newer runledger wrote it?")
    try:
        body = fastavro.schemaless_reader(io.BytesIO(data[10:]), writer.parsed, sv.parsed)
        assert isinstance(body, dict)
        body = inflate(body)
        body["header"] = from_record(Header, body["header"])
        body["members"] = tuple(from_record(Member, m) for m in body["members"])
        return RunStatusChanged(**body)
    except (EventsError, EOFError, ValueError, TypeError, KeyError, AssertionError) as exc:
        raise DecodeError("body_invalid", f"{SCHEMA_FILE}: undecodable summary ({exc})") \
            from None


_FIELDS = tuple(f for f in RunStatusChanged.__dataclass_fields__)
