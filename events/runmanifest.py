"""The post-run manifest: one JSON document per ended run, built purely from its facts.

:func:`build` folds a run's ``runledger.runs`` facts (in log order) into the
document; the controller keeps the same fold going as it absorbs each fact
(a :class:`Tally` beside the run's state) and calls :func:`document` at the
end, so the document in ``run-manifest.json``, the digest in
``RunManifestPublished`` and what ``runledger query manifest`` recomputes from
the log are the same bytes. :func:`encode` is canonical JSON (sorted keys, no
spaces, UTF-8), and :func:`digest` is ``sha256:`` and its hex SHA-256.

What it holds: the terminal status and reason; the accepted model artifact
(the final committed checkpoint); provenance (dataset, the cursor at that
checkpoint with its per-source counts, code version, spec digest); tokens
accepted and discarded, as ``queries/goodput.sql`` counts them: a step is
accepted while the run's lineage still contains it, and a restart from step r
discards the steps after r of the generations before; the incidents
(``FailureClassified``); the alerts raised and the rejections up to the fact that
ended the run (a late report's rejection, or a rejection window closed after the
end, is appended after the document was published, and changes nothing in it);
the cost when the spec has
``budget.price_per_gpu_hour`` (world size x admission-to-end hours, as
goodput); and the committed checkpoints retained: those the spec's retention
(``checkpoint.keep_last``, the first tier's own, ``keep_every``) keeps, as the
worker's collection (``worker.gc``) reads it, so each is still on storage.

The lineage is counted without keeping every step: the counts are marked at
each staged checkpoint (``CheckpointStaged``, reported right after its step),
and a new generation starts again from the mark at the step it resumed from,
as goodput does: its ``resume_step``, or the step before its first step when
that is earlier (a restore that fell back to an older checkpoint because the
newer one failed verification; the restored step is the truth, and only the
first step says it among the run's facts). Pure: no clock, no I/O.

Tested in tests/events/test_runmanifest.py.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from events.fold import apply
from events.model import (
    CheckpointStaged,
    Event,
    FailureClassified,
    GenerationStarted,
    ManifestCommitted,
    RunAdmitted,
    RunCancelled,
    RunFinished,
    RunSubmitted,
    StepCommitted,
)
from events.state import Checkpoint, RunState

FORMAT = "runledger.run-manifest/1"
FILE_NAME = "run-manifest.json"
# Marks kept beyond the retained checkpoints: a resume only ever goes to a committed one.
_MARKS = 256


@dataclass(frozen=True, slots=True)
class Counts:
    steps: int = 0
    tokens: int = 0
    loss_tokens: int = 0


ZERO = Counts()


@dataclass(frozen=True, slots=True)
class Incident:
    generation: int
    at: int
    failure_class: str
    signature: str
    action: str
    attempt: int
    member: str | None
    node: str | None


@dataclass(frozen=True, slots=True)
class Tally:
    """What the manifest needs that the run's state (``events.state``) does not keep."""

    code_version: str | None = None
    price_per_gpu_hour: float | None = None
    admitted_at: int | None = None
    ended_at: int | None = None
    accepted: Counts = ZERO  # along the run's lineage
    marks: Mapping[int, Counts] = field(default_factory=dict)  # lineage counts at a step
    incidents: tuple[Incident, ...] = ()
    generation: int = 0  # the generation whose steps were counted last
    resume_step: int = 0  # the current generation's, as GenerationStarted said
    keep_last: int = 3  # the first tier's retention (worker.gc), from the spec
    keep_every: int | None = None
    # The run's alerts raised and rejections when it ended: the facts after its end
    # (rejections of late reports, a window's count) never change the published document.
    ended_counts: tuple[int, int] | None = None


EMPTY = Tally()
_OBSERVED = (GenerationStarted, CheckpointStaged, ManifestCommitted, RunSubmitted, RunAdmitted,
             RunFinished, RunCancelled, FailureClassified)


def observe(tally: Tally, event: Event, state: RunState) -> Tally:
    """The tally after an accepted fact; ``state``: the run's state after it."""
    if type(event) is StepCommitted:  # most facts: built field by field, not by replace
        a = tally.accepted
        if event.generation != tally.generation and event.step - 1 < tally.resume_step:
            a = _mark_at(tally.marks, event.step - 1)  # it fell back: redoes what followed
        return Tally(tally.code_version, tally.price_per_gpu_hour, tally.admitted_at,
                     tally.ended_at, Counts(a.steps + 1, a.tokens + event.tokens,
                                            a.loss_tokens + event.loss_tokens),
                     tally.marks, tally.incidents, event.generation, tally.resume_step,
                     tally.keep_last, tally.keep_every, tally.ended_counts)
    if not isinstance(event, _OBSERVED):
        return tally
    match event:
        case GenerationStarted():
            # goodput's rule: the steps after the resume step are lost, whatever comes next
            resume = event.resume_step or 0
            return replace(tally, accepted=_mark_at(tally.marks, resume), resume_step=resume)
        case CheckpointStaged():
            return _marked(tally, event.step)
        case ManifestCommitted() if event.step not in tally.marks:
            # no staging reported: exact only while no later step was counted
            return _marked(tally, event.step)
        case RunSubmitted():
            return replace(tally, **_from_spec(event.spec_json))
        case RunAdmitted() if tally.admitted_at is None:
            return replace(tally, admitted_at=event.header.occurred_at)
        case RunFinished() | RunCancelled():  # accepted once: the fold refuses a second end
            return replace(tally, ended_at=event.header.occurred_at,
                           ended_counts=(state.alerts, state.rejections))
        case FailureClassified():
            incident = Incident(event.generation, event.header.occurred_at, event.failure_class,
                                event.signature, event.action, event.attempt, event.logical_id,
                                event.node)
            return replace(tally, incidents=(*tally.incidents, incident))
    return tally


def _mark_at(marks: Mapping[int, Counts], step: int) -> Counts:
    below = [s for s in marks if s <= step]
    return marks[max(below)] if below and step > 0 else ZERO


def _marked(tally: Tally, step: int) -> Tally:
    marks = {**tally.marks, step: tally.accepted}
    if len(marks) > _MARKS:
        marks.pop(min(marks))
    return replace(tally, marks=marks)


def _from_spec(spec_json: str) -> dict[str, Any]:
    try:
        spec = json.loads(spec_json)
    except ValueError:
        return {}
    if not isinstance(spec, dict):
        return {}
    budget = spec.get("budget")
    price = budget.get("price_per_gpu_hour") if isinstance(budget, dict) else None
    code = spec.get("code_version")
    priced = None
    if isinstance(price, int | float) and not isinstance(price, bool) \
            and math.isfinite(price):
        priced = float(price)
    return {"code_version": code if isinstance(code, str) else None,
            "price_per_gpu_hour": priced, **_retention(spec.get("checkpoint"))}


def _retention(ckpt: object) -> dict[str, Any]:
    """The first tier's ``keep_last`` and the run's ``keep_every``, as the worker's GC
    reads them (``controller.spec.parts.CheckpointCommon``); defaults where absent."""
    if not isinstance(ckpt, dict):
        return {}
    tiers = ckpt.get("tiers")
    first = tiers[0] if isinstance(tiers, list) and tiers and isinstance(tiers[0], dict) else {}
    keep = next((k for k in (first.get("keep_last"), ckpt.get("keep_last"))
                 if _count(k)), 3)
    every = ckpt.get("keep_every")
    return {"keep_last": keep, "keep_every": every if _count(every) else None}


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def document(state: RunState, tally: Tally) -> dict[str, Any]:
    """The manifest of a run whose state and tally are these (meant for an ended run)."""
    accepted = tally.accepted
    alerts, rejections = tally.ended_counts or (state.alerts, state.rejections)
    cursor = state.cursor
    at_ckpt = cursor is not None and state.checkpoint is not None \
        and cursor.step == state.checkpoint.step
    return {
        "format": FORMAT,
        "run_id": state.run_id,
        "status": state.status.value,
        "reason": state.outcome_reason,
        "principal": state.principal,
        "spec_digest": state.spec_digest,
        "world_size": state.world_size,
        "generations": state.generation,
        "submitted_at": state.submitted_at,
        "admitted_at": tally.admitted_at,
        "ended_at": tally.ended_at,
        "model": _checkpoint(state.checkpoint),
        "provenance": {
            "dataset_id": state.dataset_id,
            "code_version": tally.code_version,
            "spec_digest": state.spec_digest,
            "cursor_step": cursor.step if cursor and at_ckpt else None,
            "epoch": cursor.epoch if cursor and at_ckpt else None,
            "position": cursor.position if cursor and at_ckpt else None,
            "source_counts": dict(sorted(cursor.source_counts.items()))
            if cursor and at_ckpt else {},
        },
        "tokens": {
            "accepted_steps": accepted.steps,
            "accepted_tokens": accepted.tokens,
            "accepted_loss_tokens": accepted.loss_tokens,
            "discarded_tokens": state.tokens - accepted.tokens,
            "discarded_loss_tokens": state.loss_tokens - accepted.loss_tokens,
        },
        "incidents": [_incident(i) for i in tally.incidents],
        "alerts_raised": alerts,
        "rejections": rejections,
        "cost": _cost(state, tally),
        "retained_checkpoints": [_checkpoint(c) for c in _retained(state, tally)],
    }


def _retained(state: RunState, tally: Tally) -> list[Checkpoint]:
    """The committed checkpoints the run's retention keeps (``worker.gc.plan``): the newest
    ``keep_last``, every ``keep_every``-th step, the latest; collection removes the rest.
    (A ``keep_every`` step older than the state's history is not listed.)"""
    kept = state.checkpoints[-tally.keep_last:]
    every = tally.keep_every
    return [c for c in state.checkpoints
            if c in kept or (every is not None and c.step % every == 0)]


def _checkpoint(c: Checkpoint | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"step": c.step, "manifest_path": c.manifest_path,
            "manifest_digest": c.manifest_digest, "generation": c.generation}


def _incident(i: Incident) -> dict[str, Any]:
    return {"generation": i.generation, "at": i.at, "failure_class": i.failure_class,
            "signature": i.signature, "action": i.action, "attempt": i.attempt,
            "member": i.member, "node": i.node}


def _cost(state: RunState, tally: Tally) -> dict[str, Any] | None:
    if tally.price_per_gpu_hour is None or tally.admitted_at is None:
        return None
    ended = tally.ended_at if tally.ended_at is not None else state.updated_at
    # goodput.sql's arithmetic, in its order, unrounded: the figures agree to the last bit
    price = tally.price_per_gpu_hour
    exact = price * state.world_size * (ended - tally.admitted_at) / 3_600_000
    if not math.isfinite(exact):  # canonical JSON has no inf: a price past any budget
        return None
    loss = tally.accepted.loss_tokens
    return {"price_per_gpu_hour": price,
            "gpu_hours": round(state.world_size * (ended - tally.admitted_at) / 3_600_000, 6),
            "total": round(exact, 6), "per_loss_token": exact / loss if loss else None}


def build(facts: Iterable[Event]) -> dict[str, Any] | None:
    """The manifest from one run's facts in log order (None: no ``RunSubmitted`` among
    them). Facts the run fold refuses are skipped, as the controller skipped them."""
    state: RunState | None = None
    tally = EMPTY
    for event in facts:
        transition = apply(state, event)
        if transition.verdict.accepted and transition.state is not None:
            state = transition.state
            tally = observe(tally, event, state)
    return document(state, tally) if state is not None else None


def encode(doc: Mapping[str, Any]) -> bytes:
    """Canonical JSON: the bytes written to the file and digested."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def digest(doc: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(encode(doc)).hexdigest()


def path_for(root: str | None, run_id: str) -> str:
    """Where the file goes: next to the run's checkpoints; '' without a checkpoint root."""
    return f"{root.rstrip('/')}/{run_id}/{FILE_NAME}" if root else ""
