"""The run-state fold: ``evolve(state, event) -> state``, pure and total.

No I/O, no clock, no randomness: time comes from ``header.occurred_at``. Every
event gets a verdict. A refused event leaves the state exactly as it was, which
is what makes fencing hold: a report that carries a generation other than the
current one is computed on by its writer but never changes accepted progress,
checkpoint or cursor. Terminal states absorb everything but the informational
records (``WriteRejected``, ``AlertRaised``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from events import fold_info, fold_pause, fold_sdc
from events.fold_sdc import CORRUPTION_SUSPECTED
from events.model import (
    CancelRequested,
    CheckpointIntervalChanged,
    CheckpointReplicated,
    CheckpointRestored,
    CheckpointRevoked,
    CheckpointSkipped,
    CheckpointStaged,
    CheckpointVerificationFailed,
    CheckpointWriteFailed,
    CursorAdvanced,
    Event,
    FailureClassified,
    GenerationStarted,
    GroupStartCommanded,
    HeartbeatRecorded,
    ManifestCommitted,
    ManifestProposed,
    MembersHeartbeatRecorded,
    MembershipConfirmed,
    RunAdmitted,
    RunCancelled,
    RunFinished,
    RunQueued,
    RunSubmitted,
    ShardWritten,
    StepCommitted,
    StepTimesRecorded,
    WorkerExited,
)
from events.shelf import Shelf
from events.state import CHECKPOINT_HISTORY, Checkpoint, Cursor, RunState, Status, copy_with

# Verdict reasons: stable strings, recorded in WriteRejected.reason (`runledger events`).
STALE_GENERATION = "stale_generation"
UNKNOWN_RUN = "unknown_run"
WRONG_RUN = "wrong_run"
DUPLICATE_SUBMISSION = "duplicate_submission"
ILLEGAL_TRANSITION = "illegal_transition"
RUN_TERMINAL = "run_terminal"
RUN_NOT_ACTIVE = "run_not_active"
GENERATION_NOT_FORWARD = "generation_not_forward"
STEP_NOT_FORWARD = "step_not_forward"
NOT_A_MEMBER = "not_a_member"
CURSOR_WITHOUT_CHECKPOINT = "cursor_without_checkpoint"
RESUME_BEYOND_CHECKPOINT = "resume_beyond_checkpoint"
RESUME_MISSING = "resume_missing"
UNKNOWN_CHECKPOINT = "unknown_checkpoint"
STEP_JUMP = "step_jump"
NOT_ON_NODE = "not_on_node"

# The coordinator reports every step: a larger jump is a claim, not progress.
MAX_STEP_JUMP = 10_000


@dataclass(frozen=True, slots=True)
class Verdict:
    accepted: bool
    reason: str = ""
    detail: str = ""

    def __str__(self) -> str:
        return "accepted" if self.accepted else f"rejected: {self.reason} ({self.detail})"


ACCEPTED = Verdict(True)


def reject(reason: str, detail: str) -> Verdict:
    return Verdict(False, reason, detail)


@dataclass(frozen=True, slots=True)
class Transition:
    state: RunState | None
    verdict: Verdict


# Records that never change status and stay legal after the end (events.fold_info).
_INFORMATIONAL = fold_info.INFORMATIONAL
# A new generation starts with no heartbeat and no exit (one empty shelf, shared).
NO_MEMBERS: Shelf[Any] = Shelf()


def apply(state: RunState | None, event: Event) -> Transition:
    """The state after ``event`` and the verdict on it."""
    if state is None:
        if isinstance(event, RunSubmitted):
            return Transition(_submitted(event), ACCEPTED)
        return Transition(None, reject(UNKNOWN_RUN, f"no RunSubmitted for run {event.run_id}"))
    if event.run_id != state.run_id:
        return Transition(state, reject(WRONG_RUN, f"event for {event.run_id} on {state.run_id}"))
    if state.status.terminal and not isinstance(event, _INFORMATIONAL):
        detail = f"{event.event_type} after the run is {state.status.value}"
        return Transition(state, reject(RUN_TERMINAL, detail))
    verdict = _check(state, event)
    if not verdict.accepted:
        return Transition(state, verdict)
    new = advance(state, event)
    at = event.header.occurred_at
    if at > new.updated_at:
        if new is state:
            new = replace(state, updated_at=at)
        else:
            # ``new`` is a copy made just now that nobody else holds: setting the
            # field in place spares a second full copy on the hottest path.
            object.__setattr__(new, "updated_at", at)
    return Transition(new, ACCEPTED)


def evolve(state: RunState | None, event: Event) -> RunState | None:
    return apply(state, event).state


def fold(events: Iterable[Event], states: dict[str, RunState] | None = None) -> dict[str, RunState]:
    """Fold many runs' events (in log order per run) into a state per run."""
    out = dict(states or {})
    for event in events:
        new = apply(out.get(event.run_id), event).state
        if new is not None:
            out[event.run_id] = new
    return out


def _submitted(e: RunSubmitted) -> RunState:
    return RunState(
        run_id=e.run_id,
        status=Status.SUBMITTED,
        spec_digest=e.spec_digest,
        principal=e.principal,
        world_size=e.world_size,
        dataset_id=e.dataset_id,
        submitted_at=e.header.occurred_at,
        updated_at=e.header.occurred_at,
        generation=e.generation,
    )


def _fenced(state: RunState, e: Event) -> Verdict:
    """Reports and checkpoint facts are accepted only under the live generation."""
    if not state.status.active:
        return reject(RUN_NOT_ACTIVE, f"{e.event_type} while the run is {state.status.value}")
    if e.generation != state.generation:
        return reject(STALE_GENERATION, f"{e.event_type} carries generation {e.generation},"
                                        f" current is {state.generation}")
    if state.awaiting_generation:
        # A restart was decided: the failed generation is revoked at once, not
        # only when its successor starts, so its zombies publish nothing.
        return reject(
            STALE_GENERATION,
            f"{e.event_type} of generation {e.generation}, revoked by a restart decision",
        )
    return ACCEPTED


def _member(state: RunState, e: Event, logical_id: str, node: str | None = None) -> Verdict:
    """A member's report; one that names its node must name the node the member is on."""
    placed = state.node_of(logical_id)
    if state.members and placed is None:
        return reject(NOT_A_MEMBER, f"{e.event_type} from {logical_id!r}, not a member")
    if state.members and node is not None and node != placed:
        return reject(NOT_ON_NODE, f"{e.event_type} of {logical_id!r} by {node!r}: on {placed!r}")
    return ACCEPTED


def _check(state: RunState, e: Event) -> Verdict:
    s = state.status
    match e:
        case RunSubmitted():
            return reject(DUPLICATE_SUBMISSION, f"run {e.run_id} was already submitted")
        case RunQueued():
            # A recovering run whose placement was lost goes back to the queue.
            requeue = s == Status.RECOVERING and state.awaiting_generation
            if s not in (Status.SUBMITTED, Status.QUEUED) and not requeue:
                return reject(ILLEGAL_TRANSITION, f"RunQueued from {s.value}")
            return ACCEPTED
        case RunAdmitted():
            if s not in (Status.SUBMITTED, Status.QUEUED):
                return reject(ILLEGAL_TRANSITION, f"{e.event_type} from {s.value}")
            return ACCEPTED
        case GenerationStarted():
            if not (s == Status.ADMITTED or s.active):
                return reject(ILLEGAL_TRANSITION, f"GenerationStarted from {s.value}")
            if e.generation <= state.generation:
                return reject(
                    GENERATION_NOT_FORWARD,
                    f"generation {e.generation} does not advance past {state.generation}",
                )
            if state.checkpoint is not None and e.resume_step is None:
                return reject(
                    RESUME_MISSING,
                    f"checkpoint at step {state.checkpoint.step} is committed; a new generation "
                    "must resume from a committed step",
                )
            limit = state.checkpoint.step if state.checkpoint else 0
            if e.resume_step is not None and e.resume_step > limit:
                return reject(
                    RESUME_BEYOND_CHECKPOINT,
                    f"resume_step {e.resume_step} is past the latest committed step {limit}",
                )
            return ACCEPTED
        case MembershipConfirmed():
            verdict = _fenced(state, e)
            if verdict.accepted and s == Status.RUNNING:
                return reject(ILLEGAL_TRANSITION, "MembershipConfirmed while already Running")
            return verdict
        case WorkerExited():
            # An exit is the agent's word on the processes of its own node only.
            verdict = _fenced(state, e)
            return verdict if not verdict.accepted else _member(state, e, e.logical_id, e.node)
        case HeartbeatRecorded() | StepTimesRecorded():
            verdict = _fenced(state, e)
            return verdict if not verdict.accepted else _member(state, e, e.logical_id)
        case MembersHeartbeatRecorded():
            # An agent speaks for the members on its own node only: one stranger refuses all.
            verdict = _fenced(state, e)
            for beat in e.beats if verdict.accepted else ():
                verdict = _member(state, e, beat.logical_id, e.node)
                if not verdict.accepted:
                    break
            return verdict
        case GroupStartCommanded():
            return _fenced(state, e)
        case (ShardWritten() | CheckpointWriteFailed() | CheckpointVerificationFailed()
              | CheckpointRestored() | CheckpointReplicated()):
            verdict = _fenced(state, e)
            return verdict if not verdict.accepted else _member(state, e, e.logical_id)
        case CheckpointStaged() | CheckpointSkipped():
            return _fenced(state, e)
        case CheckpointRevoked():
            verdict = _fenced(state, e)
            if verdict.accepted and e.manifest_digest not in {
                    c.manifest_digest for c in state.checkpoints}:
                return reject(UNKNOWN_CHECKPOINT,
                               f"{e.manifest_digest} at step {e.step} is not a committed"
                               " checkpoint of this run")
            return verdict
        case CheckpointIntervalChanged():
            if e.interval_steps < 1:
                return reject(ILLEGAL_TRANSITION, "a checkpoint interval must be >= 1 step")
            return ACCEPTED
        case StepCommitted():
            verdict = _fenced(state, e)
            if verdict.accepted and e.step <= state.step:
                return reject(STEP_NOT_FORWARD, f"step {e.step} is not after step {state.step}")
            if verdict.accepted and e.step > state.step + MAX_STEP_JUMP:
                return reject(STEP_JUMP, f"step {e.step} jumps more than {MAX_STEP_JUMP} steps "
                                         f"past step {state.step}")
            return verdict
        case ManifestProposed() | ManifestCommitted():
            verdict = _fenced(state, e)
            latest = state.checkpoint.step if state.checkpoint else -1
            if verdict.accepted and e.step <= latest:
                return reject(STEP_NOT_FORWARD,
                              f"checkpoint step {e.step} is not after committed {latest}")
            why = fold_sdc.commit_problem(state, e.step) if verdict.accepted else None
            return verdict if why is None else reject(CORRUPTION_SUSPECTED, why)
        case _ if isinstance(e, fold_sdc.REPORTS):  # silent data corruption: events.fold_sdc
            verdict = _fenced(state, e)
            why = fold_sdc.report_problem(state, e) if verdict.accepted else None
            return verdict if why is None else reject(STEP_NOT_FORWARD, why)
        case _ if isinstance(e, fold_sdc.VERDICTS):
            why = fold_sdc.verdict_problem(state, e)
            return ACCEPTED if why is None else reject(ILLEGAL_TRANSITION, why)
        case CursorAdvanced():
            verdict = _fenced(state, e)
            if not verdict.accepted:
                return verdict
            # Data progress commits at the same step boundary as model state.
            if state.checkpoint is None or e.step != state.checkpoint.step:
                at = state.checkpoint.step if state.checkpoint else None
                return reject(
                    CURSOR_WITHOUT_CHECKPOINT,
                    f"cursor at step {e.step}, latest committed checkpoint is at {at}",
                )
            if state.cursor is not None and e.step <= state.cursor.step:
                return reject(STEP_NOT_FORWARD, f"cursor step {e.step} <= {state.cursor.step}")
            return ACCEPTED
        case FailureClassified():
            # Only a live generation can fail; one already revoked by a restart
            # decision has failed once and for all.
            if not s.active:
                return reject(ILLEGAL_TRANSITION, f"FailureClassified while {s.value}")
            return _fenced(state, e)
        case RunFinished():
            if e.outcome == "succeeded":
                if s != Status.RUNNING:
                    return reject(ILLEGAL_TRANSITION, f"success while {s.value}")
                if e.generation != state.generation:
                    return reject(STALE_GENERATION, f"success of generation {e.generation}")
            return ACCEPTED
        case CancelRequested() | RunCancelled():
            return ACCEPTED
        case _ if isinstance(e, fold_pause.PAUSE_EVENTS):
            why = fold_pause.problem(state, e)
            return ACCEPTED if why is None else reject(ILLEGAL_TRANSITION, why)
        case _ if isinstance(e, _INFORMATIONAL):
            return ACCEPTED
    return reject(ILLEGAL_TRANSITION, f"the fold has no rule for {e.event_type}")


def advance(state: RunState, e: Event) -> RunState:
    """The state after ``e``, once accepted (``proof.plant`` swaps in a planted bug)."""
    match e:
        case RunQueued():
            return replace(
                state, status=Status.QUEUED, queue_reason=e.reason, awaiting_generation=False
            )
        case RunAdmitted():
            return replace(state, status=Status.ADMITTED, members=e.members, queue_reason="")
        case GenerationStarted():
            first = state.status == Status.ADMITTED and state.checkpoint is None
            return replace(
                state,
                status=Status.STARTING if first else Status.RECOVERING,
                generation=e.generation,
                members=e.members or state.members,
                step=e.resume_step or 0,
                heartbeats=NO_MEMBERS,
                exits=NO_MEMBERS,
                awaiting_generation=False,
                generation_started_at=e.header.occurred_at,
                last_progress_at=e.header.occurred_at,
            )
        case MembershipConfirmed():
            at = max(state.last_progress_at, e.header.occurred_at)  # the stall clock starts
            return replace(state, status=Status.RUNNING, last_progress_at=at)
        case HeartbeatRecorded():
            last = max(state.heartbeats.get(e.logical_id, 0), e.header.occurred_at)
            return copy_with(state, heartbeats=Shelf.of(state.heartbeats).with_(
                {e.logical_id: last}))
        case MembersHeartbeatRecorded():
            at, seen = e.header.occurred_at, state.heartbeats
            return copy_with(state, heartbeats=Shelf.of(seen).with_(
                {b.logical_id: max(seen.get(b.logical_id, 0), at) for b in e.beats}))
        case WorkerExited():
            code = e.exit_code if e.signal is None else -e.signal
            return copy_with(state, exits=Shelf.of(state.exits).with_({e.logical_id: code}))
        case StepCommitted():
            return copy_with(
                state,
                step=e.step,
                last_progress_at=max(state.last_progress_at, e.header.occurred_at),
                tokens=state.tokens + e.tokens,
                loss_tokens=state.loss_tokens + e.loss_tokens,
            )
        case ManifestCommitted():
            ckpt = Checkpoint(
                e.step, e.manifest_path, e.manifest_digest, e.generation, e.header.occurred_at
            )
            history = (*state.checkpoints, ckpt)[-CHECKPOINT_HISTORY:]
            return replace(state, checkpoint=ckpt, checkpoints=history)
        case CheckpointRevoked():
            kept = tuple(c for c in state.checkpoints if c.manifest_digest != e.manifest_digest)
            latest = kept[-1] if kept else None
            floor = latest.step if latest else 0
            cursor = state.cursor
            if cursor is not None and (latest is None or cursor.step > floor):
                cursor = None  # it belonged to the revoked checkpoint
            # A revocation of the latest comes from a restore, before the generation
            # trains: its progress restarts from the checkpoint it actually loaded.
            was_latest = (state.checkpoint is not None
                          and state.checkpoint.manifest_digest == e.manifest_digest)
            step = min(state.step, floor) if was_latest else state.step
            return replace(state, checkpoints=kept, checkpoint=latest, cursor=cursor, step=step)
        case CheckpointIntervalChanged():
            return replace(state, checkpoint_interval_steps=e.interval_steps)
        case CursorAdvanced():
            cursor = Cursor(
                e.step, e.dataset_id, e.epoch, e.position, dict(e.source_counts), e.generation
            )
            return replace(state, cursor=cursor)
        case FailureClassified():
            failures = {**state.failures, e.signature: state.failures.get(e.signature, 0) + 1}
            new = replace(
                state,
                failures=failures,
                failure_count=state.failure_count + 1,
                retry_not_before=e.header.occurred_at + (e.backoff_ms or 0),
            )
            if e.action == "restart":
                return replace(new, status=Status.RECOVERING, awaiting_generation=True)
            if e.action == "requeue":
                return replace(new, status=Status.QUEUED, queue_reason=f"requeued: {e.signature}",
                               awaiting_generation=False)
            return new
        case RunFinished():
            status = Status.SUCCEEDED if e.outcome == "succeeded" else Status.FAILED
            return replace(state, status=status, outcome_reason=e.reason)
        case RunCancelled():
            return replace(state, status=Status.CANCELLED, outcome_reason=e.reason)
        case CancelRequested():
            return replace(state, cancel_requested=True)
        case _ if isinstance(e, fold_pause.PAUSE_EVENTS):
            return fold_pause.advance(state, e)
        case _ if isinstance(e, fold_sdc.SDC_EVENTS):
            return fold_sdc.advance(state, e)
        case _ if isinstance(e, _INFORMATIONAL):
            return fold_info.advance(state, e)
    # ShardWritten, ManifestProposed, commands: accepted, recorded by projections.
    return state
