"""What the agents offer: nodes, slots, domains, liveness and quarantine. Pure.

Built by folding ``AgentRegistered``, ``AgentHeartbeatRecorded`` and
``NodeQuarantined``; time comes from the events and from the ``now`` the
caller passes in.

Tested in tests/controller/test_run_decide.py, tests/controller/test_model.py and
tests/controller/test_reconcile.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from events.model import AgentHeartbeatRecorded, AgentRegistered, Event, NodeQuarantined


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    slots: int
    domain: str
    last_seen: int
    address: str = "127.0.0.1"
    quarantined: bool = False
    quarantine_reason: str = ""


@dataclass(frozen=True, slots=True)
class Inventory:
    nodes: dict[str, Node]

    def live(self, now: int, timeout_ms: int) -> list[Node]:
        """Nodes that may take work: seen recently and not quarantined, by name."""
        return sorted(
            (n for n in self.nodes.values()
             if not n.quarantined and now - n.last_seen <= timeout_ms),
            key=lambda n: n.name,
        )


EMPTY = Inventory({})


def observe(inventory: Inventory, event: Event) -> Inventory:
    """The inventory after one event; events of other kinds change nothing."""
    nodes = inventory.nodes
    match event:
        case AgentRegistered() | AgentHeartbeatRecorded():
            old = nodes.get(event.node)
            seen = event.header.occurred_at
            if old is not None:
                seen = max(seen, old.last_seen)
            node = Node(event.node, event.slots, event.domain, seen, event.address)
            if old is not None:
                node = replace(node, quarantined=old.quarantined,
                               quarantine_reason=old.quarantine_reason)
            return Inventory({**nodes, event.node: node})
        case NodeQuarantined():
            old = nodes.get(event.node) or Node(event.node, 0, "", event.header.occurred_at)
            node = replace(old, quarantined=True, quarantine_reason=event.reason)
            return Inventory({**nodes, event.node: node})
    return inventory
