"""What the agents offer and what operators and failures made of it: nodes, slots,
domains, liveness, cordons, drains and quarantines. Pure.

Built by folding the agents' ``AgentRegistered`` and ``AgentHeartbeatRecorded``
and the node facts: ``NodeQuarantined``, ``NodeCordoned`` (mode cordon or
drain), ``NodeUncordoned`` and ``NodeQuarantineExpired`` (which puts the node on
probation until its next quarantine or uncordon). Time comes from the
events and from the ``now`` the caller passes in. A node is placeable
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
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    Event,
    FailureClassified,
    NodeCordoned,
    NodeQuarantined,
    NodeQuarantineExpired,
    NodeUncordoned,
)

# The records that change the inventory (FailureClassified changes only the counts).
NODE_FACTS = (NodeQuarantined, NodeCordoned, NodeUncordoned, NodeQuarantineExpired)
NODE_RECORDS = (AgentRegistered, AgentHeartbeatRecorded, *NODE_FACTS)

READY, CORDONED, DRAINING, QUARANTINED, LOST = (
    "ready", "cordoned", "draining", "quarantined", "lost")


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    slots: int
    domain: str
    last_seen: int
    address: str = "127.0.0.1"
    quarantined: bool = False
    quarantine_reason: str = ""
    quarantined_at: int = 0
    # "" (not cordoned), "cordon" or "drain": NodeCordoned.mode.
    cordon: str = ""
    cordon_reason: str = ""
    cordoned_at: int = 0
    cordoned_by: str = ""
    # Quarantines lifted so far (uncordon or expiry): part of the next one's event id.
    releases: int = 0
    busy_slots: int = 0  # as the agent's last heartbeat said
    # When the quarantine expires, as its fact says (0: only an uncordon frees it).
    quarantine_expires_at: int = 0
    # Since when the node is on probation (its last quarantine expired; 0: not), and
    # the failures the expiry left counted; a new quarantine or an uncordon ends it.
    probation_since: int = 0
    probation_failures: int = 0

    def placeable(self) -> bool:
        return not self.quarantined and not self.cordon


@dataclass(frozen=True, slots=True)
class Inventory:
    nodes: dict[str, Node]

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
            if old is None:
                node = Node(event.node, event.slots, event.domain, seen, event.address,
                            busy_slots=busy)
            else:
                node = replace(old, slots=event.slots, domain=event.domain,
                               last_seen=max(seen, old.last_seen), address=event.address,
                               busy_slots=busy)
            return Inventory({**nodes, event.node: node})
        case NodeQuarantined() | NodeCordoned() | NodeUncordoned() | NodeQuarantineExpired():
            old = nodes.get(event.node) or Node(event.node, 0, "", 0)
            return Inventory({**nodes, event.node: _fact(old, event)})
    return inventory


def _fact(node: Node, event: Event) -> Node:
    at = event.header.occurred_at
    match event:
        case NodeQuarantined():
            return replace(node, quarantined=True, quarantine_reason=event.reason,
                           quarantined_at=at, quarantine_expires_at=event.expires_at,
                           probation_since=0, probation_failures=0)
        case NodeCordoned():
            return replace(node, cordon=event.mode, cordon_reason=event.reason, cordoned_at=at,
                           cordoned_by=event.principal)
        case NodeUncordoned():
            return replace(node, quarantined=False, quarantine_reason="", quarantined_at=0,
                           cordon="", cordon_reason="", cordoned_at=0, cordoned_by="",
                           releases=node.releases + node.quarantined, quarantine_expires_at=0,
                           probation_since=0, probation_failures=0)
        case NodeQuarantineExpired():
            return replace(node, quarantined=False, quarantine_reason="", quarantined_at=0,
                           releases=node.releases + node.quarantined, quarantine_expires_at=0,
                           probation_since=at, probation_failures=event.failures)
    return node


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
    """
    if node.quarantined:
        return QUARANTINED, node.quarantine_reason, node.quarantined_at
    if node.cordon:
        why = f"{node.cordon_reason} (by {node.cordoned_by})"
        if node.cordon == "drain":
            if node.busy_slots > 0 and now - node.last_seen <= timeout_ms:
                return DRAINING, f"{why}; {node.busy_slots} slot(s) still busy", node.cordoned_at
            return CORDONED, f"drained: {why}", node.cordoned_at
        return CORDONED, why, node.cordoned_at
    if now - node.last_seen > timeout_ms:
        return LOST, f"no heartbeat for {(now - node.last_seen) // 1000} s", node.last_seen
    return READY, "", 0


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
