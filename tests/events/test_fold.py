"""Example tests of the run-state fold (docs/architecture.md §5, §6): transitions, verdicts,
fencing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace

import pytest

from events import fold as fold_module
from events.fold import (
    CORRUPTION_SUSPECTED,
    CURSOR_WITHOUT_CHECKPOINT,
    DUPLICATE_SUBMISSION,
    GENERATION_NOT_FORWARD,
    ILLEGAL_TRANSITION,
    NOT_A_MEMBER,
    NOT_ON_NODE,
    RESUME_BEYOND_CHECKPOINT,
    RESUME_MISSING,
    RUN_NOT_ACTIVE,
    RUN_TERMINAL,
    STALE_GENERATION,
    STEP_JUMP,
    STEP_NOT_FORWARD,
    UNKNOWN_CHECKPOINT,
    UNKNOWN_RUN,
    WRONG_RUN,
    Transition,
    apply,
    evolve,
    fold,
)
from events.model import EVENT_TYPES, CheckpointRevoked, Event, Member
from events.state import CHECKPOINT_HISTORY, Checkpoint, Cursor, RunState, Status
from tests.events.builders import MEMBERS, Ev
from tests.events.sample_events import variants
from tests.events.strategies import INFORMATIONAL_TYPES, MEMBER_TYPES

# The checkpoint ``running`` commits (generation 1, step 10), as the fold records it
# (``committed_at`` aside).
CKPT10 = Checkpoint(10, "ckpt/g1/s10/manifest.json", "sha256:g1s10", 1, 0)


def run(events: list[Event]) -> RunState:
    """Fold a log that must be accepted event by event; fail loudly otherwise."""
    state: RunState | None = None
    for e in events:
        t = apply(state, e)
        assert t.verdict.accepted, f"{e.event_type} refused: {t.verdict}"
        state = t.state
    assert state is not None
    return state


def rejected(state: RunState | None, event: Event, reason: str) -> Transition:
    """``event`` is refused with ``reason`` and the state is returned untouched."""
    t = apply(state, event)
    assert not t.verdict.accepted, f"{event.event_type} was accepted on {state}"
    assert t.verdict.reason == reason, str(t.verdict)
    assert t.verdict.detail, "a rejection must explain itself"
    assert t.state is state
    return t


def running(ev: Ev, ckpt_step: int | None = 10) -> RunState:
    """A run in generation 1, Running, with steps 1..10 and (optionally) a checkpoint."""
    log: list[Event] = [ev.submitted(), ev.admitted(), ev.generation_started(1), ev.confirmed(1)]
    log += [ev.step(1, s) for s in range(1, 11)]
    if ckpt_step is not None:
        log.append(ev.committed(1, ckpt_step))
    return run(log)


# --- the happy path ------------------------------------------------------------------


def test_happy_path_through_every_live_status() -> None:
    ev = Ev(start=1_000)
    s = run([ev.submitted()])
    assert (s.status, s.generation, s.submitted_at, s.updated_at) == (
        Status.SUBMITTED, 0, 2_000, 2_000)
    assert (s.spec_digest, s.principal, s.world_size, s.dataset_id) == (
        "sha256:spec", "alice", 2, "ds-1")

    s = evolve(s, ev.queued(reason="waiting for 2 slots"))
    assert s is not None and s.status == Status.QUEUED
    assert s.queue_reason == "waiting for 2 slots"

    s = evolve(s, ev.admitted())
    assert s is not None and s.status == Status.ADMITTED
    assert s.members == MEMBERS and s.queue_reason == ""

    s = evolve(s, ev.generation_started(1))
    assert s is not None and (s.status, s.generation, s.step) == (Status.STARTING, 1, 0)
    assert s.generation_started_at == s.last_progress_at == ev.now

    s = evolve(s, ev.group_start(1))  # the command to start generation 1 is accepted
    assert s is not None and s.status == Status.STARTING

    s = evolve(s, ev.heartbeat(1, "w0", at=ev.now + 5))
    assert s is not None and s.heartbeats == {"w0": ev.now + 5}

    s = evolve(s, ev.confirmed(1))
    assert s is not None and s.status == Status.RUNNING
    # The stall clock starts when the group formed, not when its processes were spawned.
    assert s.last_progress_at == ev.now > s.generation_started_at

    for step in (1, 2, 3):
        s = evolve(s, ev.step(1, step, tokens=100, loss_tokens=90))
    assert s is not None and (s.step, s.tokens, s.loss_tokens) == (3, 300, 270)
    assert s.last_progress_at == ev.now

    s = evolve(s, ev.proposed(1, 3))  # a proposal alone publishes nothing
    assert s is not None and s.checkpoint is None

    s = evolve(s, ev.committed(1, 3))
    assert s is not None
    assert s.checkpoint == Checkpoint(3, "ckpt/g1/s3/manifest.json", "sha256:g1s3", 1, ev.now)

    s = evolve(s, ev.cursor(1, 3))
    assert s is not None
    assert s.cursor == Cursor(3, "ds-1", 0, 192, {"web": 120, "code": 72}, 1)

    # Running -> Recovering (a new generation resumes from the checkpoint) -> Running.
    s = evolve(s, ev.generation_started(2, resume_step=3))
    assert s is not None
    assert (s.status, s.generation, s.step, s.heartbeats) == (Status.RECOVERING, 2, 3, {})
    assert s.checkpoint is not None and s.checkpoint.generation == 1  # survives the restart
    s = evolve(s, ev.confirmed(2))
    assert s is not None and s.status == Status.RUNNING

    s = evolve(s, ev.step(2, 4))
    s = evolve(s, ev.finished(2, "succeeded", "reached max_steps"))
    assert s is not None
    assert (s.status, s.outcome_reason, s.step) == (Status.SUCCEEDED, "reached max_steps", 4)
    assert s.updated_at == ev.now


@pytest.mark.parametrize("outcome,status", [("failed", Status.FAILED),
                                            ("succeeded", Status.SUCCEEDED)])
def test_run_finished_outcomes(outcome: str, status: Status) -> None:
    ev = Ev()
    s = evolve(running(ev), ev.finished(1, outcome, "why"))
    assert s is not None and (s.status, s.outcome_reason) == (status, "why")


def test_running_recovering_via_failure_restart_and_back() -> None:
    ev = Ev()
    s = evolve(running(ev), ev.failure(1, "restart", signature="crash:w1"))
    assert s is not None and s.status == Status.RECOVERING and s.awaiting_generation
    assert (s.failures, s.failure_count) == ({"crash:w1": 1}, 1)
    assert s.retry_not_before == ev.now  # no backoff on a restart
    s = run_from(s, [ev.generation_started(2, resume_step=10)])
    assert not s.awaiting_generation
    s = run_from(s, [ev.confirmed(2), ev.step(2, 11)])
    assert (s.status, s.generation, s.step) == (Status.RUNNING, 2, 11)


def test_a_restart_whose_placement_was_lost_goes_back_to_the_queue() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.failure(1, "restart"), ev.queued(1, "lost node-b")])
    assert (s.status, s.queue_reason, s.awaiting_generation) == (
        Status.QUEUED, "lost node-b", False)
    s = run_from(s, [ev.admitted(1), ev.generation_started(2, resume_step=10)])
    assert (s.status, s.generation) == (Status.RECOVERING, 2)
    # Once the new generation started, Recovering is no longer a queueable state.
    rejected(s, ev.queued(2), ILLEGAL_TRANSITION)


def test_requeue_backoff_is_recorded_from_the_log() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.failure(1, "requeue")])  # backoff_ms=1000
    assert s.retry_not_before == ev.now + 1000


def run_from(state: RunState, events: list[Event]) -> RunState:
    for e in events:
        t = apply(state, e)
        assert t.verdict.accepted, f"{e.event_type} refused: {t.verdict}"
        assert t.state is not None
        state = t.state
    return state


def test_failure_counts_by_signature_and_quarantine_keeps_status() -> None:
    ev = Ev()
    s = running(ev)
    s = run_from(s, [ev.failure(1, "quarantine_node", "straggler:node-b", "straggler"),
                     ev.failure(1, "escalate", "nan", "non_finite"),
                     ev.failure(1, "quarantine_node", "straggler:node-b", "straggler")])
    assert s.status == Status.RUNNING  # neither action moves the status by itself
    assert s.failures == {"straggler:node-b": 2, "nan": 1}
    assert s.failure_count == 3


def test_restart_resets_per_generation_observations() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.heartbeat(1, "w0"), ev.exited(1, "w1", exit_code=None,
                                                                   signal=9)])
    assert s.exits == {"w1": -9}  # a signal is recorded as its negative
    assert set(s.heartbeats) == {"w0"}
    s = run_from(s, [ev.generation_started(2, resume_step=10,
                                           members=(Member("w7", "node-c", 0),))])
    assert (s.heartbeats, s.exits, s.step) == ({}, {}, 10)
    assert [m.logical_id for m in s.members] == ["w7"]
    # Membership follows the generation: the old members are no longer members.
    rejected(s, ev.heartbeat(2, "w0"), NOT_A_MEMBER)
    assert evolve(s, ev.heartbeat(2, "w7")) is not s


def test_generation_started_without_members_keeps_the_admitted_ones() -> None:
    ev = Ev()
    s = run([ev.submitted(), ev.admitted(), ev.generation_started(1, members=())])
    assert s.members == MEMBERS


def test_worker_exit_code_and_heartbeat_time_is_the_latest() -> None:
    ev = Ev()
    s = running(ev)
    s = run_from(s, [ev.exited(1, "w1", exit_code=3)])
    assert s.exits == {"w1": 3}
    late = ev.now + 10_000
    s = run_from(s, [ev.heartbeat(1, "w0", at=late), ev.heartbeat(1, "w0", at=late - 5_000)])
    assert s.heartbeats["w0"] == late  # an older heartbeat delivered late does not win
    assert s.updated_at == late  # updated_at never moves backwards either


def test_cancel_requested_marks_but_does_not_stop() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.cancel_requested(1)])
    assert s.cancel_requested and s.status == Status.RUNNING


# --- every rejection reason ----------------------------------------------------------


def _scenarios() -> dict[str, Callable[[], tuple[RunState | None, Event]]]:
    """reason -> (a state, an event the fold must refuse with that reason)."""

    def stale() -> tuple[RunState | None, Event]:
        ev = Ev()
        return run_from(running(ev), [ev.generation_started(2, resume_step=10)]), ev.step(1, 11)

    def unknown() -> tuple[RunState | None, Event]:
        return None, Ev().heartbeat(1)

    def wrong() -> tuple[RunState | None, Event]:
        ev = Ev()
        return running(ev), Ev("r2").heartbeat(1)

    def duplicate() -> tuple[RunState | None, Event]:
        ev = Ev()
        return run([ev.submitted()]), ev.submitted()

    def illegal() -> tuple[RunState | None, Event]:
        ev = Ev()
        return running(ev), ev.admitted()

    def terminal() -> tuple[RunState | None, Event]:
        ev = Ev()
        return run_from(running(ev), [ev.cancelled(1)]), ev.step(1, 11)

    def not_active() -> tuple[RunState | None, Event]:
        ev = Ev()
        return run([ev.submitted(), ev.admitted()]), ev.heartbeat(0)

    def not_forward_gen() -> tuple[RunState | None, Event]:
        ev = Ev()
        return running(ev), ev.generation_started(1)

    def not_forward_step() -> tuple[RunState | None, Event]:
        ev = Ev()
        return running(ev), ev.step(1, 10)

    def not_member() -> tuple[RunState | None, Event]:
        ev = Ev()
        return running(ev), ev.heartbeat(1, "w9")

    def cursor_without() -> tuple[RunState | None, Event]:
        ev = Ev()
        return running(ev, ckpt_step=None), ev.cursor(1, 10)

    def resume_beyond() -> tuple[RunState | None, Event]:
        ev = Ev()
        return running(ev), ev.generation_started(2, resume_step=11)

    def resume_missing() -> tuple[RunState | None, Event]:
        ev = Ev()
        return running(ev), ev.generation_started(2, resume_step=None)

    def unknown_checkpoint() -> tuple[RunState | None, Event]:
        ev = Ev()
        return running(ev), ev.revoked(1, 10, digest="sha256:never-committed")

    def step_jump() -> tuple[RunState | None, Event]:
        ev = Ev()  # at step 10: a claim of step 10**12 would refuse every real step after it
        return running(ev), ev.step(1, 10**12)

    def not_on_node() -> tuple[RunState | None, Event]:
        ev = Ev()  # w0 runs on node-a; node-b's agent may not report its exit
        return running(ev), ev.exited(1, "w0", node="node-b")

    def corruption_suspected() -> tuple[RunState | None, Event]:
        ev = Ev()  # at step 10, a suspicion at step 12: no checkpoint at 12 or later commits
        return run_from(running(ev), [ev.suspected(1, 12)]), ev.committed(1, 13)

    return {
        STALE_GENERATION: stale,
        UNKNOWN_RUN: unknown,
        WRONG_RUN: wrong,
        DUPLICATE_SUBMISSION: duplicate,
        ILLEGAL_TRANSITION: illegal,
        RUN_TERMINAL: terminal,
        RUN_NOT_ACTIVE: not_active,
        GENERATION_NOT_FORWARD: not_forward_gen,
        STEP_NOT_FORWARD: not_forward_step,
        NOT_A_MEMBER: not_member,
        CURSOR_WITHOUT_CHECKPOINT: cursor_without,
        RESUME_BEYOND_CHECKPOINT: resume_beyond,
        RESUME_MISSING: resume_missing,
        UNKNOWN_CHECKPOINT: unknown_checkpoint,
        STEP_JUMP: step_jump,
        NOT_ON_NODE: not_on_node,
        CORRUPTION_SUSPECTED: corruption_suspected,
    }


SCENARIOS = _scenarios()


def test_every_reason_constant_has_a_scenario() -> None:
    constants = {
        value for name, value in vars(fold_module).items()
        if name.isupper() and isinstance(value, str)
    }
    assert constants == set(SCENARIOS), "a verdict reason without a test, or a stale test"


@pytest.mark.parametrize("reason", sorted(SCENARIOS))
def test_reason_is_produced(reason: str) -> None:
    state, event = SCENARIOS[reason]()
    t = rejected(state, event, reason)
    assert str(t.verdict) == f"rejected: {reason} ({t.verdict.detail})"


def test_unknown_run_events_are_dropped_by_fold() -> None:
    ev = Ev()
    early = ev.heartbeat(1)
    states = fold([early, ev.submitted(), ev.admitted()])
    assert states["r1"].status == Status.ADMITTED
    assert fold([early]) == {}


def test_wrong_run_on_any_event_type() -> None:
    ev, other = Ev(), Ev("r2")
    s = running(ev)
    rejected(s, other.committed(1, 20), WRONG_RUN)
    rejected(s, other.cancelled(1), WRONG_RUN)
    rejected(s, other.submitted(), WRONG_RUN)


@pytest.mark.parametrize("make", [
    lambda ev: ev.generation_started(1),            # generation stands still
    lambda ev: ev.generation_started(0),            # generation moves backwards
])
def test_generation_must_advance(make: Callable[[Ev], Event]) -> None:
    ev = Ev()
    rejected(running(ev), make(ev), GENERATION_NOT_FORWARD)


def test_resume_step_is_bounded_by_the_latest_checkpoint() -> None:
    ev = Ev()
    s = running(ev, ckpt_step=None)
    t = rejected(s, ev.generation_started(2, resume_step=1), RESUME_BEYOND_CHECKPOINT)
    assert "0" in t.verdict.detail  # without a checkpoint only step 0 can be resumed
    s = run_from(running(ev, ckpt_step=10), [])
    rejected(s, ev.generation_started(2, resume_step=11), RESUME_BEYOND_CHECKPOINT)
    ok = run_from(s, [ev.generation_started(2, resume_step=10)])
    assert ok.step == 10


def test_step_not_forward_for_steps_checkpoints_and_cursors() -> None:
    ev = Ev()
    s = running(ev)  # step 10, checkpoint at 10
    rejected(s, ev.step(1, 10), STEP_NOT_FORWARD)
    rejected(s, ev.step(1, 3), STEP_NOT_FORWARD)
    rejected(s, ev.committed(1, 10), STEP_NOT_FORWARD)
    rejected(s, ev.committed(1, 9), STEP_NOT_FORWARD)
    rejected(s, ev.proposed(1, 10), STEP_NOT_FORWARD)
    s = run_from(s, [ev.cursor(1, 10)])
    rejected(s, ev.cursor(1, 10, position=999), STEP_NOT_FORWARD)


def test_cursor_must_sit_on_the_latest_checkpoint() -> None:
    ev = Ev()
    s = running(ev)  # checkpoint at 10
    rejected(s, ev.cursor(1, 9), CURSOR_WITHOUT_CHECKPOINT)
    rejected(s, ev.cursor(1, 11), CURSOR_WITHOUT_CHECKPOINT)
    s = run_from(s, [ev.cursor(1, 10), ev.step(1, 11), ev.committed(1, 11)])
    s = run_from(s, [ev.cursor(1, 11)])
    assert s.cursor is not None and s.cursor.step == 11


NON_MEMBER_MAKERS: dict[str, Callable[[Ev, str], Event]] = {
    "HeartbeatRecorded": lambda ev, who: ev.heartbeat(1, who),
    "WorkerExited": lambda ev, who: ev.exited(1, who),
    "ShardWritten": lambda ev, who: ev.shard(1, 11, who),
    "CheckpointWriteFailed": lambda ev, who: ev.write_failed(1, 11, who),
    "CheckpointVerificationFailed": lambda ev, who: ev.verify_failed(1, CKPT10, who),
    "CheckpointRestored": lambda ev, who: ev.restored(1, CKPT10, who),
    "CheckpointReplicated": lambda ev, who: ev.replicated(1, CKPT10, who),
}


def test_every_report_that_names_a_member_is_checked() -> None:
    assert set(NON_MEMBER_MAKERS) == {t.__name__ for t in MEMBER_TYPES}


@pytest.mark.parametrize("name", sorted(NON_MEMBER_MAKERS))
def test_reports_from_non_members_are_refused(name: str) -> None:
    ev = Ev()
    s = running(ev)
    t = rejected(s, NON_MEMBER_MAKERS[name](ev, "w9"), NOT_A_MEMBER)
    assert "'w9'" in t.verdict.detail
    # A member's report of the same kind is accepted.
    assert apply(s, NON_MEMBER_MAKERS[name](ev, "w1")).verdict.accepted


@pytest.mark.parametrize("make,status", [
    (lambda ev: ev.generation_started(1), Status.SUBMITTED),
    (lambda ev: ev.generation_started(1), Status.QUEUED),
    (lambda ev: ev.confirmed(1), Status.RUNNING),
    (lambda ev: ev.finished(1, "succeeded"), Status.STARTING),
    (lambda ev: ev.finished(1, "succeeded"), Status.RECOVERING),
    (lambda ev: ev.failure(0, "restart"), Status.SUBMITTED),
    (lambda ev: ev.failure(0, "requeue"), Status.QUEUED),
    (lambda ev: ev.queued(), Status.ADMITTED),
    (lambda ev: ev.admitted(), Status.STARTING),
])
def test_illegal_transitions(make: Callable[[Ev], Event], status: Status) -> None:
    ev = Ev()
    state = STATE_BUILDERS[status](ev)
    assert state.status == status
    rejected(state, make(ev), ILLEGAL_TRANSITION)


def test_success_requires_the_current_generation() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.generation_started(2, resume_step=10), ev.confirmed(2)])
    rejected(s, ev.finished(1, "succeeded"), STALE_GENERATION)
    rejected(s, ev.failure(1, "restart"), STALE_GENERATION)


# --- fencing -------------------------------------------------------------------------


FENCED_MAKERS: dict[str, Callable[[Ev, int], Event]] = {
    "ManifestProposed": lambda ev, g: ev.proposed(g, 20),
    "ManifestCommitted": lambda ev, g: ev.committed(g, 20),
    "CursorAdvanced": lambda ev, g: ev.cursor(g, 10),
    "StepCommitted": lambda ev, g: ev.step(g, 11),
    "HeartbeatRecorded": lambda ev, g: ev.heartbeat(g, "w0", 11),
    "MembersHeartbeatRecorded": lambda ev, g: ev.members_heartbeat(g, ("w0", 11)),
    "ShardWritten": lambda ev, g: ev.shard(g, 20),
    "WorkerExited": lambda ev, g: ev.exited(g, "w0", node="node-a"),
    "MembershipConfirmed": lambda ev, g: ev.confirmed(g),
    "GroupStartCommanded": lambda ev, g: ev.group_start(g),
    "CheckpointStaged": lambda ev, g: ev.staged(g, 11),
    "CheckpointSkipped": lambda ev, g: ev.skipped(g, 11),
    "CheckpointWriteFailed": lambda ev, g: ev.write_failed(g, 11, "w0"),
    "CheckpointVerificationFailed": lambda ev, g: ev.verify_failed(g, CKPT10, "w0"),
    "CheckpointRestored": lambda ev, g: ev.restored(g, CKPT10, "w0"),
    "CheckpointReplicated": lambda ev, g: ev.replicated(g, CKPT10, "w0"),
    "CheckpointRevoked": lambda ev, g: ev.revoke(g, CKPT10),
}


@pytest.mark.parametrize("name", sorted(FENCED_MAKERS))
@pytest.mark.parametrize("stale_gen", [1, 3])
def test_reports_of_another_generation_are_fenced(name: str, stale_gen: int) -> None:
    ev = Ev()
    # Recovering, generation 2
    s = run_from(running(ev), [ev.generation_started(2, resume_step=10)])
    before = replace(s)
    t = rejected(s, FENCED_MAKERS[name](ev, stale_gen), STALE_GENERATION)
    assert f"generation {stale_gen}" in t.verdict.detail and "current is 2" in t.verdict.detail
    assert t.state == before
    # The same event under the live generation is accepted: the refusal was the fence.
    assert apply(s, FENCED_MAKERS[name](ev, 2)).verdict.accepted


def test_zombie_generation_cannot_publish_a_checkpoint_or_move_progress() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.generation_started(2, resume_step=10), ev.confirmed(2),
                               ev.step(2, 11)])
    zombie = [ev.step(1, 12, tokens=5), ev.committed(1, 12), ev.cursor(1, 12),
              ev.heartbeat(1, "w0"), ev.proposed(1, 12)]
    after = fold(zombie, {"r1": s})["r1"]
    assert after == s
    assert (after.step, after.tokens, after.checkpoint, after.cursor) == (
        11, s.tokens, s.checkpoint, s.cursor)
    assert after.checkpoint is not None and after.checkpoint.step == 10


# --- cancellation --------------------------------------------------------------------


def test_cancel_revokes_and_everything_after_is_refused() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.cancel_requested(1), ev.cancelled(1)])
    assert (s.status, s.outcome_reason, s.cancel_requested) == (Status.CANCELLED, "budget", True)
    after = [
        ev.step(1, 11), ev.committed(1, 11), ev.cursor(1, 10), ev.heartbeat(1),
        ev.members_heartbeat(1, ("w0", 11)),
        ev.confirmed(1), ev.generation_started(2, resume_step=10), ev.finished(1, "succeeded"),
        ev.finished(1, "failed"), ev.failure(1, "restart"), ev.cancelled(1),
        ev.cancel_requested(1), ev.admitted(), ev.queued(), ev.submitted(),
        ev.exited(1), ev.shard(1, 11), ev.proposed(1, 11), ev.group_start(1),
        ev.agent_registered(run_id="r1"), ev.agent_heartbeat(run_id="r1"),
        ev.quarantined(run_id="r1"), ev.node_request(run_id="r1"),
        ev.cordoned(run_id="r1"), ev.uncordoned(run_id="r1"),
        ev.quarantine_expired(run_id="r1"), ev.staged(1, 11), ev.skipped(1, 11),
        ev.write_failed(1, 11), ev.verify_failed(1, CKPT10), ev.restored(1, CKPT10),
        ev.replicated(1, CKPT10),
        ev.revoke(1, CKPT10), ev.interval(1, 100), ev.step_times(1),
        ev.key_registered(run_id="r1"), ev.key_revoked(run_id="r1"),
        ev.preflight(run_id="r1"), ev.pilot(run_id="r1"), ev.drill(run_id="r1"),
        ev.paused(1), ev.resumed(1), ev.resume_requested(1),
        ev.suspected(1, 11), ev.replayed(1, 11, 1), ev.classified(1, 11, 1),
    ]
    informational = {t.__name__ for t in INFORMATIONAL_TYPES}
    assert informational == {"WriteRejected", "AlertRaised", "AlertResolved",
                             "GroupStopCommanded", "RunManifestPublished", "NodeLost"}
    assert {type(e).__name__ for e in after} | informational == set(EVENT_TYPES)
    for e in after:
        rejected(s, e, RUN_TERMINAL)


def test_informational_records_after_the_end_only_count() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.cancelled(1)])
    t = apply(s, ev.rejected(1))
    assert t.verdict.accepted and t.state is not None
    assert t.state.rejections == s.rejections + 1
    t2 = apply(t.state, ev.alert(1, "critical"))
    assert t2.verdict.accepted and t2.state is not None
    assert t2.state.alerts == s.alerts + 1
    # Cancellation is recorded first; the stop commands follow it (docs/architecture.md §6).
    t3 = apply(t2.state, ev.group_stop(1))
    assert t3.verdict.accepted and t3.state is not None
    unchanged = {"rejections", "alerts", "open_alerts", "updated_at"}
    for f in fields(RunState):
        if f.name not in unchanged:
            assert getattr(t3.state, f.name) == getattr(s, f.name), f.name


@pytest.mark.parametrize("status", [Status.SUBMITTED, Status.QUEUED, Status.ADMITTED,
                                    Status.STARTING, Status.RUNNING, Status.RECOVERING])
def test_cancel_is_accepted_from_every_live_status(status: Status) -> None:
    ev = Ev()
    s = run_from(STATE_BUILDERS[status](ev), [ev.cancelled(0)])
    assert s.status == Status.CANCELLED


# --- requeue -------------------------------------------------------------------------


def test_requeue_then_readmission_recovers_from_the_checkpoint() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.failure(1, "requeue", signature="infra:node-b",
                                          failure_class="infrastructure")])
    assert (s.status, s.queue_reason) == (Status.QUEUED, "requeued: infra:node-b")
    assert s.failures == {"infra:node-b": 1}
    # The requeued generation may no longer report.
    rejected(s, ev.step(1, 11), RUN_NOT_ACTIVE)
    rejected(s, ev.committed(1, 11), RUN_NOT_ACTIVE)
    s = run_from(s, [ev.admitted()])
    assert (s.status, s.queue_reason) == (Status.ADMITTED, "")
    s = run_from(s, [ev.generation_started(2, resume_step=10)])
    assert (s.status, s.generation, s.step) == (Status.RECOVERING, 2, 10)
    s = run_from(s, [ev.confirmed(2)])
    assert s.status == Status.RUNNING


def test_requeue_without_a_checkpoint_starts_afresh() -> None:
    ev = Ev()
    s = run_from(running(ev, ckpt_step=None), [ev.failure(1, "requeue"), ev.queued(),
                                               ev.admitted(), ev.generation_started(2)])
    assert (s.status, s.generation, s.step, s.checkpoint) == (Status.STARTING, 2, 0, None)


# --- the (status x event type) table ---------------------------------------------------


def _reach(ev: Ev, status: Status) -> RunState:
    """A state in ``status``; every state from Starting on has a checkpoint at step 10."""
    if status == Status.SUBMITTED:
        return run([ev.submitted()])
    if status == Status.QUEUED:
        return run([ev.submitted(), ev.queued()])
    if status == Status.ADMITTED:
        return run([ev.submitted(), ev.admitted()])
    if status == Status.STARTING:
        return run([ev.submitted(), ev.admitted(), ev.generation_started(1), ev.committed(1, 10)])
    base = running(ev)
    if status == Status.RUNNING:
        return base
    if status == Status.RECOVERING:
        return run_from(base, [ev.generation_started(2, resume_step=10)])
    if status == Status.SUCCEEDED:
        return run_from(base, [ev.finished(1, "succeeded")])
    if status == Status.FAILED:
        return run_from(base, [ev.finished(1, "failed")])
    return run_from(base, [ev.cancelled(1)])


STATE_BUILDERS: dict[Status, Callable[[Ev], RunState]] = {
    status: (lambda ev, status=status: _reach(ev, status)) for status in Status
}


# One event per column, otherwise valid for the state it meets (current generation,
# a step that moves forward, a member's id, a cursor on the latest checkpoint), so
# only the status decides.
COLUMNS: dict[str, Callable[[Ev, RunState], Event]] = {
    "RunSubmitted": lambda ev, s: ev.submitted(),
    "CancelRequested": lambda ev, s: ev.cancel_requested(s.generation),
    "RunQueued": lambda ev, s: ev.queued(s.generation),
    "RunAdmitted": lambda ev, s: ev.admitted(s.generation),
    "GenerationStarted": lambda ev, s: ev.generation_started(
        s.generation + 1, resume_step=s.checkpoint.step if s.checkpoint else None),
    "MembershipConfirmed": lambda ev, s: ev.confirmed(s.generation),
    "ManifestCommitted": lambda ev, s: ev.committed(s.generation, 20),
    "CursorAdvanced": lambda ev, s: ev.cursor(s.generation, 10),
    "WriteRejected": lambda ev, s: ev.rejected(s.generation),
    "FailureClassified(quarantine_node)": lambda ev, s: ev.failure(s.generation,
                                                                   "quarantine_node"),
    "FailureClassified(restart)": lambda ev, s: ev.failure(s.generation, "restart"),
    "FailureClassified(requeue)": lambda ev, s: ev.failure(s.generation, "requeue"),
    "AlertRaised": lambda ev, s: ev.alert(s.generation),
    "RunCancelled": lambda ev, s: ev.cancelled(s.generation),
    "RunFinished(succeeded)": lambda ev, s: ev.finished(s.generation, "succeeded"),
    "RunFinished(failed)": lambda ev, s: ev.finished(s.generation, "failed"),
    "HeartbeatRecorded": lambda ev, s: ev.heartbeat(s.generation, "w0", s.step),
    "MembersHeartbeatRecorded": lambda ev, s: ev.members_heartbeat(s.generation, ("w0", s.step)),
    "StepCommitted": lambda ev, s: ev.step(s.generation, s.step + 1),
    "ShardWritten": lambda ev, s: ev.shard(s.generation, 20, "w1"),
    "ManifestProposed": lambda ev, s: ev.proposed(s.generation, 20),
    "WorkerExited": lambda ev, s: ev.exited(s.generation, "w1"),
    "GroupStartCommanded": lambda ev, s: ev.group_start(s.generation),
    "GroupStopCommanded": lambda ev, s: ev.group_stop(s.generation),
    # Node-scoped inventory, wrongly keyed by the run: the fold has no rule for it.
    "AgentRegistered": lambda ev, s: ev.agent_registered(run_id=s.run_id),
    "AgentHeartbeatRecorded": lambda ev, s: ev.agent_heartbeat(run_id=s.run_id),
    "NodeQuarantined": lambda ev, s: ev.quarantined(run_id=s.run_id),
    "NodeOperationRequested": lambda ev, s: ev.node_request(run_id=s.run_id),
    "NodeCordoned": lambda ev, s: ev.cordoned(run_id=s.run_id),
    "NodeUncordoned": lambda ev, s: ev.uncordoned(run_id=s.run_id),
    "NodeQuarantineExpired": lambda ev, s: ev.quarantine_expired(run_id=s.run_id),
    "ManifestProposed(v2)": lambda ev, s: ev.proposed(s.generation, 20, with_cursor=True),
    "CheckpointStaged": lambda ev, s: ev.staged(s.generation, s.step),
    "CheckpointSkipped": lambda ev, s: ev.skipped(s.generation, s.step),
    "CheckpointWriteFailed": lambda ev, s: ev.write_failed(s.generation, 20, "w1"),
    "CheckpointVerificationFailed": lambda ev, s: ev.verify_failed(s.generation, CKPT10, "w1"),
    "CheckpointRestored": lambda ev, s: ev.restored(s.generation, CKPT10, "w1"),
    "CheckpointReplicated": lambda ev, s: ev.replicated(s.generation, CKPT10, "w1"),
    # From Starting on the state holds CKPT10 (committed under generation 1).
    "CheckpointRevoked": lambda ev, s: ev.revoke(s.generation, CKPT10),
    "CheckpointIntervalChanged": lambda ev, s: ev.interval(s.generation, 100),
    "AlertResolved": lambda ev, s: ev.alert_resolved(s.generation),
    "RunManifestPublished": lambda ev, s: ev.manifest_published(s.generation),
    "NodeLost": lambda ev, s: ev.node_lost(s.generation),
    "StepTimesRecorded": lambda ev, s: ev.step_times(s.generation, s.step + 1, "w1"),
    # Key records belong on runledger.keys; wrongly keyed by the run, the fold has no rule.
    "PrincipalKeyRegistered": lambda ev, s: ev.key_registered(run_id=s.run_id),
    "PrincipalKeyRevoked": lambda ev, s: ev.key_revoked(run_id=s.run_id),
    # A preflight is about a spec (keyed spec/<hex>); wrongly keyed by the run, no rule.
    "PreflightCompleted": lambda ev, s: ev.preflight(run_id=s.run_id),
    "PilotCompleted": lambda ev, s: ev.pilot(run_id=s.run_id),
    "DrillCompleted": lambda ev, s: ev.drill(run_id=s.run_id),
    "RunPaused": lambda ev, s: ev.paused(s.generation),
    # None of the table's states is paused: a resume is legal only after a pause.
    "RunResumed": lambda ev, s: ev.resumed(s.generation),
    "ResumeRequested": lambda ev, s: ev.resume_requested(s.generation),
    "CorruptionSuspected": lambda ev, s: ev.suspected(s.generation, s.step + 1),
    "StepReplayed": lambda ev, s: ev.replayed(s.generation, s.step + 1, s.generation),
    # None of the table's states has a suspicion open: a verdict names none.
    "CorruptionClassified": lambda ev, s: ev.classified(s.generation, s.step + 1, s.generation),
}

SUB, QUE, ADM, STA, RUN, REC = (Status.SUBMITTED, Status.QUEUED, Status.ADMITTED,
                                Status.STARTING, Status.RUNNING, Status.RECOVERING)
LIVE = {SUB, QUE, ADM, STA, RUN, REC}
ACTIVE = {STA, RUN, REC}
ALL = set(Status)

# Where each column is legal.
LEGAL: dict[str, set[Status]] = {
    "RunSubmitted": set(),
    "CancelRequested": LIVE,
    "RunQueued": {SUB, QUE},
    "RunAdmitted": {SUB, QUE},
    "GenerationStarted": {ADM} | ACTIVE,
    "MembershipConfirmed": {STA, REC},
    "ManifestCommitted": ACTIVE,
    "CursorAdvanced": ACTIVE,
    "WriteRejected": ALL,
    "FailureClassified(quarantine_node)": ACTIVE,
    "FailureClassified(restart)": ACTIVE,
    "FailureClassified(requeue)": ACTIVE,
    "AlertRaised": ALL,
    "RunCancelled": LIVE,
    "RunFinished(succeeded)": {RUN},
    "RunFinished(failed)": LIVE,
    "HeartbeatRecorded": ACTIVE,
    "MembersHeartbeatRecorded": ACTIVE,
    "StepCommitted": ACTIVE,
    "ShardWritten": ACTIVE,
    "ManifestProposed": ACTIVE,
    "WorkerExited": ACTIVE,
    "GroupStartCommanded": ACTIVE,
    "GroupStopCommanded": ALL,
    "AgentRegistered": set(),
    "AgentHeartbeatRecorded": set(),
    "NodeQuarantined": set(),
    "NodeOperationRequested": set(),
    "NodeCordoned": set(),
    "NodeUncordoned": set(),
    "NodeQuarantineExpired": set(),
    "ManifestProposed(v2)": ACTIVE,
    "CheckpointStaged": ACTIVE,
    "CheckpointSkipped": ACTIVE,
    "CheckpointWriteFailed": ACTIVE,
    "CheckpointVerificationFailed": ACTIVE,
    "CheckpointRestored": ACTIVE,
    "CheckpointReplicated": ACTIVE,
    "CheckpointRevoked": ACTIVE,
    # The controller's own setting: not fenced, legal until the run ends.
    "CheckpointIntervalChanged": LIVE,
    "AlertResolved": ALL,
    # Informational: written right after the run ends, never moves the status.
    "RunManifestPublished": ALL,
    "NodeLost": ALL,
    "StepTimesRecorded": ACTIVE,
    "PrincipalKeyRegistered": set(),
    "PrincipalKeyRevoked": set(),
    "PreflightCompleted": set(),
    "PilotCompleted": set(),
    "DrillCompleted": set(),
    "RunPaused": ACTIVE,
    "RunResumed": set(),
    "ResumeRequested": set(),
    "CorruptionSuspected": ACTIVE,
    "StepReplayed": ACTIVE,
    "CorruptionClassified": set(),
}

_FENCED_COLUMNS = {"MembershipConfirmed", "ManifestCommitted", "CursorAdvanced",
                   "HeartbeatRecorded", "MembersHeartbeatRecorded", "StepCommitted",
                   "ShardWritten", "ManifestProposed",
                   "WorkerExited", "GroupStartCommanded", "ManifestProposed(v2)",
                   "CheckpointStaged", "CheckpointSkipped", "CheckpointWriteFailed",
                   "CheckpointVerificationFailed", "CheckpointRestored", "CheckpointRevoked",
                   "StepTimesRecorded", "CheckpointReplicated", "CorruptionSuspected",
                   "StepReplayed"}


def _expected_reason(column: str, status: Status) -> str:
    if status.terminal:
        return RUN_TERMINAL
    if column == "RunSubmitted":
        return DUPLICATE_SUBMISSION
    if column in _FENCED_COLUMNS and not status.active:
        return RUN_NOT_ACTIVE
    return ILLEGAL_TRANSITION


def test_table_covers_every_event_type() -> None:
    names = {c.split("(")[0] for c in COLUMNS}
    assert names == set(EVENT_TYPES)
    assert set(LEGAL) == set(COLUMNS)


@pytest.mark.parametrize("status", list(Status))
@pytest.mark.parametrize("column", list(COLUMNS))
def test_status_by_event_type(status: Status, column: str) -> None:
    ev = Ev()
    state = STATE_BUILDERS[status](ev)
    assert state.status == status
    event = COLUMNS[column](ev, state)
    t = apply(state, event)
    if status in LEGAL[column]:
        assert t.verdict.accepted, f"{column} from {status.value}: {t.verdict}"
        assert t.state is not None and t.state is not state
        assert t.state.updated_at == event.header.occurred_at
    else:
        assert not t.verdict.accepted, f"{column} from {status.value} was accepted"
        assert t.verdict.reason == _expected_reason(column, status), str(t.verdict)
        assert t.state is state


# Where an accepted column leaves the status (absent: unchanged).
MOVES: dict[tuple[str, Status], Status] = {
    **{("RunQueued", s): QUE for s in (SUB, QUE)},
    **{("RunAdmitted", s): ADM for s in (SUB, QUE)},
    # Admitted with a checkpoint (a requeued run) would go to Recovering instead.
    ("GenerationStarted", ADM): STA,
    **{("GenerationStarted", s): REC for s in ACTIVE},
    **{("MembershipConfirmed", s): RUN for s in (STA, REC)},
    **{("FailureClassified(restart)", s): REC for s in ACTIVE},
    **{("FailureClassified(requeue)", s): QUE for s in ACTIVE},
    **{("RunCancelled", s): Status.CANCELLED for s in LIVE},
    **{("RunPaused", s): QUE for s in ACTIVE},
    ("RunFinished(succeeded)", RUN): Status.SUCCEEDED,
    **{("RunFinished(failed)", s): Status.FAILED for s in LIVE},
}


@pytest.mark.parametrize(
    "status,column",
    [(status, column) for column in COLUMNS for status in Status if status in LEGAL[column]],
)
def test_where_accepted_events_move_the_status(status: Status, column: str) -> None:
    ev = Ev()
    state = STATE_BUILDERS[status](ev)
    new = evolve(state, COLUMNS[column](ev, state))
    assert new is not None
    assert new.status == MOVES.get((column, status), status)


def test_fold_does_not_mutate_the_states_it_is_given() -> None:
    ev = Ev()
    s = running(ev)
    given = {"r1": s}
    out = fold([ev.step(1, 11)], given)
    assert given == {"r1": s} and out["r1"].step == 11 and s.step == 10


def test_fold_keeps_runs_apart() -> None:
    a, b = Ev("a"), Ev("b")
    states = fold([a.submitted(), b.submitted(), a.admitted(), b.queued(), a.generation_started(1)])
    assert (states["a"].status, states["b"].status) == (Status.STARTING, Status.QUEUED)


def test_node_scoped_events_never_become_runs() -> None:
    ev = Ev()
    node_events = [ev.agent_registered("node-a"), ev.agent_heartbeat("node-a"),
                   ev.quarantined("node-b")]
    for e in node_events:
        rejected(None, e, UNKNOWN_RUN)
    states = fold([ev.submitted(), *node_events, ev.admitted()])
    assert set(states) == {"r1"} and states["r1"].status == Status.ADMITTED


def test_a_restart_decision_revokes_the_failed_generation_before_the_next_starts() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.failure(1, "restart")])
    assert s.status == Status.RECOVERING and s.awaiting_generation
    for zombie in (ev.step(1, 11), ev.committed(1, 11), ev.heartbeat(1), ev.confirmed(1),
                   ev.failure(1, "restart")):
        t = rejected(s, zombie, STALE_GENERATION)
        assert "revoked" in t.verdict.detail
    s = run_from(s, [ev.generation_started(2, resume_step=10)])
    assert not s.awaiting_generation
    assert run_from(s, [ev.step(2, 11)]).step == 11


# --- checkpoint history, revocation and interval (docs/architecture.md §10) -----------


def committed_at(ev: Ev, steps: list[int], gen: int = 1) -> RunState:
    """Running in generation 1 with a step and a committed checkpoint at each of ``steps``."""
    log: list[Event] = [ev.submitted(), ev.admitted(), ev.generation_started(1), ev.confirmed(1)]
    for step in steps:
        log += [ev.step(gen, step), ev.committed(gen, step)]
    return run(log)


def test_commits_build_the_history_oldest_first() -> None:
    ev = Ev()
    s = committed_at(ev, [5, 10, 15])
    assert [c.step for c in s.checkpoints] == [5, 10, 15]
    assert [c.manifest_digest for c in s.checkpoints] == [
        "sha256:g1s5", "sha256:g1s10", "sha256:g1s15"]
    assert s.checkpoint == s.checkpoints[-1]
    # A proposal, and every other checkpoint report, publishes nothing.
    s2 = run_from(s, [ev.proposed(1, 20, with_cursor=True), ev.staged(1, 15),
                      ev.skipped(1, 16), ev.write_failed(1, 16), ev.shard(1, 16)])
    assert (s2.checkpoint, s2.checkpoints, s2.cursor) == (s.checkpoint, s.checkpoints, s.cursor)


def test_revoking_the_latest_falls_back_to_the_previous() -> None:
    ev = Ev()
    s = run_from(committed_at(ev, [5, 10, 15]), [ev.step(1, 16)])
    c5, c10, c15 = s.checkpoints
    s = run_from(s, [ev.revoke(1, c15)])
    assert s.checkpoint == c10 and s.checkpoints == (c5, c10)
    assert s.step == 10  # progress restarts from the checkpoint "latest" fell back to
    s = run_from(s, [ev.revoke(1, c10)])
    assert s.checkpoint == c5 and s.checkpoints == (c5,)
    assert s.step == 5
    assert s.status == Status.RUNNING and s.generation == 1


def test_revoking_an_older_checkpoint_keeps_the_latest() -> None:
    ev = Ev()
    s = committed_at(ev, [5, 10, 15])
    c5, c10, c15 = s.checkpoints
    s = run_from(s, [ev.revoke(1, c10)])
    assert s.checkpoint == c15 and s.checkpoints == (c5, c15)
    assert s.step == 15
    # Revoking the latest now skips the revoked one.
    s = run_from(s, [ev.revoke(1, c15)])
    assert s.checkpoint == c5 and s.step == 5


def test_history_is_bounded_and_keeps_commit_order() -> None:
    ev = Ev()
    s = committed_at(ev, list(range(1, 71)))  # 70 commits
    assert len(s.checkpoints) == CHECKPOINT_HISTORY == 64
    assert [c.step for c in s.checkpoints] == list(range(7, 71))
    assert s.checkpoint is not None and s.checkpoint.step == 70
    s = run_from(s, [ev.revoke(1, s.checkpoints[-1])])
    assert s.checkpoint is not None and s.checkpoint.step == 69
    assert [c.step for c in s.checkpoints] == list(range(7, 70))
    # A checkpoint that fell out of the history can no longer be revoked.
    rejected(s, ev.revoked(1, 6), UNKNOWN_CHECKPOINT)
    rejected(s, ev.revoked(1, 70), UNKNOWN_CHECKPOINT)  # already revoked
    # A new commit after the revocation is appended at the end, the history bounded again.
    s = run_from(s, [ev.step(1, 70), ev.committed(1, 70), ev.step(1, 71),
                     ev.committed(1, 71)])
    assert [c.step for c in s.checkpoints] == list(range(8, 72))


def test_revoking_an_unknown_digest_is_refused() -> None:
    ev = Ev()
    s = committed_at(ev, [5, 10])
    t = rejected(s, ev.revoked(1, 10, digest="sha256:other"), UNKNOWN_CHECKPOINT)
    assert "sha256:other" in t.verdict.detail
    # The digest decides, not the step: the right step with a wrong digest is refused.
    rejected(s, ev.revoked(1, 10, committed_gen=2), UNKNOWN_CHECKPOINT)
    # Nothing committed yet: nothing can be revoked.
    ev = Ev()
    rejected(running(ev, ckpt_step=None), ev.revoked(1, 10), UNKNOWN_CHECKPOINT)


def test_a_stale_or_revoked_generation_cannot_revoke() -> None:
    ev = Ev()
    s = committed_at(ev, [5, 10])
    c10 = s.checkpoints[-1]
    decided = run_from(s, [ev.failure(1, "restart")])  # generation 1 is revoked at once
    t = rejected(decided, ev.revoke(1, c10), STALE_GENERATION)
    assert "revoked" in t.verdict.detail
    s2 = run_from(decided, [ev.generation_started(2, resume_step=10)])
    for gen in (1, 3):
        t = rejected(s2, ev.revoke(gen, c10), STALE_GENERATION)
        assert f"generation {gen}" in t.verdict.detail
    # The fence comes first: a stale revocation of an unknown digest is still stale.
    rejected(s2, ev.revoked(1, 10, digest="sha256:other"), STALE_GENERATION)
    # The live generation revokes a checkpoint an older generation committed.
    s3 = run_from(s2, [ev.revoke(2, c10)])
    assert s3.checkpoint is not None and s3.checkpoint.step == 5
    # Before any generation, or after the end, there is nothing to revoke.
    requeued = run_from(s, [ev.failure(1, "requeue")])
    rejected(requeued, ev.revoke(1, c10), RUN_NOT_ACTIVE)
    rejected(run_from(s, [ev.cancelled(1)]), ev.revoke(1, c10), RUN_TERMINAL)


def test_revoking_the_only_checkpoint_leaves_none() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.cursor(1, 10)])  # steps 1..10, checkpoint and cursor at 10
    (only,) = s.checkpoints
    s = run_from(s, [ev.revoke(1, only)])
    assert (s.checkpoint, s.checkpoints, s.cursor, s.step) == (None, (), None, 0)
    # With nothing committed, a new generation starts from scratch (no resume step),
    # and may not claim a resume point.
    rejected(s, ev.generation_started(2, resume_step=10), RESUME_BEYOND_CHECKPOINT)
    s = run_from(s, [ev.generation_started(2)])
    assert (s.step, s.checkpoint) == (0, None)
    # A cursor needs a checkpoint again.
    rejected(s, ev.cursor(2, 10), CURSOR_WITHOUT_CHECKPOINT)


def test_revocation_drops_the_cursor_of_the_revoked_step_only() -> None:
    ev = Ev()
    s = committed_at(ev, [5])
    s = run_from(s, [ev.cursor(1, 5), ev.step(1, 10), ev.committed(1, 10), ev.cursor(1, 10)])
    assert s.cursor is not None and s.cursor.step == 10
    s = run_from(s, [ev.revoke(1, s.checkpoints[-1])])
    assert s.cursor is None  # it belonged to the revoked checkpoint
    assert s.checkpoint is not None and s.checkpoint.step == 5
    # A cursor at an older, kept step stays.
    ev = Ev()
    s = committed_at(ev, [5])
    s = run_from(s, [ev.cursor(1, 5), ev.step(1, 10), ev.committed(1, 10)])
    kept = s.cursor
    s = run_from(s, [ev.revoke(1, s.checkpoints[-1])])
    assert s.cursor == kept and kept is not None and kept.step == 5


def test_revocation_only_lowers_the_step() -> None:
    ev = Ev()
    s = committed_at(ev, [5, 10])
    s = run_from(s, [ev.failure(1, "restart"), ev.generation_started(2, resume_step=0)])
    assert s.step == 0
    s = run_from(s, [ev.revoke(2, s.checkpoints[-1])])
    assert s.step == 0  # below the fallback: left where it is
    assert s.checkpoint is not None and s.checkpoint.step == 5


def test_after_a_revocation_progress_moves_forward_from_the_fallback() -> None:
    ev = Ev()
    s = run_from(committed_at(ev, [5, 10]), [ev.cursor(1, 10)])
    c5, c10 = s.checkpoints
    # The usual path: a restart, the restore refuses step 10 and loads step 5.
    s = run_from(s, [ev.failure(1, "restart"), ev.generation_started(2, resume_step=10),
                     ev.verify_failed(2, c10, "w0"), ev.revoke(2, c10),
                     ev.restored(2, c5, "w0", fell_back=1), ev.confirmed(2)])
    assert (s.status, s.step, s.checkpoint, s.cursor) == (Status.RUNNING, 5, c5, None)
    # A checkpoint at a step between the fallback and the revoked one is accepted...
    rejected(s, ev.proposed(2, 5), STEP_NOT_FORWARD)
    rejected(s, ev.committed(2, 5), STEP_NOT_FORWARD)
    s = run_from(s, [ev.step(2, 6), ev.step(2, 7), ev.proposed(2, 7, with_cursor=True),
                     ev.committed(2, 7), ev.cursor(2, 7)])
    assert s.checkpoint is not None and (s.checkpoint.step, s.checkpoint.generation) == (7, 2)
    assert [c.step for c in s.checkpoints] == [5, 7]
    assert s.cursor is not None and s.cursor.step == 7
    # ... and so is one at the revoked step itself, with its new manifest.
    s = run_from(s, [ev.step(2, 8), ev.step(2, 9), ev.step(2, 10), ev.committed(2, 10)])
    assert s.checkpoint is not None and s.checkpoint.manifest_digest == "sha256:g2s10"
    assert [c.manifest_digest for c in s.checkpoints] == [
        "sha256:g1s5", "sha256:g2s7", "sha256:g2s10"]


def test_a_new_generation_resumes_at_most_from_the_fallback() -> None:
    ev = Ev()
    s = committed_at(ev, [5, 10])
    s = run_from(s, [ev.revoke(1, s.checkpoints[-1]), ev.failure(1, "restart")])
    rejected(s, ev.generation_started(2, resume_step=10), RESUME_BEYOND_CHECKPOINT)
    rejected(s, ev.generation_started(2, resume_step=None), RESUME_MISSING)
    assert run_from(s, [ev.generation_started(2, resume_step=5)]).step == 5


def test_checkpoint_interval_is_set_by_its_fact() -> None:
    ev = Ev()
    s = run([ev.submitted()])
    assert s.checkpoint_interval_steps is None
    s = run_from(s, [ev.interval(0, 500, "fixed")])
    assert s.checkpoint_interval_steps == 500
    s = run_from(s, [ev.admitted(), ev.generation_started(1), ev.confirmed(1),
                     ev.interval(1, 1, "prior")])
    assert s.checkpoint_interval_steps == 1
    for bad in (0, -1):
        t = rejected(s, ev.interval(1, bad), ILLEGAL_TRANSITION)
        assert ">= 1" in t.verdict.detail
    # Survives a restart; gone with nothing after the end.
    s = run_from(s, [ev.failure(1, "restart"), ev.generation_started(2), ev.interval(2, 42)])
    assert s.checkpoint_interval_steps == 42
    rejected(run_from(s, [ev.cancelled(2)]), ev.interval(2, 7), RUN_TERMINAL)


def test_checkpoint_reports_change_nothing_but_the_time() -> None:
    ev = Ev()
    s = committed_at(ev, [5, 10])
    c5, c10 = s.checkpoints
    reports = [ev.proposed(1, 11, with_cursor=True), ev.staged(1, 10, "sync"),
               ev.skipped(1, 10), ev.write_failed(1, 11, "w1", "manifest"),
               ev.verify_failed(1, c10, "w1"), ev.restored(1, c5, "w0", fell_back=1)]
    for e in reports:
        t = apply(s, e)
        assert t.verdict.accepted, f"{e.event_type}: {t.verdict}"
        assert t.state == replace(s, updated_at=e.header.occurred_at), e.event_type


def test_revocation_is_a_runs_fact_and_proposals_carry_the_cursor_in_v2() -> None:
    assert CheckpointRevoked.TOPIC == "runledger.runs"
    e = Ev().proposed(1, 10, with_cursor=True)
    assert (e.epoch, e.position, e.source_counts) == (0, 640, {"web": 400, "code": 240})
    e1 = Ev().proposed(1, 10)
    assert (e1.epoch, e1.position, e1.source_counts) == (None, None, None)


def test_proposals_of_either_schema_version_are_accepted_alike() -> None:
    ev = Ev()
    s = running(ev)  # generation 1, checkpoint at step 10
    for e in [ev.proposed(1, 11), ev.proposed(1, 11, with_cursor=True), *variants("r1")]:
        t = apply(s, e)
        assert t.verdict.accepted, f"{e}: {t.verdict}"
        assert t.state == replace(s, updated_at=max(s.updated_at, e.header.occurred_at))


def test_revoking_the_only_checkpoint_at_step_0_drops_its_cursor() -> None:
    # A checkpoint before the first step (step 0) with its cursor: revoking it leaves
    # no checkpoint, so no cursor can stand either (a cursor sits on a checkpoint).
    ev = Ev()
    s = run([ev.submitted(), ev.admitted(), ev.generation_started(1), ev.confirmed(1),
             ev.committed(1, 0), ev.cursor(1, 0)])
    assert s.cursor is not None and s.cursor.step == 0
    s = run_from(s, [ev.revoke(1, s.checkpoints[-1])])
    assert s.checkpoint is None
    assert s.cursor is None, "a cursor survived the revocation of the only checkpoint"


# --- alerts and per-rank step times ------------------------------------------------------


def test_an_alert_is_open_once_per_key_until_its_own_resolution() -> None:
    ev = Ev()
    s = running(ev)

    def raised(subject: str, eid: str) -> Event:
        return ev.alert(1, event_id=eid, alert="straggler_rank", owner="ml", runbook="rb",
                        detail="slow", subject=subject)

    def resolved(subject: str, raised_id: str) -> Event:
        return ev.alert_resolved(1, alert="straggler_rank", subject=subject,
                                 raised_event_id=raised_id, detail="fine again")

    s = run_from(s, [raised("w0", "a1"), raised("w0", "a1-dup"), raised("w1", "a2")])
    assert s.open_alerts == {"straggler_rank/w0": "a1", "straggler_rank/w1": "a2"}
    assert s.alerts == 2  # the duplicate of an open alert is not a new alert
    s = run_from(s, [resolved("w0", "a1-dup")])  # not the open one: nothing changes
    assert set(s.open_alerts) == {"straggler_rank/w0", "straggler_rank/w1"}
    s = run_from(s, [resolved("w0", "a1")])
    assert s.open_alerts == {"straggler_rank/w1": "a2"}
    s = run_from(s, [raised("w0", "a3")])  # the condition came back: a new alert
    assert s.open_alerts["straggler_rank/w0"] == "a3" and s.alerts == 3


def test_step_times_are_fenced_like_heartbeats() -> None:
    ev = Ev()
    s = running(ev)
    assert apply(s, ev.step_times(s.generation)).verdict.accepted
    stale = apply(s, ev.step_times(s.generation - 1)).verdict
    assert (stale.accepted, stale.reason) == (False, STALE_GENERATION)
    stranger = apply(s, ev.step_times(s.generation, logical_id="nobody")).verdict
    assert (stranger.accepted, stranger.reason) == (False, NOT_A_MEMBER)


# --- a node's members' heartbeats, one record ----------------------------------------


def test_a_nodes_record_moves_each_listed_members_heartbeat_and_no_other() -> None:
    ev = Ev()
    s = running(ev)
    beat = ev.members_heartbeat(1, ("w0", 10), node="node-a", at=50_000)
    t = apply(s, beat)
    assert t.verdict.accepted and t.state is not None
    assert t.state.heartbeats["w0"] == 50_000 and "w1" not in t.state.heartbeats
    # One heartbeat never moves a member's time back (a late record from the node).
    late = apply(t.state, ev.members_heartbeat(1, ("w0", 10), node="node-a", at=40_000))
    assert late.state is not None and late.state.heartbeats["w0"] == 50_000


def test_a_node_that_lists_another_nodes_member_is_refused_whole() -> None:
    ev = Ev()  # w0 on node-a, w1 on node-b: node-a's agent cannot vouch for w1
    s = running(ev)
    rejected(s, ev.members_heartbeat(1, ("w0", 10), ("w1", 10), node="node-a"), NOT_ON_NODE)
    rejected(s, ev.members_heartbeat(1, ("w9", 10), node="node-a"), NOT_A_MEMBER)
    rejected(s, ev.members_heartbeat(0, ("w0", 10), node="node-a"), STALE_GENERATION)
