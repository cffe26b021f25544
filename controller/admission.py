"""Gang admission: place the whole group or nothing, and say why not. Pure.

Members get logical ids ``r0 .. r{n-1}`` in rank order, or the ids the caller
passes (an elastic run's newcomers, ``controller.elastic``). A placement fills
nodes in name order inside one topology domain when the group fits in one
(locality first), spreading across domains only when the spec allows it. A
placement whose member list would not fit its ``GenerationStarted`` is refused
(:data:`PLACEMENT_TOO_LARGE`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller.inventory import Node
from events.model import Member
from events.placement import PLACEMENT_MAX_BYTES, pack, wire_bytes

PLACEMENT_TOO_LARGE = "placement_too_large"


@dataclass(frozen=True, slots=True)
class Placement:
    members: tuple[Member, ...]


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str


def logical_ids(world_size: int) -> list[str]:
    return [f"r{i}" for i in range(world_size)]


def place(
    world_size: int,
    slots_per_node: int,
    domain: str | None,
    nodes: Sequence[Node],
    used: Mapping[str, int],
    held: Mapping[str, int] | None = None,
    ids: Sequence[str] | None = None,
) -> Placement | Refusal:
    """Where ``world_size`` workers go, at most ``slots_per_node`` on each node.

    ``used`` counts the slots other runs' live generations hold per node;
    ``held`` the slots this run's members already placed hold (they count
    against ``slots_per_node`` too); ``ids`` names the new members.
    """
    if not nodes:
        return Refusal("no live agent has registered")
    mine = held or {}
    free = {n.name: min(slots_per_node - mine.get(n.name, 0),
                        n.slots - used.get(n.name, 0) - mine.get(n.name, 0)) for n in nodes}
    taken = {k: used.get(k, 0) + v for k, v in mine.items()} if mine else used
    names = list(ids) if ids is not None else logical_ids(world_size)
    by_domain: dict[str, list[Node]] = {}
    for n in nodes:
        by_domain.setdefault(n.domain, []).append(n)
    candidates = {domain: by_domain.get(domain, [])} if domain is not None else by_domain
    for name in sorted(candidates):
        group = candidates[name]
        if sum(max(0, free[n.name]) for n in group) >= world_size:
            return _fits(_fill(names, group, free, taken))
    total = sum(max(0, f) for f in free.values())
    if domain is None and total >= world_size:
        return _fits(_fill(names, sorted(nodes, key=lambda n: n.name), free, taken))
    where = f"domain {domain!r}" if domain is not None else "all live nodes"
    have = sum(max(0, free[n.name]) for g in candidates.values() for n in g)
    return Refusal(f"needs {world_size} slots, {have} free in {where}")


def _fits(members: tuple[Member, ...]) -> Placement | Refusal:
    """The placement, or why its ``GenerationStarted`` could not carry it: the members
    go on the wire as blocks (``events.placement``), one per run of a node's slots,
    and a group spread one member per node with long names can pass a record."""
    size = wire_bytes(pack((m.logical_id, m.node, m.slot, m.domain) for m in members))
    if size <= PLACEMENT_MAX_BYTES:
        return Placement(members)
    nodes = len({m.node for m in members})
    return Refusal(f"{PLACEMENT_TOO_LARGE}: {len(members)} members on {nodes} nodes take "
                   f"{size} bytes in a GenerationStarted, over the {PLACEMENT_MAX_BYTES} it "
                   "may carry; give the run nodes with more slots or shorter names")


def _fill(
    names: Sequence[str], nodes: Sequence[Node], free: Mapping[str, int], used: Mapping[str, int]
) -> tuple[Member, ...]:
    members: list[Member] = []
    world_size = len(names)
    ids = iter(names)
    for node in nodes:
        # Slot numbers continue after the slots other runs hold on the node.
        first = used.get(node.name, 0)
        for k in range(max(0, free[node.name])):
            if len(members) == world_size:
                break
            members.append(Member(next(ids), node.name, first + k, node.domain))
    return tuple(members)
