"""A run's lifecycle rules as a pure function: each rule, and their order."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controller import policy
from controller.exits import Evidence, ExitNote
from controller.inventory import Inventory, Node
from controller.liveness import EXIT_GRACE_MS
from controller.model import Tracked
from controller.run_decide import (
    NODE_QUARANTINE_AFTER,
    START_EXIT_WAIT_MS,
    Admit,
    Classify,
    Confirm,
    Finish,
    Quarantine,
    Queue,
    Start,
    Stop,
    World,
    decide,
)
from controller.runplan import RunPlan
from controller.spec.parts import RetryPolicy
from events.state import RunState, Status
from tests.events.builders import members

NOW = 100_000
MEMBERS = members("r0", "r1", node="n1", domain="d1")
PLAN = RunPlan(world_size=2, argv=("train",), slots_per_node=2, heartbeat_timeout_ms=10_000,
               stall_timeout_ms=30_000, start_timeout_ms=60_000,
               retry={"worker_crash": RetryPolicy(attempts=5, backoff_base_s=1.0,
                                                  backoff_cap_s=4.0, escalate_after=2)})


def state(status: Status, **kw: Any) -> RunState:
    base = RunState(run_id="run-1", status=status, spec_digest="s", principal="alice",
                    world_size=2, dataset_id=None, submitted_at=0, updated_at=0)
    return replace(base, **kw)


def live(status: Status = Status.RUNNING, **kw: Any) -> RunState:
    defaults: dict[str, Any] = dict(
        generation=1, members=MEMBERS, heartbeats={"r0": NOW - 1_000, "r1": NOW - 1_000},
        generation_started_at=NOW - 60_000, last_progress_at=NOW - 1_000)
    return state(status, **{**defaults, **kw})


def world(slots: int = 2, used: dict[str, int] | None = None, failures: int = 0,
          quarantined: bool = False) -> World:
    node = Node("n1", slots, "d1", NOW - 1_000, quarantined=quarantined)
    return World(NOW, 0, Inventory({"n1": node}), {"n1": failures} if failures else {},
                 lambda: used or {})


def test_1_an_unreadable_spec_fails_the_run_whatever_its_state() -> None:
    bad = replace(PLAN, invalid="no command")
    for s in (state(Status.SUBMITTED), live()):
        assert decide(Tracked(s, bad), world()) == (Finish("failed", "invalid spec: no command"),)
    assert decide(Tracked(state(Status.FAILED), bad), world()) == ()


def test_2_admission_backs_off_queues_with_the_refusal_once_or_admits_and_starts() -> None:
    backing = state(Status.QUEUED, generation=1, retry_not_before=NOW + 1)
    assert decide(Tracked(backing, PLAN), world()) == (Queue(f"backoff until {NOW + 1} ms"),)
    (refused,) = decide(Tracked(state(Status.SUBMITTED), PLAN), world(used={"n1": 1}))
    assert refused == Queue("needs 2 slots, 1 free in all live nodes")
    already = state(Status.QUEUED, queue_reason=refused.reason)  # type: ignore[union-attr]
    assert decide(Tracked(already, PLAN), world(used={"n1": 1})) == ()
    admit, start = decide(Tracked(state(Status.QUEUED, generation=1), PLAN), world())
    assert admit == Admit(MEMBERS, 2) and start == Start(MEMBERS, 2, "admitted")


def test_3_a_restart_waits_out_its_backoff_and_needs_its_nodes() -> None:
    waiting = live(Status.RECOVERING, awaiting_generation=True, retry_not_before=NOW + 1)
    assert decide(Tracked(waiting, PLAN), world()) == ()
    due = replace(waiting, retry_not_before=NOW)
    assert decide(Tracked(due, PLAN), world()) == (Start(MEMBERS, 2, "restart"),)
    (queued,) = decide(Tracked(due, PLAN), world(quarantined=True))
    assert isinstance(queued, Queue)
    assert queued.reason.startswith("placement lost: n1 not available; n1 is quarantined")
    assert "`runledger node uncordon n1 --reason R` frees it" in queued.reason


def test_4_a_live_generation_joins_then_succeeds_in_one_step() -> None:
    starting = live(Status.STARTING)
    assert decide(Tracked(starting, PLAN), world()) == (Confirm(2),)
    assert decide(Tracked(replace(starting, heartbeats={"r0": NOW}), PLAN), world()) == ()
    exited = replace(starting, exits={"r0": 0, "r1": 0})
    assert decide(Tracked(exited, PLAN), world()) == (
        Confirm(2), Finish("succeeded", "every member exited 0"))
    assert decide(Tracked(live(exits={"r0": 0}), PLAN), world()) == ()


def test_4_a_failure_is_classified_stopped_and_escalated_by_the_policy() -> None:
    crashed = live(exits={"r1": 3})
    classify, stop = decide(Tracked(crashed, PLAN), world())
    assert isinstance(classify, Classify) and classify.decision.action == "restart"
    assert classify.failure == policy.from_exit("r1", "n1", 3, None)
    assert stop == Stop("worker_crash:exit=3: restart")
    again = replace(crashed, failures={"worker_crash:exit=3": 1})
    *_, finish = decide(Tracked(again, PLAN), world())
    assert isinstance(finish, Finish) and finish.outcome == "failed"


def test_4_the_nth_failure_on_a_node_quarantines_it_once() -> None:
    crashed = Tracked(live(exits={"r0": -9}), PLAN)  # killed: evidence against the node
    before = NODE_QUARANTINE_AFTER - 1
    assert Quarantine("n1", NODE_QUARANTINE_AFTER) in decide(crashed, world(failures=before))
    assert not [a for a in decide(crashed, world(failures=before - 1))
                if isinstance(a, Quarantine)]
    assert not [a for a in decide(crashed, world(failures=before, quarantined=True))
                if isinstance(a, Quarantine)]


def test_4_a_run_that_injects_faults_never_counts_them_against_its_node() -> None:
    """A pilot's or drill's own kills (the spec sets a fault hook) rehearse recovery;
    they are restarted as usual but quarantine nothing, live or on replay."""
    rehearsal = replace(PLAN, env={"RUNLEDGER_FAULT": "step@3"})
    crashed = Tracked(live(exits={"r0": -9}), rehearsal)
    before = NODE_QUARANTINE_AFTER - 1
    actions = decide(crashed, world(failures=before))
    assert not [a for a in actions if isinstance(a, Quarantine)]
    (classify,) = [a for a in actions if isinstance(a, Classify)]
    assert classify.decision.action == "restart"
    assert classify.failure.signature == "worker_crash:signal=9" + policy.INJECTED
    assert "not counted against the node" in classify.failure.detail
    assert not policy.counts_against_node("worker_crash", classify.failure.signature)
    assert policy.counts_against_node("worker_crash", "worker_crash:signal=9")
    slowed = replace(PLAN, env={"RUNLEDGER_STORAGE_DELAY_S": "3"})
    (hang, _stop) = decide(Tracked(live(last_progress_at=NOW - 30_001), slowed), world())
    assert isinstance(hang, Classify) and hang.failure.signature == "hang:no_progress:injected"


def test_4_silence_and_no_progress_are_hangs_counted_from_when_the_controller_listens() -> None:
    silent = live(heartbeats={"r0": NOW - 1_000, "r1": NOW - 10_001})
    (classify, _stop) = decide(Tracked(silent, PLAN), world())
    assert isinstance(classify, Classify)
    assert (classify.failure.signature, classify.failure.logical_id) == ("hang:no_heartbeat",
                                                                        "r1")
    listening = World(NOW, NOW - 5_000, world().inventory, {}, dict)
    assert decide(Tracked(silent, PLAN), listening) == ()
    stalled = live(last_progress_at=NOW - 30_001)
    (classify, _stop) = decide(Tracked(stalled, PLAN), world())
    assert isinstance(classify, Classify) and classify.failure.signature == "hang:no_progress"


def test_finished_and_just_admitted_runs_call_for_nothing() -> None:
    for status in (Status.SUCCEEDED, Status.CANCELLED, Status.ADMITTED):
        assert decide(Tracked(live(status), PLAN), world()) == ()


def with_exits(state: RunState, *notes: ExitNote, stepped: bool = False) -> Tracked:
    ev = Evidence({n.logical_id: n for n in notes}, stepped)
    exited = {n.logical_id: n.exit_code if n.signal is None else -n.signal for n in notes}
    return Tracked(replace(state, exits=exited), PLAN, evidence=ev)


def exit_note(lid: str, code: int, at: int = NOW, stepped: bool = False) -> ExitNote:
    return ExitNote(lid, "n1", code, None, at, f"/w/{lid}.log", "Traceback: boom", "", stepped)


def test_4_a_failure_before_the_first_step_waits_for_the_other_ranks() -> None:
    one = with_exits(live(), exit_note("r0", 1, at=NOW - 1_000))
    assert decide(one, world(failures=2)) == ()  # r1 may be failing the same way
    late = with_exits(live(), exit_note("r0", 1, at=NOW - START_EXIT_WAIT_MS - 1))
    classify, *_ = decide(late, world())
    assert isinstance(classify, Classify) and classify.failure.signature == "worker_crash:exit=1"
    after_a_step = with_exits(live(), exit_note("r0", 1, stepped=True), stepped=True)
    classify, *_ = decide(after_a_step, world())
    assert isinstance(classify, Classify) and classify.failure.signature == "worker_crash:exit=1"


def test_4_the_same_failure_on_every_rank_at_start_fails_fast_and_spares_the_node() -> None:
    both = with_exits(live(), exit_note("r0", 1), exit_note("r1", 1, at=NOW + 1))
    actions = decide(both, world(failures=NODE_QUARANTINE_AFTER - 1))
    classify, stop, finish = actions
    assert isinstance(classify, Classify) and classify.failure.failure_class == "job"
    assert classify.failure.signature == "job:start_exit=1"
    assert (classify.failure.log_path, classify.failure.stderr_tail) == (
        "/w/r0.log", "Traceback: boom")
    assert classify.decision.action == "escalate" and isinstance(finish, Finish)
    assert stop == Stop("job:start_exit=1: escalate")
    assert not [a for a in actions if isinstance(a, Quarantine)]


def test_4_one_code_on_every_rank_is_not_the_jobs_when_a_node_restarted_under_them() -> None:
    """A rank's node restarted (its agent registered again after the generation began):
    its peer's collective failed, and the rank its agent launched again failed its
    rendezvous, both exit 1. That is a crash to retry, not the job's error. A controller
    that began after the generation started could not see such a registration."""
    both = with_exits(live(), exit_note("r0", 1), exit_note("r1", 1, at=NOW + 1))
    started = both.state.generation_started_at
    for registered in (started, started + 5_000):
        node = replace(world().inventory.nodes["n1"], registered_at=registered)
        restarted = World(NOW, 0, Inventory({"n1": node}), {}, dict)
        classify, stop = decide(both, restarted)
        assert isinstance(classify, Classify)
        assert classify.failure.signature == "worker_crash:exit=1"
        assert classify.decision.action == "restart" and stop == Stop(
            "worker_crash:exit=1: restart")
    before = replace(world().inventory.nodes["n1"], registered_at=started - 1)
    classify, *_ = decide(both, World(NOW, 0, Inventory({"n1": before}), {}, dict))
    assert isinstance(classify, Classify) and classify.failure.signature == "job:start_exit=1"
    classify, *_ = decide(both, at(NOW, since=started + 1))
    assert isinstance(classify, Classify) and classify.failure.signature == "worker_crash:exit=1"


def test_4_a_launch_failure_fails_fast_at_once() -> None:
    missing = ExitNote("r1", "n1", 127, None, NOW, "/w/r1.log", "", "code.workdir /c does not "
                       "exist", False)
    classify, _stop, finish = decide(with_exits(live(), missing), world(failures=5))
    assert isinstance(classify, Classify) and classify.failure.signature == "job:launch"
    assert "code.workdir /c does not exist" in classify.failure.detail
    assert isinstance(finish, Finish) and finish.outcome == "failed"


# Exit beats timeout: rank 0 exited at EXITED; rank 1's last heartbeat is older than
# 10 s timeout, which expired before that exit: r1 is still tearing down (its process
# group, the interpreter).
EXITED = NOW - 2_000
TEARING_DOWN = {"r0": NOW - 14_000, "r1": NOW - 13_000}


def at(now: int, since: int = 0) -> World:
    return World(now, since, world().inventory, {}, dict)


def test_4_a_clean_finish_whose_last_exit_comes_after_a_timeout_succeeds() -> None:
    ending = with_exits(live(heartbeats=TEARING_DOWN), exit_note("r0", 0, at=EXITED))
    assert decide(ending, world()) == ()  # r1 is silent past its timeout: within the grace
    finished = with_exits(ending.state, exit_note("r0", 0, at=EXITED),
                          exit_note("r1", 0, at=NOW + 5_000))
    assert decide(finished, at(NOW + 5_000)) == (Finish("succeeded", "every member exited 0"),)


def test_4_a_late_exception_exit_is_classified_as_the_exit_with_its_evidence() -> None:
    """The other member's exit came first and clean; the late one raised at step 5: a
    crash with its traceback and log, not a hang, and not the node's."""
    ending = with_exits(live(heartbeats=TEARING_DOWN), exit_note("r1", 0, at=EXITED),
                        stepped=True)
    assert decide(ending, at(NOW + 20_000)) == ()
    crashed = with_exits(ending.state, exit_note("r1", 0, at=EXITED),
                         exit_note("r0", 1, at=NOW + 20_000, stepped=True), stepped=True)
    actions = decide(crashed, at(NOW + 20_000, since=0))
    (classify,) = [a for a in actions if isinstance(a, Classify)]
    assert classify.failure.signature == "worker_crash:exit=1"
    assert (classify.failure.logical_id, classify.failure.log_path,
            classify.failure.stderr_tail) == ("r0", "/w/r0.log", "Traceback: boom")
    assert not policy.counts_against_node(classify.failure.failure_class,
                                          classify.failure.signature)


def test_4_a_member_exiting_while_another_is_silent_at_start_is_judged_by_its_exit() -> None:
    """A NameError at import on r0 while r1, never heartbeated, passes its start timeout:
    the exit waits START_EXIT_WAIT_MS for r1's, and then decides, not the silence."""
    starting = live(Status.STARTING, heartbeats={}, generation_started_at=NOW - 61_000)
    early = with_exits(starting, exit_note("r0", 1, at=NOW - 1_000))
    assert decide(early, world()) == ()
    late = at(NOW - 1_000 + START_EXIT_WAIT_MS + 1)
    classify, *_ = decide(early, late)
    assert isinstance(classify, Classify)
    assert classify.failure.signature == "worker_crash:exit=1"
    assert classify.failure.log_path == "/w/r0.log"


def test_4_a_member_still_silent_after_the_grace_is_a_hang_that_says_what_it_waited_for() -> None:
    ending = with_exits(live(heartbeats=TEARING_DOWN), exit_note("r0", 0, at=EXITED))
    assert decide(ending, at(EXITED + EXIT_GRACE_MS)) == ()
    classify, _stop = decide(ending, at(EXITED + EXIT_GRACE_MS + 1))
    assert isinstance(classify, Classify)
    assert (classify.failure.signature, classify.failure.logical_id) == ("hang:no_heartbeat",
                                                                        "r1")
    assert f"r0 exited with code 0 {EXIT_GRACE_MS + 1} ms earlier" in classify.failure.detail
    # An exit long before the silence: the grace runs from the timeout instead.
    early = with_exits(live(heartbeats={"r1": NOW - 11_000}), exit_note("r0", 0, at=NOW - 50_000))
    assert decide(early, world()) == ()
    timed_out = NOW - 1_000  # r1's last heartbeat + its 10 s timeout
    assert decide(early, at(timed_out + EXIT_GRACE_MS)) == ()
    classify, _stop = decide(early, at(timed_out + EXIT_GRACE_MS + 1))
    assert isinstance(classify, Classify) and classify.failure.logical_id == "r1"


def test_4_the_grace_reads_only_the_log_and_the_given_clock_so_a_replay_decides_the_same() -> None:
    """A restarted controller has no heartbeats (they are never facts): a silent member
    gets its start timeout from when the controller listens, then the grace, however old
    the exit it read back; the same inputs decide the same at every instant."""
    on_replay = with_exits(live(heartbeats={}), exit_note("r0", 0, at=EXITED))
    since = NOW
    for now in (NOW, NOW + 60_001, NOW + 60_000 + EXIT_GRACE_MS):
        assert decide(on_replay, at(now, since)) == ()
    hang = NOW + 60_000 + EXIT_GRACE_MS + 1
    first = decide(on_replay, at(hang, since))
    assert first == decide(on_replay, at(hang, since))
    assert isinstance(first[0], Classify) and first[0].failure.signature == "hang:no_heartbeat"
    assert EXIT_GRACE_MS >= START_EXIT_WAIT_MS


def test_4_members_whose_sessions_closed_are_judged_by_their_exits_within_the_grace() -> None:
    """Both ranks finished and closed their sessions, then went silent in teardown (the
    interpreter, gloo's destructors on a loaded node) with neither exit reported yet:
    no hang until the grace after their timeouts, and their exits then decide."""
    def at(now: int) -> World:  # the node's agent heartbeats on: the node is not lost
        return World(now, 0, Inventory({"n1": Node("n1", 2, "d1", now)}), {}, dict)

    closing = Evidence(closing={"r0": True, "r1": True})
    quiet = {"r0": NOW - 12_000, "r1": NOW - 11_000}
    ending = Tracked(live(heartbeats=quiet), PLAN, evidence=closing)
    timed_out = NOW - 2_000  # r0's last heartbeat + its 10 s timeout
    for now in (NOW, timed_out + EXIT_GRACE_MS):
        assert decide(ending, at(now)) == ()
    classify, _stop = decide(ending, at(timed_out + EXIT_GRACE_MS + 1))
    assert isinstance(classify, Classify)
    assert (classify.failure.signature, classify.failure.logical_id) == ("hang:no_heartbeat",
                                                                        "r0")
    assert "its session closed" in classify.failure.detail
    # Without the closing heartbeats the same silence is a hang at once.
    silent = Tracked(live(heartbeats=quiet), PLAN)
    assert isinstance(decide(silent, at(NOW))[0], Classify)
    # Their exits, within the grace, decide: a clean finish.
    done = replace(ending, state=replace(ending.state, exits={"r0": 0, "r1": 0}))
    assert decide(done, at(NOW + 5_000)) == (Finish("succeeded", "every member exited 0"),)
