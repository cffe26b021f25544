"""What the agents offer and what operators and failures made of it: nodes, slots,
domains, liveness, cordons, drains and quarantines. Pure.

Built by folding the agents' ``AgentRegistered`` and ``AgentHeartbeatRecorded``
and the node facts: ``NodeQuarantined``, ``NodeCordoned`` (mode cordon or
drain), ``NodeUncordoned`` and ``NodeQuarantineExpired`` (which puts the node on
probation until its next quarantine or uncordon). The facts are folded by
``events.nodefold``, the fold the agent's start line uses too: a :class:`Node`
is its :class:`~events.nodefold.NodeFacts` plus what its agent reports. Time
comes from the events and from the ``now`` the caller passes in; a node's
``registered_at`` is its agent's newest registration, which tells a node that
restarted under a generation (``controller.run_decide``, rule 4). A node is placeable
(:meth:`Inventory.live`) when it was seen recently and is neither quarantined
nor cordoned; a run already placed there may restart there
(:meth:`Inventory.keeps`) unless it is quarantined or drained.

:func:`count_failures` keeps the failures attributed to each node: a
``FailureClassified`` that names the node adds one, an uncordon clears them, a
quarantine's expiry sets them to the probation count its fact carries.

Tested in tests/controller/test_inventory.py, tests/controller/test_run_decide.py
and tests/controller/test_model.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from controller import policy
from events import nodefold
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    Event,
    FailureClassified,
    NodeQuarantineExpired,
    NodeUncordoned,
)
from events.nodefold import CORDONED, NODE_FACTS, QUARANTINED, READY, NodeFacts
from events.shelf import Shelf

# The records that change the inventory (FailureClassified changes only the counts).
NODE_RECORDS = (AgentRegistered, AgentHeartbeatRecorded, *NODE_FACTS)

# READY, CORDONED and QUARANTINED are the facts' (events.nodefold); two more states only the
# heartbeats tell: a drain whose slots are still busy, and a silent agent.
DRAINING, LOST = "draining", "lost"
__all__ = ["CORDONED", "DRAINING", "EMPTY", "LOST", "NODE_FACTS", "NODE_RECORDS", "QUARANTINED",
           "READY", "Inventory", "Node", "blocked_note", "count_failures", "observe", "state_of"]


@dataclass(frozen=True, slots=True)
class Node(NodeFacts):
    """A node: what its agent last reported, and (inherited, by keyword) its facts."""

    name: str
    slots: int
    domain: str
    last_seen: int
    address: str = "127.0.0.1"
    busy_slots: int = 0  # as the agent's last heartbeat said
    # When its agent last registered (0: not since this controller began reading): a
    # registration means the agent restarted, perhaps with the node under it.
    registered_at: int = 0


@dataclass(frozen=True, slots=True)
class Inventory:
    # A shelf (events.shelf): 12,500 agents heartbeating must each change one node,
    # not copy the map of every node (a dict given is made one).
    nodes: Mapping[str, Node]

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, Shelf):
            object.__setattr__(self, "nodes", Shelf.of(self.nodes))

    def live(self, now: int, timeout_ms: int) -> list[Node]:
        """Nodes that may take new work: seen recently, not quarantined, not cordoned."""
        return sorted(
            (n for n in self.nodes.values()
             if n.placeable() and now - n.last_seen <= timeout_ms),
            key=lambda n: n.name,
        )

    def keeps(self, now: int, timeout_ms: int) -> set[str]:
        """Nodes a run placed there may restart on: seen recently, neither quarantined
        nor drained (a plain cordon keeps the runs it has)."""
        return {n.name for n in self.nodes.values()
                if not n.quarantined and n.cordon != "drain" and now - n.last_seen <= timeout_ms}

    def blocked(self, now: int, timeout_ms: int) -> list[Node]:
        """Nodes whose agent is alive but that take no new work, by name."""
        return sorted((n for n in self.nodes.values()
                       if not n.placeable() and now - n.last_seen <= timeout_ms),
                      key=lambda n: n.name)


EMPTY = Inventory({})


def observe(inventory: Inventory, event: Event) -> Inventory:
    """The inventory after one event; events of other kinds change nothing."""
    nodes = inventory.nodes
    match event:
        case AgentRegistered() | AgentHeartbeatRecorded():
            old = nodes.get(event.node)
            seen = event.header.occurred_at
            busy = event.busy_slots if isinstance(event, AgentHeartbeatRecorded) else 0
            registered = seen if isinstance(event, AgentRegistered) else 0
            if old is None:
                node = Node(event.node, event.slots, event.domain, seen, event.address,
                            busy_slots=busy, registered_at=registered)
            else:
                node = replace(old, slots=event.slots, domain=event.domain,
                               last_seen=max(seen, old.last_seen), address=event.address,
                               busy_slots=busy,
                               registered_at=max(registered, old.registered_at))
            return Inventory(Shelf.of(nodes).with_({event.node: node}))
    if isinstance(event, NODE_FACTS):
        old = nodes.get(event.node) or Node(event.node, 0, "", 0)
        return Inventory(Shelf.of(nodes).with_({event.node: nodefold.observe(old, event)}))
    return inventory


def count_failures(counts: Mapping[str, int], event: Event) -> Mapping[str, int]:
    """The failures attributed to each node after one event (the same mapping if none change)."""
    match event:
        case FailureClassified(node=str(node)) if node and policy.counts_against_node(
                event.failure_class, event.signature):
            return {**counts, node: counts.get(node, 0) + 1}
        case NodeUncordoned():
            return {**counts, event.node: 0} if counts.get(event.node) else counts
        case NodeQuarantineExpired():
            return {**counts, event.node: event.failures}
    return counts


def state_of(node: Node, now: int, timeout_ms: int) -> tuple[str, str, int]:
    """A node's state for people: (state, why, since when in ms; 0 when unknown).

    Quarantine first (it blocks restarts too), then a drain while its slots are
    busy (draining; once idle it is cordoned), a cordon, a silent agent (lost).
    Only draining and lost need the heartbeats; the rest is what the facts alone
    say (``events.nodefold.standing``), as the agent's start line says it.
    """
    alive = now - node.last_seen <= timeout_ms
    if not node.quarantined and node.cordon == "drain" and node.busy_slots > 0 and alive:
        return (DRAINING, f"{nodefold.cordon_why(node)}; {node.busy_slots} slot(s) still busy",
                node.cordoned_at)
    if node.placeable() and not alive:
        return LOST, f"no heartbeat for {(now - node.last_seen) // 1000} s", node.last_seen
    return nodefold.standing(node)


def blocked_note(inventory: Inventory, now: int, timeout_ms: int) -> str:
    """What a queue reason says of live nodes that take no work, and what frees them;
    "" when there are none. Deterministic: the same inventory, the same words."""
    parts = []
    for n in inventory.blocked(now, timeout_ms):
        what = (f"quarantined ({n.quarantine_reason})" if n.quarantined
                else f"{'drained' if n.cordon == 'drain' else 'cordoned'} ({n.cordon_reason})")
        parts.append(f"{n.name} is {what}: `runledger node uncordon {n.name} --reason R` "
                     "frees it")
    return "; ".join(parts)
