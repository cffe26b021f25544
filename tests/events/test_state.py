"""Run state's derived index and its shelves: what keeps a report's cost flat in the ranks."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.model import Member
from events.shelf import Shelf
from events.state import RunState, Status, copy_with

BASE = RunState("run-1", Status.RUNNING, "sha256:x", "alice", 2, None, 0, 0)


def group(*placed: tuple[str, str]) -> tuple[Member, ...]:
    return tuple(Member(lid, node, i) for i, (lid, node) in enumerate(placed))


@given(st.lists(st.tuples(st.sampled_from(["r0", "r1", "r2", "r3"]),
                          st.sampled_from(["n1", "n2"])), max_size=6, unique_by=lambda p: p[0]),
       st.lists(st.tuples(st.sampled_from(["r0", "r1", "r2", "r3"]),
                          st.sampled_from(["n1", "n3"])), max_size=6, unique_by=lambda p: p[0]))
def test_node_of_follows_the_members_through_every_kind_of_copy(
        first: list[tuple[str, str]], second: list[tuple[str, str]]) -> None:
    state = replace(BASE, members=group(*first))
    for lid in ("r0", "r1", "r2", "r3", "rX"):
        assert state.node_of(lid) == dict(first).get(lid)
    stepped = copy_with(state, step=5)  # the hot copy keeps the index it had
    assert stepped.placed is state.placed
    moved = replace(stepped, members=group(*second))  # new members: a new index
    for lid in ("r0", "r1", "r2", "r3"):
        assert moved.node_of(lid) == dict(second).get(lid)
    assert replace(moved, step=7).placed is moved.placed  # same members: kept, not rebuilt


def test_the_hot_copy_refuses_to_change_the_members() -> None:
    with pytest.raises(AssertionError, match="replace"):
        copy_with(BASE, members=group(("r0", "n1")))


def test_a_dict_given_for_a_per_member_map_becomes_a_shelf_and_compares_equal() -> None:
    state = replace(BASE, heartbeats={"r0": 5}, exits={"r1": 0})
    assert isinstance(state.heartbeats, Shelf) and isinstance(state.exits, Shelf)
    assert state.heartbeats == {"r0": 5} and state.exits == {"r1": 0}
    assert state == replace(BASE, heartbeats=Shelf.of({"r0": 5}), exits={"r1": 0})
