"""What ``runledger status`` and ``runledger runs`` show, computed from events. Pure.

The facts on ``runledger.runs`` are folded with :mod:`events.fold`, in offset
order, and are the state. Requests only stand in for a run the controller has
not copied to ``runs`` yet, and say which cancellations were asked for.
Reports are used for one thing: heartbeat ages of the current generation's
members, which the controller does not copy into facts. "Now" is a parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from events.fold import apply, fold
from events.model import (
    CancelRequested,
    Event,
    FailureClassified,
    HeartbeatRecorded,
    MembersHeartbeatRecorded,
    RunSubmitted,
)
from events.state import RunState
from events.status import failure_doc, spec_name

UNSEEN = "on runledger.requests, not yet seen by the controller"
_RETRY_ACTIONS = ("restart", "requeue")


def status_document(
    run_id: str, requests: Sequence[Event], facts: Sequence[Event], reports: Sequence[Event],
    now_ms: int,
) -> dict[str, Any] | None:
    """Everything ``status`` shows about one run, or None for an unknown run."""
    requests = [e for e in requests if e.run_id == run_id]
    facts = [e for e in facts if e.run_id == run_id]
    state, failures, retries = _fold_facts(facts)
    submitted = _first_submission(facts) or _first_submission(requests)
    seen = state is not None
    if state is None:
        if submitted is None:
            return None
        state = apply(None, submitted).state
        assert state is not None  # a RunSubmitted always starts a run
    cancels = [e for e in requests if isinstance(e, CancelRequested)]
    doc = _base(state, submitted, seen)
    doc.update(
        members=_members(state, reports, now_ms),
        step=state.step,
        tokens=state.tokens,
        checkpoint=_checkpoint(state),
        cursor=_cursor(state),
        failures=dict(state.failures),
        failure_count=state.failure_count,
        retries=retries,
        retry_not_before=state.retry_not_before or None,
        last_failure=failure_doc(failures[-1] if failures else None),
        failure_history=[failure_doc(f) for f in failures],
        queue_reason=state.queue_reason,
        rejections=state.rejections,
        alerts=state.alerts,
        cancel_requested=state.cancel_requested or bool(cancels),
        cancel_requests=[
            {"principal": c.principal, "reason": c.reason, "at": c.header.occurred_at}
            for c in cancels
        ],
        outcome_reason=state.outcome_reason,
    )
    return doc


def _fold_facts(
        facts: Sequence[Event]) -> tuple[RunState | None, list[FailureClassified], int]:
    """The run's state, its accepted failures and how many of them were retried."""
    state: RunState | None = None
    failures: list[FailureClassified] = []
    retries = 0
    for event in facts:
        transition = apply(state, event)
        state = transition.state
        if transition.verdict.accepted and isinstance(event, FailureClassified):
            failures.append(event)
            retries += event.action in _RETRY_ACTIONS
    return state, failures, retries


def _checkpoint(state: RunState) -> dict[str, Any] | None:
    c = state.checkpoint
    if c is None:
        return None
    return {"step": c.step, "path": c.manifest_path, "digest": c.manifest_digest,
            "generation": c.generation, "committed_at": c.committed_at}


def _cursor(state: RunState) -> dict[str, Any] | None:
    c = state.cursor
    if c is None:
        return None
    return {"step": c.step, "dataset_id": c.dataset_id, "epoch": c.epoch,
            "position": c.position, "source_counts": dict(c.source_counts)}


def list_rows(requests: Sequence[Event], facts: Sequence[Event]) -> list[dict[str, Any]]:
    """One row per run on ``runs`` or ``requests``, oldest submission first."""
    states = fold(facts)
    submissions: dict[str, RunSubmitted] = {}
    # Facts first: the controller's copy is the one the run was accepted with.
    for event in [*facts, *requests]:
        if isinstance(event, RunSubmitted) and event.run_id not in submissions:
            submissions[event.run_id] = event
    rows = []
    for run_id, submitted in submissions.items():
        state = states.get(run_id)
        seen = state is not None
        if state is None:
            state = apply(None, submitted).state
            assert state is not None  # a RunSubmitted always starts a run
        base = _base(state, submitted, seen)
        rows.append({k: base[k] for k in (
            "run_id", "name", "principal", "state", "seen_by_controller", "generation",
            "submitted_at", "submitted_at_iso",
        )})
    rows.sort(key=lambda r: (r["submitted_at"], r["run_id"]))
    return rows


def status_lines(doc: dict[str, Any]) -> list[str]:
    """The human form of :func:`status_document`."""
    state = doc["state"]
    if not doc["seen_by_controller"]:
        state += " (not yet seen by the controller)"
    lines = [
        f"run         {doc['run_id']}  ({doc['name']}, by {doc['principal']},"
        f" submitted {doc['submitted_at_iso']})",
        f"state       {state}",
        f"generation  {doc['generation']}",
        f"spec        {doc['spec_digest']}  world_size {doc['world_size']}",
        f"dataset     {doc['dataset_id'] or '-'}",
    ]
    if doc["queue_reason"]:
        lines.append(f"queued      {doc['queue_reason']}")
    summarized = doc.get("source") == "runledger.status"
    for i, m in enumerate(doc["members"]):
        where = f"{m['node']}/{m['slot']}" + (f" ({m['domain']})" if m["domain"] else "")
        if m["heartbeat_age_ms"] is None and summarized:
            beat = ""  # said once, below the members
        elif m["heartbeat_age_ms"] is None:
            beat = "no heartbeat in this generation"
        else:
            age_s = m["heartbeat_age_ms"] / 1000
            beat = f"heartbeat {age_s:.1f} s ago (step {m['heartbeat_step']})"
        lines.append(f"{'members' if i == 0 else '':<11} {m['logical_id']:<8} {where:<24} "
                     f"{beat}".rstrip())
    if doc["members"] and summarized:
        lines.append(f"{'':<11} (heartbeat ages: `status --refold` reads the reports)")
    lines.append(f"step        {doc['step']}  ({doc['tokens']} tokens)")
    ckpt = doc["checkpoint"]
    if ckpt is None:
        lines.append("checkpoint  none committed")
    else:
        lines.append(f"checkpoint  step {ckpt['step']}  {ckpt['path']}  {ckpt['digest']}"
                     f" (generation {ckpt['generation']})")
    cur = doc["cursor"]
    if cur is not None:
        lines.append(f"cursor      step {cur['step']}  epoch {cur['epoch']}  "
                     f"position {cur['position']}")
    sigs = ", ".join(f"{s} x{n}" for s, n in sorted(doc["failures"].items())) or "none"
    lines.append(f"failures    {doc['failure_count']} ({sigs}); retries {doc['retries']}")
    for f in doc["failure_history"]:
        lines += _failure_lines(f, doc["run_id"])
    rejected = doc["rejections"]
    lines.append(f"rejections  {rejected}" + (
        " (records the controller refused, each kept as a WriteRejected fact: a stopped "
        "generation's late report is one and harms nothing; `runledger query audit "
        f"{doc['run_id']}` names each with its reason)" if rejected else ""))
    for c in doc["cancel_requests"]:
        lines.append(f"cancel      requested by {c['principal']} at {_iso(c['at'])}: {c['reason']}")
    if doc["outcome_reason"]:
        lines.append(f"outcome     {doc['outcome_reason']}")
    if doc.get("source") == "runledger.status":
        lines.append(f"source      runledger.status, summarized {_iso(doc['summarized_at'])}"
                     " (progress lags up to 10 s; `status --refold` folds the log)")
    return lines


# Lines of a failure's output tail shown by the human form (the JSON has all of it).
TAIL_LINES = 20


def _failure_lines(f: dict[str, Any], run_id: str) -> list[str]:
    """One failure: what, the policy's verdict, where its log is, its last lines of output."""
    backoff = f", backoff {f['backoff_ms']} ms" if f["backoff_ms"] is not None else ""
    lines = [f"failure     g{f['generation']} {f['failure_class']} {f['signature']} ->"
             f" {f['action']} (attempt {f['attempt']}{backoff}): {f['detail']}"]
    if f["log_path"]:
        where = f" on {f['node']}" if f["node"] else ""
        rank = f" --rank {f['logical_id']}" if f["logical_id"] else ""
        lines.append(f"  log       {f['log_path']}{where}  (runledger logs {run_id}{rank}"
                     f" --generation {f['generation']})")
    tail = f["stderr_tail"].rstrip("\n").splitlines()[-TAIL_LINES:]
    lines += [f"  | {line}" for line in tail]
    return lines


def _first_submission(events: Sequence[Event]) -> RunSubmitted | None:
    return next((e for e in events if isinstance(e, RunSubmitted)), None)


def _base(state: RunState, submitted: RunSubmitted | None, seen: bool) -> dict[str, Any]:
    return {
        "run_id": state.run_id,
        "name": spec_name(submitted),
        "principal": state.principal,
        "state": state.status.value,
        "seen_by_controller": seen,
        "terminal": state.status.terminal,
        "generation": state.generation,
        "spec_digest": state.spec_digest,
        "world_size": state.world_size,
        "dataset_id": state.dataset_id,
        "submitted_at": state.submitted_at,
        "submitted_at_iso": _iso(state.submitted_at),
        "updated_at": state.updated_at,
    }


def _members(state: RunState, reports: Sequence[Event], now_ms: int) -> list[dict[str, Any]]:
    # Heartbeats of older generations say nothing about today's members (fencing).
    last: dict[str, tuple[int, int]] = {}
    for e in reports:
        if e.run_id != state.run_id or e.generation != state.generation:
            continue
        # A worker's own heartbeat, or its agent's record of its node's members' beats.
        beats = ([(e.logical_id, e.step)] if isinstance(e, HeartbeatRecorded) else
                 [(b.logical_id, b.step) for b in e.beats]
                 if isinstance(e, MembersHeartbeatRecorded) else [])
        for lid, at_step in beats:
            seen = last.get(lid)
            if seen is None or e.header.occurred_at >= seen[0]:
                last[lid] = (e.header.occurred_at, at_step)
    out = []
    for m in state.members:
        at: int | None = state.heartbeats.get(m.logical_id)
        step: int | None = None
        if m.logical_id in last:
            at, step = last[m.logical_id]
        out.append({
            "logical_id": m.logical_id, "node": m.node, "slot": m.slot, "domain": m.domain,
            "last_heartbeat_at": at,
            "heartbeat_age_ms": None if at is None else max(0, now_ms - at),
            "heartbeat_step": step,
        })
    return out


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z")
