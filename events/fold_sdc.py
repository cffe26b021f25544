"""Silent data corruption in the run fold (``events.fold``): the open suspicion and the
commit refusal it causes.

- ``CorruptionSuspected`` is a worker report, fenced like any other (current
  generation, not revoked by a restart decision), about a step after the
  checkpoint the generation resumed from (``step_not_forward`` otherwise: a
  generation can only distrust state it computed, and a suspicion about older
  steps would revoke history that was committed and verified before it
  started). It opens ``RunState.suspicion``
  unless one at the same or an earlier step is already open: the earliest
  suspicion is the one that matters, since every checkpoint from its step on
  is distrusted and the rollback goes before it. One at an earlier step
  replaces a later one for the same reason.
- While a suspicion is open, a ``ManifestProposed`` or ``ManifestCommitted`` at
  a step at or after the suspicion's is refused (:data:`CORRUPTION_SUSPECTED`):
  that state was produced after a detector distrusted it. Checkpoints before
  the step still commit, so the replaying generation can make progress up to it.
- ``StepReplayed`` is fenced and changes nothing here: the controller
  classifies it (``controller.sdc_verdict``) and appends the verdict.
- ``CorruptionClassified`` (the controller's fact, not fenced: it is written
  under the replaying generation about an earlier one) closes the suspicion it
  names by step and generation; one that names no open suspicion is refused as
  ``illegal_transition`` (a duplicate verdict, or one for a suspicion a later,
  earlier-stepped one replaced).

Tested in tests/events/test_fold_sdc.py and tests/events/test_fold.py.
"""

from __future__ import annotations

from dataclasses import replace

from events.sdc import CorruptionClassified, CorruptionSuspected, StepReplayed
from events.state import RunState, Suspicion

REPORTS = (CorruptionSuspected, StepReplayed)  # fenced like any worker report
VERDICTS = (CorruptionClassified,)
SDC_EVENTS = (*REPORTS, *VERDICTS)
CORRUPTION_SUSPECTED = "corruption_suspected"


def suspicion_of(e: CorruptionSuspected) -> Suspicion:
    return Suspicion(step=e.step, generation=e.generation, detector=e.detector,
                     ranks=tuple(e.ranks), fingerprints=tuple(e.fingerprints),
                     nodes=tuple(e.nodes), part=e.part, consumed=tuple(e.consumed))


def describe(s: Suspicion) -> str:
    """The suspicion in words, for refusals and verdicts."""
    who = f"ranks {list(s.ranks)}" if s.ranks else "every rank"
    part = f", part {s.part}" if s.part else ""
    return f"{s.detector} at step {s.step} of generation {s.generation} ({who}{part})"


def commit_problem(state: RunState, step: int) -> str | None:
    """Why a checkpoint at ``step`` may not be proposed or committed, or None."""
    s = state.suspicion
    if s is None or step < s.step:
        return None
    return (f"checkpoint step {step} is at or after the open suspicion: {describe(s)}; "
            f"only a checkpoint before step {s.step} commits until a replay classifies it "
            f"(CorruptionClassified)")


def report_problem(state: RunState, e: CorruptionSuspected | StepReplayed) -> str | None:
    """Why a fenced SDC report is refused as ``step_not_forward``, or None."""
    if not isinstance(e, CorruptionSuspected):
        return None
    # The checkpoints of earlier generations: the newest is the one this generation
    # resumed from (a restart resumes from the newest committed checkpoint).
    floor = max((c.step for c in state.checkpoints if c.generation < state.generation),
                default=0)
    if e.step <= floor:
        return (f"CorruptionSuspected at step {e.step}, but generation {state.generation} "
                f"resumed from the checkpoint at step {floor}: it can only distrust steps "
                "it computed")
    return None


def verdict_problem(state: RunState, e: CorruptionClassified) -> str | None:
    """Why a verdict is illegal: it must name the open suspicion."""
    s = state.suspicion
    if s is None:
        return (f"CorruptionClassified for step {e.step} of generation "
                f"{e.suspected_generation}, but no suspicion is open")
    if (s.step, s.generation) != (e.step, e.suspected_generation):
        return (f"CorruptionClassified for step {e.step} of generation "
                f"{e.suspected_generation}, but the open suspicion is {describe(s)}")
    return None


def advance(state: RunState, e: CorruptionSuspected | StepReplayed | CorruptionClassified
            ) -> RunState:
    """The state after an accepted SDC event."""
    match e:
        case CorruptionSuspected():
            open_ = state.suspicion
            if open_ is not None and open_.step <= e.step:
                return state  # the earlier suspicion already distrusts this step
            return replace(state, suspicion=suspicion_of(e))
        case CorruptionClassified():
            return replace(state, suspicion=None)
    return state
