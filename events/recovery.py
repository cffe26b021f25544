"""RPO per failure domain: how many committed steps a loss of each domain would cost.

A pure fold over one run's facts, in log order (:func:`observe`), and the figures
read from it (:func:`figures`). The controller keeps one :class:`Recovery` per run
for the ``rpo_violated`` alert (``controller.watch``, ``controller.alerts``); the
``recovery`` query folds the projected facts through the same functions
(``queries.recovery``), so the live alert and the reported series cannot differ.

The rules:

1. The committed step is the latest ``StepCommitted``; a ``GenerationStarted``
   sets it back to its resume step (0 without one), as the run fold does, and
   forgets checkpoints past that step (the abandoned timeline).
2. A ``ManifestCommitted`` is a verified copy on the first tier, whose widest
   protected domain comes from the spec (``first_protects``). A later commit of
   the same step replaces the earlier one.
3. A ``CheckpointReplicated`` (matched by manifest digest) adds a verified copy on
   its tier, surviving the loss of every domain up to its ``protects``.
4. A ``CheckpointRevoked`` (matched by digest) removes the checkpoint: the
   worker revokes only when its last surviving copy fails verification.
5. For a domain, the recoverable step is the newest remaining checkpoint with a
   copy that survives that domain's loss; the gap is the committed step minus it
   (the whole committed step when none survives), compared with the spec's
   ``checkpoint.rpo`` for the domain: violated when the gap exceeds it.
6. The gap in seconds is training time: from when the recoverable step was
   committed to when the committed step was (from the facts' times; the run's
   first step's start when nothing survives).

Failure classes map to the domain they lost (:func:`domain_of`): ``infrastructure``
(a node or its agent lost) is a ``host`` loss; every other class (worker crash,
hang, straggler, storage, data, non-finite, silent corruption, job) loses a
``process``.

Tested in tests/events/test_recovery.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from events.model import (
    CheckpointReplicated,
    CheckpointRevoked,
    Event,
    GenerationStarted,
    ManifestCommitted,
    StepCommitted,
)
from events.workerenv import FAILURE_DOMAINS

MAX_CHECKPOINTS = 64  # the newest checkpoints kept; far beyond any tier's keep_last
MAX_STEP_TIMES = 256  # step times kept for an async commit that lags its step
HOST_CLASSES = frozenset({"infrastructure"})
NO_COPY = -1  # a checkpoint not (yet) replicated anywhere beyond the first tier


def domain_of(failure_class: str) -> str:
    """The failure domain a failure of ``failure_class`` lost (rule above)."""
    return "host" if failure_class in HOST_CLASSES else "process"


def widest_index(protects: str) -> int:
    """The place of a domain in ``FAILURE_DOMAINS``; an unknown one protects nothing."""
    return FAILURE_DOMAINS.index(protects) if protects in FAILURE_DOMAINS else NO_COPY


@dataclass(frozen=True, slots=True)
class Copies:
    """One committed checkpoint and the widest domain its replicas survive."""

    step: int
    digest: str
    at: int  # when its step was committed (the StepCommitted's time, else the commit's)
    replicated: int = NO_COPY  # widest_index over its CheckpointReplicated facts

    def survives(self, domain: int, first: int) -> bool:
        return max(first, self.replicated) >= domain


@dataclass(frozen=True, slots=True)
class Recovery:
    """What the fold keeps of one run: progress, step times and the checkpoints' copies."""

    step: int = 0
    step_at: int | None = None  # when ``step`` was committed
    origin_at: int | None = None  # when the run's first step began
    steps: tuple[tuple[int, int], ...] = ()  # (step, time) of the newest MAX_STEP_TIMES
    checkpoints: tuple[Copies, ...] = ()  # commit order, the newest MAX_CHECKPOINTS
    changed_by: str | None = None  # the newest fact that changed the checkpoints


EMPTY = Recovery()
KINDS = (StepCommitted, GenerationStarted, ManifestCommitted, CheckpointReplicated,
         CheckpointRevoked)


def observe(rec: Recovery, event: Event) -> Recovery:
    """The recovery state after one accepted fact of its run (rules 1-4)."""
    at, eid = event.header.occurred_at, event.header.event_id
    match event:
        case StepCommitted():
            return stepped(rec, event.step, at, event.step_time_ms)
        case GenerationStarted():
            return restarted(rec, event.resume_step or 0, eid)
        case ManifestCommitted():
            return committed(rec, event.step, event.manifest_digest, at, eid)
        case CheckpointReplicated():
            return replicated(rec, event.manifest_digest, event.protects, eid)
        case CheckpointRevoked():
            return revoked(rec, event.manifest_digest, eid)
    return rec


# One function per fact, on plain values: the recovery query folds projected rows
# through these without rebuilding events.

def stepped(rec: Recovery, step: int, at: int, step_time_ms: float) -> Recovery:
    origin = rec.origin_at if rec.origin_at is not None else at - int(step_time_ms)
    steps = (*rec.steps[-(MAX_STEP_TIMES - 1):], (step, at))
    return replace(rec, step=step, step_at=at, origin_at=origin, steps=steps)


def restarted(rec: Recovery, resume: int, eid: str) -> Recovery:
    kept = tuple(c for c in rec.checkpoints if c.step <= resume)
    steps = tuple(s for s in rec.steps if s[0] <= resume)
    step_at = next((t for s, t in reversed(steps) if s == resume), None)
    return replace(rec, step=resume, step_at=step_at, steps=steps, checkpoints=kept,
                   changed_by=eid if kept != rec.checkpoints else rec.changed_by)


def committed(rec: Recovery, step: int, digest: str, at: int, eid: str) -> Recovery:
    when = next((t for s, t in reversed(rec.steps) if s == step), at)
    kept = tuple(c for c in rec.checkpoints if c.step != step)
    return replace(rec, checkpoints=(*kept, Copies(step, digest, when))[-MAX_CHECKPOINTS:],
                   changed_by=eid)


def replicated(rec: Recovery, digest: str, protects: str, eid: str) -> Recovery:
    wide = widest_index(protects)
    if not any(c.digest == digest and wide > c.replicated for c in rec.checkpoints):
        return rec
    return replace(rec, changed_by=eid, checkpoints=tuple(
        replace(c, replicated=wide) if c.digest == digest and wide > c.replicated else c
        for c in rec.checkpoints))


def revoked(rec: Recovery, digest: str, eid: str) -> Recovery:
    kept = tuple(c for c in rec.checkpoints if c.digest != digest)
    return rec if kept == rec.checkpoints else replace(rec, checkpoints=kept, changed_by=eid)


@dataclass(frozen=True, slots=True)
class DomainFigure:
    """Rule 5 and 6 for one failure domain."""

    domain: str
    committed_step: int
    recoverable_step: int | None  # None: no checkpoint survives this domain's loss
    gap_steps: int
    gap_s: float | None  # None before any step
    rpo_steps: int | None  # the spec's target; None: none declared
    violated: bool


def figure(rec: Recovery, domain: str, first_protects: str,
           rpo: Mapping[str, int]) -> DomainFigure:
    """The figure for one domain (rules 5 and 6)."""
    want, first = widest_index(domain), widest_index(first_protects)
    best = max((c for c in rec.checkpoints if c.survives(want, first)),
               key=lambda c: c.step, default=None)
    recoverable = best.step if best is not None else None
    gap = max(0, rec.step - (recoverable or 0))
    since = best.at if best is not None else rec.origin_at
    gap_s = None
    if rec.step_at is not None and since is not None:
        gap_s = 0.0 if gap == 0 else max(0, rec.step_at - since) / 1000
    target = rpo.get(domain)
    return DomainFigure(domain, rec.step, recoverable, gap, gap_s, target,
                        target is not None and gap > target)


def figures(rec: Recovery, first_protects: str,
            rpo: Mapping[str, int]) -> tuple[DomainFigure, ...]:
    """One figure per failure domain, narrowest first."""
    return tuple(figure(rec, d, first_protects, rpo) for d in FAILURE_DOMAINS)
