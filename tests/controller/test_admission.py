"""controller/admission.py: gang admission, a pure function, exhaustively poked."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.admission import Placement, Refusal, place
from controller.inventory import Node


def nodes(*spec: tuple[str, int, str]) -> list[Node]:
    return [Node(name, slots, domain, last_seen=0) for name, slots, domain in spec]


def test_the_whole_group_or_nothing_with_a_reason() -> None:
    inv = nodes(("a", 2, "d1"), ("b", 1, "d1"))
    got = place(4, 8, None, inv, {})
    assert isinstance(got, Refusal) and got.reason == "needs 4 slots, 3 free in all live nodes"
    got = place(3, 8, None, inv, {})
    assert isinstance(got, Placement)
    assert [(m.logical_id, m.node, m.slot) for m in got.members] == [
        ("r0", "a", 0), ("r1", "a", 1), ("r2", "b", 0)]


def test_slots_held_by_other_runs_and_the_per_node_cap_are_respected() -> None:
    inv = nodes(("a", 4, "d1"), ("b", 4, "d1"))
    got = place(3, 2, None, inv, {"a": 3})
    assert isinstance(got, Placement)
    assert [(m.node, m.slot) for m in got.members] == [("a", 3), ("b", 0), ("b", 1)]
    assert isinstance(place(5, 2, None, inv, {"a": 3}), Refusal)


def test_a_domain_constraint_and_locality_first() -> None:
    inv = nodes(("a", 2, "d1"), ("b", 2, "d2"), ("c", 2, "d2"))
    got = place(3, 4, None, inv, {})
    assert isinstance(got, Placement) and {m.domain for m in got.members} == {"d2"}
    got = place(3, 4, "d1", inv, {})
    assert isinstance(got, Refusal) and "domain 'd1'" in got.reason
    got = place(5, 4, None, inv, {})  # fits only across domains, which is allowed
    assert isinstance(got, Placement) and len(got.members) == 5


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["d1", "d2"]), st.integers(0, 4)),
             min_size=0, max_size=5),
    st.integers(1, 10), st.integers(1, 4), st.sampled_from([None, "d1", "d2"]),
)
def test_a_placement_never_oversubscribes_and_names_every_rank_once(
    spec: list[tuple[int, str, int]], world: int, cap: int, domain: str | None,
) -> None:
    inv = [Node(f"n{i}", slots, dom, 0) for i, (slots, dom, _) in enumerate(spec)]
    used = {f"n{i}": min(u, slots) for i, (slots, _, u) in enumerate(spec)}
    got = place(world, cap, domain, inv, used)
    free = {n.name: max(0, min(cap, n.slots - used[n.name])) for n in inv
            if domain is None or n.domain == domain}
    if isinstance(got, Refusal):
        assert sum(free.values()) < world  # refused only when it truly does not fit
        return
    assert [m.logical_id for m in got.members] == [f"r{i}" for i in range(world)]
    per_node: dict[str, int] = {}
    for m in got.members:
        per_node[m.node] = per_node.get(m.node, 0) + 1
    for name, count in per_node.items():
        assert count <= free[name]
    slots = [(m.node, m.slot) for m in got.members]
    assert len(set(slots)) == len(slots)
