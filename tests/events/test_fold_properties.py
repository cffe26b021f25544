"""Properties of the run-state fold over generated logs (docs/architecture.md §5).

Logs come from ``tests.events.strategies``: plausible logs of one run (a
RunSubmitted, then every event type with generations and steps near the current
ones), the same events in fully random orders, and several runs interleaved.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from dataclasses import replace

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from events import fold as fold_module
from events.fence import fenced_by
from events.fold import (
    ACCEPTED,
    ILLEGAL_TRANSITION,
    NOT_A_MEMBER,
    RUN_NOT_ACTIVE,
    RUN_TERMINAL,
    STALE_GENERATION,
    UNKNOWN_CHECKPOINT,
    WRONG_RUN,
    Transition,
    Verdict,
    apply,
    fold,
)
from events.model import (
    AlertRaised,
    AlertResolved,
    CancelRequested,
    CheckpointIntervalChanged,
    CheckpointRestored,
    CheckpointRevoked,
    CheckpointVerificationFailed,
    CheckpointWriteFailed,
    CursorAdvanced,
    Event,
    FailureClassified,
    GenerationStarted,
    HeartbeatRecorded,
    ManifestCommitted,
    MembershipConfirmed,
    RunAdmitted,
    RunCancelled,
    RunFinished,
    RunPaused,
    RunQueued,
    RunResumed,
    ShardWritten,
    StepCommitted,
    WorkerExited,
    WriteRejected,
)
from events.state import CHECKPOINT_HISTORY, RunState, Status
from tests.events.builders import Ev
from tests.events.strategies import (
    FENCED_TYPES,
    INFORMATIONAL_TYPES,
    MEMBER_TYPES,
    NODE_TYPES,
    fold_one,
    interleavings,
    random_logs,
    restore_logs,
    run_logs,
    stale_probe,
    terminated_logs,
)

PROPS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

REASONS = {v for k, v in vars(fold_module).items() if k.isupper() and isinstance(v, str)}

SUB, QUE, ADM, STA, RUN, REC = (Status.SUBMITTED, Status.QUEUED, Status.ADMITTED,
                                Status.STARTING, Status.RUNNING, Status.RECOVERING)
LIVE = (SUB, QUE, ADM, STA, RUN, REC)
ACTIVE = (STA, RUN, REC)

# Every status change an accepted event may make, and by which event types.
EDGES: dict[tuple[Status, Status], tuple[type[Event], ...]] = {
    (SUB, QUE): (RunQueued,),
    (SUB, ADM): (RunAdmitted,),
    (QUE, ADM): (RunAdmitted,),
    (ADM, STA): (GenerationStarted,),
    # A readmitted run that has a checkpoint resumes from it.
    (ADM, REC): (GenerationStarted, FailureClassified),
    (STA, REC): (GenerationStarted, FailureClassified),
    (RUN, REC): (GenerationStarted, FailureClassified),
    (STA, RUN): (MembershipConfirmed,),
    (REC, RUN): (MembershipConfirmed,),
    **{(s, QUE): (FailureClassified,) for s in (ADM,)},
    # Requeued by policy, or paused by an alert's pause action.
    **{(s, QUE): (FailureClassified, RunPaused) for s in (STA, RUN)},
    # ... or a decided restart whose placement was lost.
    (REC, QUE): (FailureClassified, RunQueued, RunPaused),
    (RUN, Status.SUCCEEDED): (RunFinished,),
    **{(s, Status.FAILED): (RunFinished,) for s in LIVE},
    **{(s, Status.CANCELLED): (RunCancelled,) for s in LIVE},
}

# Which event types may change which part of the state.
WRITERS: dict[str, tuple[type[Event], ...]] = {
    "generation": (GenerationStarted,),
    "checkpoint": (ManifestCommitted, CheckpointRevoked),
    "checkpoints": (ManifestCommitted, CheckpointRevoked),
    "checkpoint_interval_steps": (CheckpointIntervalChanged,),
    # A revocation drops a cursor newer than the checkpoint "latest" falls back to.
    "cursor": (CursorAdvanced, CheckpointRevoked),
    # ... and lowers the step to that checkpoint's.
    "step": (StepCommitted, GenerationStarted, CheckpointRevoked),
    "tokens": (StepCommitted,),
    "loss_tokens": (StepCommitted,),
    "members": (RunAdmitted, GenerationStarted),
    "heartbeats": (HeartbeatRecorded, GenerationStarted),
    "exits": (WorkerExited, GenerationStarted),
    "failures": (FailureClassified,),
    "rejections": (WriteRejected,),
    "alerts": (AlertRaised,),
    "retry_not_before": (FailureClassified,),
    "awaiting_generation": (FailureClassified, RunQueued, GenerationStarted, RunPaused),
    "generation_started_at": (GenerationStarted,),
    "last_progress_at": (StepCommitted, GenerationStarted, MembershipConfirmed),
    "queue_reason": (RunQueued, RunAdmitted, FailureClassified, RunPaused, RunResumed),
    "paused": (RunPaused, RunResumed),
    "cancel_requested": (CancelRequested,),
    "outcome_reason": (RunFinished, RunCancelled),
}


def walk(events: list[Event], state: RunState | None = None) -> Iterator[
        tuple[RunState | None, Event, Transition]]:
    """(state before, event, transition) for each event of one run's log."""
    for e in events:
        t = apply(state, e)
        yield state, e, t
        state = t.state


def states_of(events: list[Event]) -> list[RunState]:
    return [t.state for _, _, t in walk(events) if t.state is not None]


def check_verdicts(events: list[Event]) -> None:
    """Refusals change nothing and explain themselves; acceptances follow the graph."""
    for before, e, t in walk(events):
        if not t.verdict.accepted:
            assert t.state is before, f"refused {e.event_type} changed the state"
            assert t.verdict.reason in REASONS, t.verdict
            assert t.verdict.detail, f"{t.verdict.reason} without a detail"
            continue
        assert t.state is not None
        if before is None:
            assert t.state.status == SUB
            continue
        assert t.state.run_id == before.run_id
        if t.state.status != before.status:
            edge = (before.status, t.state.status)
            assert edge in EDGES, f"{e.event_type} made the illegal move {edge}"
            assert isinstance(e, EDGES[edge]), f"{e.event_type} made the move {edge}"
        for name, writers in WRITERS.items():
            if getattr(t.state, name) != getattr(before, name):
                assert isinstance(e, writers), f"{e.event_type} changed {name}"
        check_effect(before, e, t.state)


def check_effect(before: RunState, e: Event, after: RunState) -> None:
    """What an accepted event must have satisfied, and what it must have done."""
    ckpt = before.checkpoint.step if before.checkpoint else None
    match e:
        case RunPaused():  # only a live generation is paused, and the pause holds
            assert before.status.active and after.status == QUE and after.paused
        case RunResumed():  # only a paused run is resumed; it stays queued
            assert before.paused and not after.paused and after.status == QUE
        case StepCommitted():
            assert e.step > before.step and after.step == e.step
            assert after.tokens == before.tokens + e.tokens
            assert after.loss_tokens == before.loss_tokens + e.loss_tokens
        case ManifestCommitted():  # the step moves forward (docs/architecture.md §9)
            assert ckpt is None or e.step > ckpt
            assert after.checkpoint is not None and after.checkpoint.step == e.step
            assert after.checkpoint.manifest_digest == e.manifest_digest
            assert after.checkpoints == (*before.checkpoints, after.checkpoint)[
                -CHECKPOINT_HISTORY:]
        case CheckpointRevoked():  # "latest" falls back along the committed history
            assert e.manifest_digest in {c.manifest_digest for c in before.checkpoints}
            kept = tuple(c for c in before.checkpoints if c.manifest_digest != e.manifest_digest)
            assert after.checkpoints == kept
            assert after.checkpoint == (kept[-1] if kept else None)
            floor = kept[-1].step if kept else 0
            # Only revoking the latest rolls progress back (a restore fell back from
            # it); an older checkpoint's revocation leaves the trained step alone.
            was_latest = (before.checkpoint is not None
                          and before.checkpoint.manifest_digest == e.manifest_digest)
            assert after.step == (min(before.step, floor) if was_latest else before.step)
            # A cursor sits on a checkpoint: one past the new latest, or with none
            # left, is dropped.
            if before.cursor is not None and (not kept or before.cursor.step > floor):
                assert after.cursor is None
            else:
                assert after.cursor == before.cursor
            assert after.generation == before.generation and after.status == before.status
        case CheckpointIntervalChanged():
            assert e.interval_steps >= 1 and after.checkpoint_interval_steps == e.interval_steps
        case CursorAdvanced():  # data progress commits with a checkpoint
            assert ckpt is not None and e.step == ckpt
            assert before.cursor is None or e.step > before.cursor.step
            assert after.cursor is not None and after.cursor.step == e.step
        case GenerationStarted():
            assert e.generation > before.generation and after.generation == e.generation
            # A new generation starts with no observations and resumes only from a
            # committed checkpoint.
            assert after.heartbeats == {} and after.exits == {}
            assert after.step == (e.resume_step or 0) <= (ckpt or 0)
        case (HeartbeatRecorded() | WorkerExited() | ShardWritten() | CheckpointWriteFailed()
              | CheckpointVerificationFailed() | CheckpointRestored()):
            assert e.logical_id in {m.logical_id for m in before.members}
        case _:
            pass


def check_counters(events: list[Event]) -> None:
    """Counters count exactly the accepted records of their kind."""
    accepted = [e for _, e, t in walk(events) if t.verdict.accepted]
    state = fold_one(events)
    if state is None:
        return
    mine = [e for e in accepted if e.run_id == state.run_id]
    assert state.rejections == sum(isinstance(e, WriteRejected) for e in mine)
    # An alert counts when it opens its key; a repeat while open is a duplicate.
    open_keys: dict[str, str] = {}
    opened = 0
    for e in mine:
        if isinstance(e, AlertRaised) and e.key not in open_keys:
            open_keys[e.key] = e.header.event_id
            opened += 1
        elif isinstance(e, AlertResolved) and open_keys.get(e.key) == e.raised_event_id:
            del open_keys[e.key]
    assert state.alerts == opened
    assert state.open_alerts == open_keys
    assert state.failure_count == sum(isinstance(e, FailureClassified) for e in mine)
    assert sum(state.failures.values()) == state.failure_count


# --- fencing ------------------------------------------------------------------------


@PROPS
@given(run_logs(), st.data())
def test_stale_generation_reports_change_nothing(log: list[Event], data: st.DataObject) -> None:
    # In the log itself: every fenced report of another generation is refused as is.
    for before, e, t in walk(log):
        if before is None or not isinstance(e, FENCED_TYPES):
            continue
        if e.generation != before.generation:
            assert not t.verdict.accepted and t.state is before
            if before.status.active:
                assert t.verdict.reason == STALE_GENERATION
    # Probes of every fenced type and any other generation, at reached states.
    states = states_of(log)
    for state in data.draw(st.lists(st.sampled_from(states), min_size=1, max_size=6)):
        kind = data.draw(st.sampled_from((*FENCED_TYPES, FailureClassified)))
        gen = data.draw(st.integers(0, state.generation + 3).filter(
            lambda g, cur=state.generation: g != cur))
        probe = stale_probe(kind, gen, Ev(state.run_id, start=state.updated_at), state.step,
                            state.checkpoint)
        t = apply(state, probe)
        assert not t.verdict.accepted
        assert t.state is state
        if state.status.terminal:
            assert t.verdict.reason == RUN_TERMINAL
        elif kind is FailureClassified and not state.status.active:
            assert t.verdict.reason == ILLEGAL_TRANSITION, t.verdict
        elif not state.status.active:
            assert t.verdict.reason == RUN_NOT_ACTIVE
        else:
            assert t.verdict.reason == STALE_GENERATION, t.verdict


@PROPS
@given(st.one_of(run_logs(), restore_logs()))
def test_fenced_by_follows_the_fold_for_every_generation_seen_live(log: list[Event]) -> None:
    """A follower that sees only the accepted facts after a generation went live,
    and keeps the last fence ``fenced_by`` named, knows what the fold would say
    to that generation's reports after every fact."""
    ev = Ev("r1")
    fences: dict[int, Verdict] = {}  # generation -> the last fence named, or ACCEPTED
    for _before, e, t in walk(log):
        if not t.verdict.accepted:
            continue  # a follower sees facts only; a refused report is not one
        assert t.state is not None
        for generation in fences:
            fence = fenced_by(e, generation)
            if not fence.accepted:
                fences[generation] = fence
            probe = apply(t.state, ev.staged(generation, t.state.step + 1)).verdict
            expected = fences[generation]
            assert (probe.accepted, probe.reason) == (expected.accepted, expected.reason), (
                f"g{generation} after {e.event_type}: the fold says {probe}, "
                f"fenced_by said {expected}")
        state = t.state
        if state.status.active and not state.awaiting_generation:
            fences.setdefault(state.generation, ACCEPTED)


@PROPS
@given(run_logs())
def test_accepted_checkpoints_and_progress_carry_the_live_generation(log: list[Event]) -> None:
    for before, e, t in walk(log):
        if before is None or not t.verdict.accepted:
            continue
        if isinstance(e, (*FENCED_TYPES, FailureClassified)):
            assert e.generation == before.generation
            assert t.state is not None and t.state.generation == before.generation
        if isinstance(e, ManifestCommitted):
            assert t.state is not None and t.state.checkpoint is not None
            assert t.state.checkpoint.generation == before.generation


@PROPS
@given(run_logs(), st.data())
def test_reports_naming_a_non_member_are_refused(log: list[Event], data: st.DataObject) -> None:
    for before, e, t in walk(log):
        if before is None or not isinstance(e, MEMBER_TYPES):
            continue
        ids = {m.logical_id for m in before.members}
        who: str = getattr(e, "logical_id")  # noqa: B009  (every MEMBER_TYPES has one)
        if t.verdict.accepted:
            assert who in ids
        elif who not in ids and before.members and t.verdict.reason not in (
                STALE_GENERATION, RUN_NOT_ACTIVE, RUN_TERMINAL):
            assert t.verdict.reason == NOT_A_MEMBER
    # Probes of every member-naming type from an outsider, at reached live states.
    live = [s for s in states_of(log) if s.status.active and not s.awaiting_generation
            and s.members]
    if not live:
        return
    state = data.draw(st.sampled_from(live))
    kind = data.draw(st.sampled_from(MEMBER_TYPES))
    probe = stale_probe(kind, state.generation, Ev(state.run_id, start=state.updated_at),
                        state.step, state.checkpoint)
    probe = replace(probe, logical_id="w9")  # type: ignore[call-arg]
    t = apply(state, probe)
    assert not t.verdict.accepted and t.state is state
    assert t.verdict.reason == NOT_A_MEMBER, t.verdict


@PROPS
@given(run_logs(), st.data())
def test_only_a_committed_checkpoint_can_be_revoked(log: list[Event],
                                                    data: st.DataObject) -> None:
    for before, e, t in walk(log):
        if before is None or not isinstance(e, CheckpointRevoked):
            continue
        known = e.manifest_digest in {c.manifest_digest for c in before.checkpoints}
        if t.verdict.reason == UNKNOWN_CHECKPOINT:
            assert not known and t.state is before
        if t.verdict.accepted:
            assert known
    # A probe naming a digest the history does not hold, under the live generation.
    live = [s for s in states_of(log) if s.status.active and not s.awaiting_generation]
    if not live:
        return
    state = data.draw(st.sampled_from(live))
    ev = Ev(state.run_id, start=state.updated_at)
    step = state.checkpoint.step if state.checkpoint else data.draw(st.integers(0, 5))
    t = apply(state, ev.revoked(state.generation, step, digest="sha256:never-committed"))
    assert not t.verdict.accepted and t.state is state
    assert t.verdict.reason == UNKNOWN_CHECKPOINT, t.verdict


# --- determinism ----------------------------------------------------------------------


@PROPS
@given(run_logs(), st.data())
def test_fold_is_deterministic_and_can_stop_anywhere(log: list[Event],
                                                     data: st.DataObject) -> None:
    whole = fold(log)
    assert fold(copy.deepcopy(log)) == whole
    assert whole == {"r1": fold_one(log)}
    k = data.draw(st.integers(0, len(log)))
    assert fold(log[k:], fold(log[:k])) == whole


@PROPS
@given(random_logs(), st.data())
def test_random_orderings_are_total_deterministic_and_splittable(
        log: list[Event], data: st.DataObject) -> None:
    whole = fold(log)  # never raises, whatever the order
    assert fold(copy.deepcopy(log)) == whole
    k = data.draw(st.integers(0, len(log)))
    assert fold(log[k:], fold(log[:k])) == whole


@settings(PROPS, max_examples=120)
@given(interleavings())
def test_interleaving_runs_does_not_change_any_run(
        case: tuple[list[list[Event]], list[Event]]) -> None:
    logs, merged = case
    states = fold(merged)
    assert len(states) == len(logs)  # node-scoped events never become runs
    assert not any(isinstance(e, NODE_TYPES) and e.run_id in states for e in merged
                   if e.run_id.startswith("node/"))
    for log in logs:
        assert states[log[0].run_id] == fold_one(log)


# --- verdicts -------------------------------------------------------------------------


@PROPS
@given(run_logs())
def test_refusals_change_nothing_and_moves_follow_the_graph(log: list[Event]) -> None:
    check_verdicts(log)
    check_counters(log)


@PROPS
@given(random_logs())
def test_refusals_change_nothing_in_random_orders(log: list[Event]) -> None:
    check_verdicts(log)
    check_counters(log)


@PROPS
@given(restore_logs(), st.data())
def test_restores_that_revoke_checkpoints_follow_the_rules(log: list[Event],
                                                         data: st.DataObject) -> None:
    check_verdicts(log)
    check_counters(log)
    check_monotone(log)
    k = data.draw(st.integers(0, len(log)))
    assert fold(log[k:], fold(log[:k])) == fold(log) == {"r1": fold_one(log)}


# --- terminal states absorb -----------------------------------------------------------


@PROPS
@given(terminated_logs())
def test_terminal_states_absorb(case: tuple[list[Event], list[Event]]) -> None:
    log, suffix = case
    end = fold_one(log)
    assert end is not None and end.status.terminal
    frozen = ("status", "generation", "checkpoint", "checkpoints", "cursor", "step", "tokens",
              "loss_tokens", "members", "outcome_reason", "failures", "cancel_requested",
              "checkpoint_interval_steps")
    state = end
    for _, e, t in walk(suffix, end):
        assert t.state is not None
        for name in frozen:
            assert getattr(t.state, name) == getattr(end, name), f"{e.event_type}: {name}"
        if e.run_id != end.run_id:  # node-scoped events in the same stream
            assert not t.verdict.accepted and t.verdict.reason == WRONG_RUN
        elif isinstance(e, INFORMATIONAL_TYPES):
            assert t.verdict.accepted
        else:
            assert not t.verdict.accepted and t.verdict.reason == RUN_TERMINAL
        if not t.verdict.accepted:
            assert t.state is state
        state = t.state


# --- monotonicity ---------------------------------------------------------------------


def check_history(state: RunState) -> None:
    """"Latest" is the newest entry of the committed history, which is bounded and
    strictly ordered by step."""
    history = state.checkpoints
    assert len(history) <= CHECKPOINT_HISTORY
    assert state.checkpoint == (history[-1] if history else None)
    assert all(a.step < b.step for a, b in itertools.pairwise(history))
    assert len({c.manifest_digest for c in history}) == len(history)
    if state.checkpoint_interval_steps is not None:
        assert state.checkpoint_interval_steps >= 1


def check_monotone(log: list[Event]) -> None:
    for prev, e, t in walk(log):
        state = t.state
        if state is None:
            continue
        check_history(state)
        if state.cursor is not None:
            # The data cursor never runs ahead of the newest committed checkpoint.
            assert state.checkpoint is not None and state.cursor.step <= state.checkpoint.step
        if state.checkpoint is not None:
            assert state.checkpoint.generation <= state.generation
        if prev is None or state is prev:
            continue
        assert state.generation >= prev.generation
        assert state.updated_at >= prev.updated_at
        assert state.tokens >= prev.tokens and state.loss_tokens >= prev.loss_tokens
        assert state.failure_count >= prev.failure_count
        # Checkpoint and cursor move back only by an accepted revocation, and then
        # only to the checkpoint committed before the revoked one.
        revoked = t.verdict.accepted and isinstance(e, CheckpointRevoked)
        if prev.checkpoint is not None:
            if revoked:
                assert isinstance(e, CheckpointRevoked)
                assert state.checkpoint in (None, *prev.checkpoints)
                assert state.checkpoint is None or state.checkpoint.step <= prev.checkpoint.step
                if state.checkpoint != prev.checkpoint:
                    assert prev.checkpoint.manifest_digest == e.manifest_digest
                    assert state.checkpoint == (prev.checkpoints[-2]
                                                if len(prev.checkpoints) > 1 else None)
            else:
                assert state.checkpoint is not None
                assert state.checkpoint.step >= prev.checkpoint.step
        if prev.cursor is not None:
            if revoked and state.cursor is None:
                assert state.checkpoint is None or prev.cursor.step > state.checkpoint.step
            else:
                assert state.cursor is not None and state.cursor.step >= prev.cursor.step


@PROPS
@given(run_logs())
def test_checkpoint_cursor_and_generation_never_go_back(log: list[Event]) -> None:
    check_monotone(log)


@PROPS
@given(random_logs())
def test_checkpoint_cursor_and_generation_never_go_back_in_random_orders(
        log: list[Event]) -> None:
    check_monotone(log)


# --- the generator reaches the interesting states ---------------------------------------


FEATURES = {
    "running, cursor, generation >= 2":
        lambda s: s.status == RUN and s.cursor is not None and s.generation >= 2,
    "recovering from a checkpoint past step 0":
        lambda s: s.status == REC and s.checkpoint is not None and s.checkpoint.step > 0,
    "succeeded with a checkpoint":
        lambda s: s.status == Status.SUCCEEDED and s.checkpoint is not None,
    "requeued after a failure": lambda s: s.status == QUE and s.failure_count > 0,
    "cancelled after progress": lambda s: s.status == Status.CANCELLED and s.step > 0,
    "failed": lambda s: s.status == Status.FAILED,
    "two or more committed checkpoints in the history":
        lambda s: len(s.checkpoints) >= 2,
    "a checkpoint interval set": lambda s: s.checkpoint_interval_steps is not None,
}

# Accepted transitions the generator must produce, by (state before, event, state after).
TRANSITIONS = {
    "revocation falling back to an earlier checkpoint":
        lambda b, e, a: isinstance(e, CheckpointRevoked) and a.checkpoint is not None
        and b.checkpoint is not None and a.checkpoint.step < b.checkpoint.step,
    "revocation of the only checkpoint":
        lambda b, e, a: isinstance(e, CheckpointRevoked) and a.checkpoint is None,
    "revocation that drops the cursor":
        lambda b, e, a: isinstance(e, CheckpointRevoked) and b.cursor is not None
        and a.cursor is None,
    "revocation that lowers the step":
        lambda b, e, a: isinstance(e, CheckpointRevoked) and a.step < b.step,
}
# Seen over a whole log: after a revocation, a checkpoint committed at a step no
# later than the revoked one (the step moves forward again from the fallback).
RECOMMIT = "a commit at or below a revoked step"


def test_plausible_logs_reach_deep_states() -> None:
    """Guards the properties above against a generator that never gets far.

    One run of 500 examples missed a rare feature (success with a checkpoint) about
    one time in seven, even before the checkpoint events: Hypothesis' examples
    within a run are correlated. Three runs with fixed seeds make the guard
    deterministic, and a change to the generator must lose a feature in all three
    to fail it.
    """
    seen: set[str] = set()

    @settings(max_examples=400, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(run_logs())
    def collect(log: list[Event]) -> None:
        for state in states_of(log):
            seen.update(name for name, pred in FEATURES.items() if pred(state))

    # Up to ten seeded runs, stopping once every feature is seen: with a fixed
    # three, one CI run missed "succeeded with a checkpoint" in all of them.
    for n in range(10):
        seed(n)(collect)()
        if seen == set(FEATURES):
            break
    assert seen == set(FEATURES)


def test_restore_logs_reach_every_kind_of_revocation() -> None:
    """Guards the revocation properties against a generator that never revokes."""
    seen: set[str] = set()

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(restore_logs())
    def collect(log: list[Event]) -> None:
        revoked_steps: list[int] = []
        for before, e, t in walk(log):
            if before is None or t.state is None or not t.verdict.accepted:
                continue
            seen.update(name for name, pred in TRANSITIONS.items() if pred(before, e, t.state))
            if isinstance(e, CheckpointRevoked):
                revoked_steps.append(e.step)
            elif isinstance(e, ManifestCommitted) and any(e.step <= r for r in revoked_steps):
                seen.add(RECOMMIT)

    collect()
    assert seen == set(TRANSITIONS) | {RECOMMIT}
