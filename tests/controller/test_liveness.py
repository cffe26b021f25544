"""The silence judge's shortcut for a healthy run (controller.liveness): it answers exactly
what asking every member would, so a tick of a 10^5-rank run skips the per-member walk."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from controller import liveness, policy
from controller.exits import EMPTY, Evidence
from controller.runplan import RunPlan
from events.model import Member
from events.state import RunState, Status

PLAN = RunPlan(world_size=4, argv=("train",), heartbeat_timeout_ms=1_000,
               start_timeout_ms=5_000)
IDS = ("r0", "r1", "r2", "r3")


def walked(state: RunState, now: int, since: int) -> policy.Failure | None:
    """The rule as the module states it, member by member, for a run with no exit and
    no closing member: the first member past its timeout is hung."""
    grace_from = max(state.generation_started_at, since)
    for m in state.members:
        seen = state.heartbeats.get(m.logical_id)
        last = max(seen or 0, grace_from)
        limit = PLAN.heartbeat_timeout_ms if seen is not None else PLAN.start_timeout_ms
        if now - last > limit:
            return policy.no_heartbeat(m.logical_id, m.node, now - last)
    return None


@given(st.dictionaries(st.sampled_from(IDS), st.integers(0, 10_000)),
       st.integers(0, 12_000), st.integers(0, 6_000), st.integers(0, 6_000))
def test_a_healthy_run_and_a_silent_one_get_the_walks_answer(
        beats: dict[str, int], now: int, started: int, since: int) -> None:
    members = tuple(Member(lid, f"n{i % 2}", i) for i, lid in enumerate(IDS))
    state = RunState("run-1", Status.RUNNING, "sha256:x", "alice", 4, None, 0, 0,
                     members=members, heartbeats=beats, generation_started_at=started)
    assert liveness.silent(state, EMPTY, PLAN, now, since) == walked(state, now, since)


def test_a_closing_member_is_never_taken_for_fresh_by_the_shortcut() -> None:
    members = (Member("r0", "n1", 0), Member("r1", "n1", 1))
    state = RunState("run-1", Status.RUNNING, "sha256:x", "alice", 2, None, 0, 0,
                     members=members, heartbeats={"r0": 1_900, "r1": 0})
    closing = Evidence(closing={"r1": True})
    # Past the timeout and inside the exit grace: the closing member waits, not hung.
    assert liveness.silent(state, closing, PLAN, 2_000, 0) is None
    late = 1_000 + liveness.EXIT_GRACE_MS + 1  # the grace over: r1 is hung
    hung = liveness.silent(replace(state, heartbeats={"r0": late, "r1": 0}), closing, PLAN,
                           late, 0)
    assert hung is not None and hung.logical_id == "r1"
