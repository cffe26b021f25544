"""What ``status`` and ``runs`` show from ``runledger.status`` summaries, and their filters. Pure.

A summary (``events.status.RunStatusChanged``) becomes the same document
:func:`runledger.views.runview.status_document` makes by folding the log, except
for what only other topics know: heartbeat ages (reports) and the cancel
requests not yet decided (requests). Those are left out and the document says
so (``source``); ``status --refold`` shows them. Progress in a summary is at
most ``events.status.PROGRESS_EVERY_MS`` old while a run is active.

Tested in tests/runledger/views/test_statusview.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from events.state import TERMINAL, Status
from events.status import RunStatusChanged
from runledger.errors import RunledgerError

SOURCE = "runledger.status"
REFOLD = "runledger.runs (folded)"
_TERMINAL = {s.value for s in TERMINAL}
_STATES = {s.value.lower(): s.value for s in Status}
_UNITS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"^(\d+)([smhdw])$")
ROW_KEYS = ("run_id", "name", "principal", "state", "seen_by_controller", "generation",
            "submitted_at", "submitted_at_iso")


def document(rec: RunStatusChanged) -> dict[str, Any]:
    """The ``status`` document of one summary (``status --json``'s shape)."""
    history = json.loads(rec.failure_history_json)
    return {
        "run_id": rec.run_id, "name": rec.name, "principal": rec.principal,
        "state": rec.state, "seen_by_controller": True, "terminal": rec.state in _TERMINAL,
        "generation": rec.generation, "spec_digest": rec.spec_digest,
        "world_size": rec.world_size, "dataset_id": rec.dataset_id,
        "submitted_at": rec.submitted_at, "submitted_at_iso": iso(rec.submitted_at),
        "updated_at": rec.updated_at,
        "members": [{"logical_id": m.logical_id, "node": m.node, "slot": m.slot,
                     "domain": m.domain, "last_heartbeat_at": None, "heartbeat_age_ms": None,
                     "heartbeat_step": None} for m in rec.members],
        "step": rec.step, "tokens": rec.tokens,
        "checkpoint": json.loads(rec.checkpoint_json), "cursor": json.loads(rec.cursor_json),
        "failures": json.loads(rec.failures_json), "failure_count": rec.failure_count,
        "retries": rec.retries, "retry_not_before": rec.retry_not_before or None,
        "last_failure": (history or [None])[-1], "failure_history": history,
        "queue_reason": rec.queue_reason,
        "rejections": rec.rejections, "alerts": rec.alerts,
        "cancel_requested": rec.cancel_requested, "cancel_requests": [],
        "outcome_reason": rec.outcome_reason,
        "source": SOURCE, "summarized_at": rec.header.occurred_at,
    }


def rows(records: Iterable[RunStatusChanged]) -> list[dict[str, Any]]:
    """One ``runs`` row per summary, oldest submission first."""
    out = [{k: v for k, v in document(r).items() if k in ROW_KEYS} for r in records]
    out.sort(key=lambda r: (r["submitted_at"], r["run_id"]))
    return out


def states(given: Sequence[str]) -> frozenset[str]:
    """``--state`` values as status names (any case); an unknown one is refused."""
    out = set()
    for s in given:
        found = _STATES.get(s.strip().lower())
        if found is None:
            raise RunledgerError(f"--state {s!r} is no run state; use one of "
                                 f"{', '.join(st.value for st in Status)}")
        out.add(found)
    return frozenset(out)


def since_ms(text: str, now_ms: int) -> int:
    """``--since``: a duration back from now (``90s``, ``15m``, ``2h``, ``7d``, ``1w``) or
    an ISO 8601 time (``2024-06-01``, ``2024-06-01T12:00:00Z``; UTC when no zone)."""
    m = _DURATION.match(text.strip())
    if m is not None:
        return now_ms - int(m[1]) * _UNITS[m[2]]
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise RunledgerError(f"--since {text!r} is neither a duration (90s, 15m, 2h, 7d, 1w) "
                             "nor an ISO 8601 time (2024-06-01T12:00:00Z)") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return int(at.timestamp() * 1000)


def select(found: list[dict[str, Any]], wanted: frozenset[str], since: int | None,
           limit: int | None) -> list[dict[str, Any]]:
    """Rows in ``wanted`` states (all when empty) submitted at ``since`` or later;
    with ``limit``, the newest ``limit`` of them (still oldest first)."""
    if limit is not None and limit < 1:
        raise RunledgerError(f"--limit must be at least 1, got {limit}")
    kept = [r for r in found if (not wanted or r["state"] in wanted)
            and (since is None or r["submitted_at"] >= since)]
    return kept[-limit:] if limit is not None else kept


def change_line(doc: dict[str, Any], now_ms: int) -> str:
    """One line of ``status --watch``: what a person follows a run by."""
    last = doc["last_failure"]
    failure = f"  last failure {last['signature']} -> {last['action']}" if last else ""
    queued = f"  queued: {doc['queue_reason']}" if doc["queue_reason"] else ""
    outcome = f"  {doc['outcome_reason']}" if doc["outcome_reason"] else ""
    return (f"{iso(now_ms)}  {doc['state']:<11} generation {doc['generation']}  "
            f"step {doc['step']}  failures {doc['failure_count']}{queued}{failure}{outcome}")


def watch_key(doc: dict[str, Any]) -> tuple[Any, ...]:
    """What a ``--watch`` line is printed for when it changes."""
    return (doc["state"], doc["generation"], doc["step"], doc["failure_count"],
            doc["queue_reason"], doc["outcome_reason"])


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z")
