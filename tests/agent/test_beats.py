"""The agent's forwarding of its members' beats (agent.beats): a member is reported once per
beat it wrote, grouped per run and generation, and never for a beat it did not write."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agent.beats import (
    IDLE_S,
    MIN_INTERVAL_S,
    BeatForwarder,
    adopted,
    collect,
    interval_of,
    orphans,
)
from agent.decide import AgentState, WorkerKey
from events import beatfile
from events.beatfile import Beat
from events.model import Event, MemberBeat, MembersHeartbeatRecorded

A0, A1 = WorkerKey("run-a", 1, "r0"), WorkerKey("run-a", 1, "r1")
B0 = WorkerKey("run-b", 2, "r0")


def test_only_members_whose_beat_moved_are_reported_per_run_and_generation() -> None:
    first = collect([(A0, Beat(1, 5)), (A1, Beat(1, 5)), (B0, None)], {})
    assert first.beats == {("run-a", 1): (MemberBeat("r0", 5), MemberBeat("r1", 5))}
    # r0 beat again (closing), r1 did not, B0 wrote its first beat.
    second = collect([(A0, Beat(2, 6, True)), (A1, Beat(1, 5)), (B0, Beat(1, 0))], first.seen)
    assert second.beats == {("run-a", 1): (MemberBeat("r0", 6, True),),
                            ("run-b", 2): (MemberBeat("r0", 0),)}
    # A worker gone from the watched set is forgotten; a garbled file keeps the last count.
    third = collect([(A1, None)], second.seen)
    assert third.beats == {} and third.seen == {A1: 1}


@given(st.lists(st.lists(st.sampled_from([A0, A1, B0]), max_size=3), max_size=8))
def test_each_written_beat_is_reported_exactly_once(rounds: list[list[WorkerKey]]) -> None:
    """Whatever subset of workers beats between looks, every beat shows up in exactly the
    next look, and no look reports a worker that did not beat since the last."""
    seq = {A0: 0, A1: 0, B0: 0}
    last: dict[WorkerKey, int] = {}
    for beating in rounds:
        for key in set(beating):
            seq[key] += 1
        found = collect([(k, Beat(n, n) if n else None) for k, n in seq.items()], last)
        reported = {WorkerKey(run, gen, b.logical_id)
                    for (run, gen), beats in found.beats.items() for b in beats}
        assert reported == set(beating)
        last = dict(found.seen)


def test_the_look_waits_the_shortest_interval_watched() -> None:
    assert interval_of([]) == IDLE_S
    assert interval_of([(A0, "x", 2.0), (B0, "y", 0.5)]) == 0.5
    assert interval_of([(A0, "x", 0.001)]) == MIN_INTERVAL_S


def test_the_forwarder_reads_real_files_and_sends_signed_shaped_records(tmp_path: Path) -> None:
    sent: list[Event] = []
    paths = {k: beatfile.path_for(str(tmp_path), k.run_id, k.generation, k.logical_id)
             for k in (A0, A1)}
    watched = [(k, p, 1.0) for k, p in paths.items()]
    fwd = BeatForwarder("node-1", "inc", sent.append, lambda: watched, lambda: 1_000)
    assert fwd.look(watched) == 0 and not sent  # nothing written yet: nothing said
    beatfile.write(paths[A0], Beat(1, 3))
    assert fwd.look(watched) == 1
    (record,) = sent
    assert isinstance(record, MembersHeartbeatRecorded)
    assert (record.run_id, record.generation, record.node) == ("run-a", 1, "node-1")
    assert record.beats == (MemberBeat("r0", 3),) and record.header.producer == "agent/node-1"
    assert fwd.look(watched) == 0  # the same beat is not sent twice
    beatfile.write(paths[A1], Beat(1, 3))
    fwd.look(watched)
    assert sent[-1].header.event_id != record.header.event_id
    assert (fwd.records, fwd.members) == (2, 2)


def test_a_restarted_agent_adopts_its_running_generations_and_speaks_only_once_they_move(
        tmp_path: Path) -> None:
    """The generations started here, still newest and not stopped, are watched; a file
    left there says nothing until it moves, and a worker this agent launched is its own."""
    state = AgentState(newest={"run-a": 1, "run-b": 3, "run-c": 2},
                       revoked={"run-c": 2}, started=frozenset({("run-a", 1), ("run-b", 2),
                                                                ("run-b", 3), ("run-c", 2)}))
    assert adopted(state) == [("run-a", 1), ("run-b", 3)]
    for key in (A0, A1):
        beatfile.write(beatfile.path_for(str(tmp_path), key.run_id, key.generation,
                                         key.logical_id), Beat(5, 9))
    found = orphans(str(tmp_path), adopted(state), {A1})  # A1 is this agent's own
    assert [k for k, _, _ in found] == [A0]
    sent: list[Event] = []
    fwd = BeatForwarder("n", "inc", sent.append, lambda: found, lambda: 1, lambda: {A0})
    assert fwd.look(found) == 0 and not sent  # the old beat: nothing said for it
    beatfile.write(found[0][1], Beat(6, 10))
    assert fwd.look(found) == 1 and sent[0].beats == (MemberBeat("r0", 10),)
