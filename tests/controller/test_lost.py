"""A lost node (controller/lost.py) and its place in rule 4 (controller/run_decide.py):
the failure is the lost node's, recorded first, counted against it, and the survivors'
exits are its consequences; an exit waits for an undecided node, boundedly."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from controller import lost, policy
from controller.exits import Evidence, ExitNote
from controller.inventory import Inventory, Node
from controller.lost import LOST_AFTER_MS, LOST_GRACE_MS, REPORTED_AFTER_MS, Lost
from controller.model import Tracked
from controller.run_decide import Classify, Quarantine, Stop, World, decide, placement_ms
from controller.runplan import RunPlan
from events.model import Member
from events.state import RunState, Status

NOW = 100_000
RUN = "run-1"
TWO = (Member("r0", "n1", 0, "d1"), Member("r1", "n2", 0, "d1"))
PLAN = RunPlan(world_size=2, argv=("train",), slots_per_node=1, heartbeat_timeout_ms=30_000)


def running(**kw: Any) -> RunState:
    base = RunState(run_id=RUN, status=Status.RUNNING, spec_digest="s", principal="alice",
                    world_size=2, dataset_id=None, submitted_at=0, updated_at=0,
                    generation=1, members=TWO, generation_started_at=NOW - 60_000,
                    last_progress_at=NOW - 1_000)
    return replace(base, **kw)


def inv(**seen: int) -> Inventory:
    return Inventory({n: Node(n, 1, "d1", t) for n, t in seen.items()})


def survivor_exit(at: int) -> Tracked:
    """r0 on n1 exited 1 at ``at`` (its collective saw the peer vanish)."""
    s = running(exits={"r0": 1}, heartbeats={"r0": at - 500, "r1": NOW - 9_000})
    note = ExitNote("r0", "n1", 1, None, at, stepped=True)  # after the first step
    return Tracked(s, PLAN, evidence=Evidence({"r0": note}, stepped=True))


def test_a_survivors_exit_after_a_node_vanished_is_the_lost_nodes_failure() -> None:
    run = survivor_exit(NOW - 200)
    world = World(NOW, 0, inv(n1=NOW - 100, n2=NOW - 8_500), {"n2": 2}, lambda: {})
    lost_, classify, stop, quarantine = decide(run, world)
    assert lost_ == Lost("n2", NOW - 8_500, ("r1",), ("r0 on n1 exited with 1",))
    assert isinstance(classify, Classify)
    f = classify.failure
    assert (f.failure_class, f.signature, f.node, f.logical_id) == (
        "infrastructure", lost.SIGNATURE, "n2", "r1")
    assert "node n2 lost" in f.detail and "consequences, not causes: r0 on n1 exited with 1" \
        in f.detail
    assert isinstance(stop, Stop)
    # The third failure on n2 quarantines n2, never the survivor's n1.
    assert quarantine == Quarantine("n2", 3)
    assert policy.counts_against_node(f.failure_class, f.signature)


def test_an_exit_waits_for_a_node_unheard_since_then_at_most_the_grace() -> None:
    at = NOW - 1_000
    run = survivor_exit(at)
    # n2 last reported before the exit and is not yet LOST_AFTER_MS silent: wait.
    assert decide(run, World(NOW, 0, inv(n1=NOW, n2=at - 100), {}, lambda: {})) == ()
    # n2 reports after the exit: alive, so the exit is r0's own crash, on n1.
    (classify, _) = decide(run, World(NOW, 0, inv(n1=NOW, n2=at + REPORTED_AFTER_MS),
                                      {}, lambda: {}))
    assert isinstance(classify, Classify) and classify.failure.node == "n1"
    assert classify.failure.signature == "worker_crash:exit=1"
    # Never past the grace: by then n2 is lost (or has reported).
    late = at + LOST_GRACE_MS + 1
    lost_, classify, _ = decide(run, World(late, 0, inv(n1=late, n2=at), {}, lambda: {}))
    assert isinstance(lost_, Lost) and lost_.node == "n2"


def test_a_silent_member_whose_agent_is_gone_is_a_lost_node_not_a_hang() -> None:
    s = running(heartbeats={"r0": NOW - 500, "r1": NOW - 40_000})
    world = World(NOW, 0, inv(n1=NOW - 100, n2=NOW - 40_000), {}, lambda: {})
    lost_, classify, _ = decide(Tracked(s, PLAN), world)
    assert isinstance(lost_, Lost) and lost_.consequences == ()
    assert isinstance(classify, Classify) and classify.failure.signature == lost.SIGNATURE
    # Its agent alive (the workers hung): a hang on that node, as before.
    alive = World(NOW, 0, inv(n1=NOW - 100, n2=NOW - 100), {}, lambda: {})
    classify, _ = decide(Tracked(s, PLAN), alive)
    assert isinstance(classify, Classify) and classify.failure.signature == "hang:no_heartbeat"


def test_a_node_heard_from_through_its_workers_is_not_lost() -> None:
    """The agent died but its workers heartbeat on, after the exit: their node is not gone."""
    run = survivor_exit(NOW - 1_000)
    s = replace(run.state, heartbeats={"r0": NOW - 700, "r1": NOW - 100})
    world = World(NOW, 0, inv(n1=NOW - 100, n2=NOW - 8_500), {}, lambda: {})
    (classify, _) = decide(replace(run, state=s), world)
    assert isinstance(classify, Classify) and classify.failure.node == "n1"


@given(st.integers(0, 20_000), st.integers(0, 20_000), st.integers(0, 20_000),
       st.integers(0, 20_000))
def test_judge_is_lost_wait_or_own_exactly_as_documented(
        exit_at: int, agent: int, worker: int, later: int) -> None:
    now = max(exit_at, agent, worker) + later
    note = ExitNote("r0", "n1", 1, None, exit_at)
    failure = policy.from_exit("r0", "n1", 1, None, note)
    got = lost.judge(TWO, {"r0": 1}, {"r1": worker}, Evidence({"r0": note}),
                     inv(n1=now, n2=agent), failure, now, 0)
    seen = max(agent, worker)
    if now - seen > LOST_AFTER_MS:
        assert isinstance(got, lost.Found) and got.lost.last_seen_at == seen
        assert got.failure.node == "n2"
    elif seen < exit_at + REPORTED_AFTER_MS:
        # Nothing of n2 heard since the exit, and n2 not yet silent long enough: wait,
        # whichever of its agent and its worker was heard last.
        assert got is lost.WAIT
        assert now - exit_at <= LOST_GRACE_MS  # the wait is bounded
    else:
        assert got is None  # n2 reported after the exit: it lives, the exit is r0's own
    # A node that exited (its agent reported it) is never lost; nor one never registered.
    assert lost.judge(TWO, {"r0": 1, "r1": 1}, {}, Evidence({"r0": note}),
                      inv(n1=now, n2=agent), failure, now, 0) is None
    assert lost.judge(TWO, {"r0": 1}, {}, Evidence({"r0": note}), inv(n1=now), failure,
                      now, 0) is None


def test_an_agent_past_its_silence_whose_worker_beat_later_is_waited_for_then_lost() -> None:
    """The race an elastic e2e run lost on a loaded machine: n2 killed, its agent's last
    beat 6.5 s ago (past LOST_AFTER_MS), its worker's 4 s ago, the survivor exited 1 s ago.
    Judged by its agent alone n2 was neither lost nor undecided, and the exit was filed as
    r0's own crash on n1 with no NodeLost. It waits; once the worker is silent too, n2 is
    lost and the failure is n2's."""
    at = NOW - 1_000
    run = survivor_exit(at)
    s = replace(run.state, heartbeats={"r0": at - 500, "r1": NOW - 4_000})
    world = World(NOW, 0, inv(n1=NOW - 100, n2=NOW - 6_500), {}, lambda: {})
    assert decide(replace(run, state=s), world) == ()
    later = NOW - 4_000 + LOST_AFTER_MS + 1
    gone = world._replace(now=later, inventory=inv(n1=later - 100, n2=NOW - 6_500))
    lost_, classify, _ = decide(replace(run, state=s), gone)
    assert isinstance(lost_, Lost) and lost_.node == "n2" and lost_.last_seen_at == NOW - 4_000
    assert isinstance(classify, Classify) and classify.failure.node == "n2"
    assert later - at <= LOST_GRACE_MS


def test_a_heartbeat_silence_waits_while_its_own_node_went_quiet_with_it() -> None:
    """A heartbeat timeout shorter than LOST_AFTER_MS (the harness's 3 s): r1 on n2 silent
    3.5 s, n2's agent unheard since then. Not a hang of r1: the wait lasts until n2 is lost
    (then NodeLost, the failure n2's), or its agent reports (then r1 hung, on a live node)."""
    plan = replace(PLAN, heartbeat_timeout_ms=3_000)
    died = NOW - 3_500
    s = running(heartbeats={"r0": NOW - 200, "r1": died})
    quiet = World(NOW, 0, inv(n1=NOW - 100, n2=died + 100), {}, lambda: {})
    assert decide(Tracked(s, plan), quiet) == ()
    later = died + 100 + LOST_AFTER_MS + 1
    s_later = replace(s, heartbeats={"r0": later - 200, "r1": died})
    gone = World(later, 0, inv(n1=later - 100, n2=died + 100), {}, lambda: {})
    lost_, classify, _ = decide(Tracked(s_later, plan), gone)
    assert isinstance(lost_, Lost) and lost_.node == "n2" and lost_.members == ("r1",)
    assert isinstance(classify, Classify) and classify.failure.signature == lost.SIGNATURE
    # n2's agent reported after r1 went quiet: the node lives, r1 hung.
    alive = World(NOW, 0, inv(n1=NOW - 100, n2=died + REPORTED_AFTER_MS), {}, lambda: {})
    classify, _ = decide(Tracked(s, plan), alive)
    assert isinstance(classify, Classify) and classify.failure.signature == "hang:no_heartbeat"
    assert classify.failure.node == "n2"


@given(st.integers(0, 20_000), st.integers(0, 20_000), st.integers(0, 20_000))
def test_a_heartbeat_silence_waits_only_for_its_own_quiet_node_and_boundedly(
        quiet_since: int, agent: int, later: int) -> None:
    now = max(quiet_since, agent) + later
    failure = policy.no_heartbeat("r1", "n2", now - quiet_since)
    got = lost.judge(TWO, {}, {"r0": now, "r1": quiet_since}, Evidence({}),
                     inv(n1=now, n2=agent), failure, now, 0)
    if now - max(agent, quiet_since) > LOST_AFTER_MS:
        assert isinstance(got, lost.Found) and got.lost.node == "n2"
    elif agent < quiet_since + REPORTED_AFTER_MS:
        assert got is lost.WAIT
        assert now - max(agent, quiet_since) <= LOST_AFTER_MS  # it ends: lost, or heard
    else:
        assert got is None
    # A stall names no node: it never waits.
    stall = policy.no_progress(5, 10_000)
    assert lost.judge(TWO, {}, {"r0": now, "r1": now}, Evidence({}), inv(n1=now, n2=agent),
                      stall, now, 0) is not lost.WAIT


def test_a_longer_node_silence_waits_longer_for_a_slow_fleet() -> None:
    """A controller whose NodePolicy waits 30 s (agents heartbeating every 10 s): the same
    8.5 s silence that names n2 lost at the default 6 s is a wait, not a loss, and the
    node stays placeable for two and a half silences."""
    run = survivor_exit(NOW - 200)
    default = World(NOW, 0, inv(n1=NOW - 100, n2=NOW - 8_500), {}, lambda: {})
    assert isinstance(decide(run, default)[0], Lost)
    slow = default._replace(silence_ms=30_000, timeout_ms=placement_ms(30_000))
    assert decide(run, slow) == ()  # the exit waits for n2, which may yet report
    later = NOW - 8_500 + 30_001
    run_later = survivor_exit(later - 200)
    gone = slow._replace(now=later, inventory=inv(n1=later - 100, n2=NOW - 8_500))
    lost_ = decide(run_later, gone)[0]
    assert isinstance(lost_, Lost) and lost_.node == "n2"
    assert placement_ms(6_000) == 15_000 and placement_ms(30_000) == 75_000
    assert [n.name for n in inv(n1=NOW - 70_000).live(NOW, placement_ms(30_000))] == ["n1"]
