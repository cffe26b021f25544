"""A node as its facts leave it: cordoned, drained, quarantined, on probation or free. Pure.

The node facts on ``runledger.runs`` (keyed ``events.model.node_key(node)``) are
``NodeQuarantined``, ``NodeCordoned`` (mode cordon or drain), ``NodeUncordoned``
(lifts cordon, drain and quarantine alike) and ``NodeQuarantineExpired`` (frees
the node on probation until its next quarantine or uncordon). This is their one
fold: the controller's inventory (``controller.inventory.Node`` is a
:class:`NodeFacts` plus what the agent reports) and the agent's start line
(``agent.nodestate``) both read a node through it, so the two cannot drift.

:func:`observe` is total and refuses nothing: a node fact is the controller's or
an operator's decision, already judged before it was written, and every event of
another kind leaves the facts as they were. No clock: times are the facts'
``header.occurred_at``. :func:`standing` is what the facts alone say of the node
(quarantine first: it blocks restarts too); whether its agent is alive or its
slots busy is for the caller, who knows the heartbeats.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TypeVar

from events.model import (
    Event,
    NodeCordoned,
    NodeQuarantined,
    NodeQuarantineExpired,
    NodeUncordoned,
)

# The events this fold reads; every other kind changes nothing.
NODE_FACTS = (NodeQuarantined, NodeCordoned, NodeUncordoned, NodeQuarantineExpired)

READY, CORDONED, QUARANTINED = "ready", "cordoned", "quarantined"


# kw_only: a subclass (``controller.inventory.Node``) puts its own fields first,
# positionally, and these after them, by name.
@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFacts:
    """A node as its facts leave it (times in ms, 0 when not set)."""

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
    # When the quarantine expires, as its fact says (0: only an uncordon frees it).
    quarantine_expires_at: int = 0
    # Since when the node is on probation (its last quarantine expired; 0: not), and
    # the failures the expiry left counted; a new quarantine or an uncordon ends it.
    probation_since: int = 0
    probation_failures: int = 0

    def placeable(self) -> bool:
        """Whether new work may go here, as far as the facts say (liveness aside)."""
        return not self.quarantined and not self.cordon


NOTHING = NodeFacts()

F = TypeVar("F", bound=NodeFacts)


def observe(facts: F, event: Event) -> F:
    """The node after one of its facts (of the same type as ``facts``: a subclass keeps
    its own fields); events of other kinds change nothing. The caller picks the node's
    events: this looks at no ``event.node``."""
    at = event.header.occurred_at
    match event:
        case NodeQuarantined():
            return replace(facts, quarantined=True, quarantine_reason=event.reason,
                           quarantined_at=at, quarantine_expires_at=event.expires_at,
                           probation_since=0, probation_failures=0)
        case NodeCordoned():
            return replace(facts, cordon=event.mode, cordon_reason=event.reason,
                           cordoned_at=at, cordoned_by=event.principal)
        case NodeUncordoned():
            return replace(facts, quarantined=False, quarantine_reason="", quarantined_at=0,
                           cordon="", cordon_reason="", cordoned_at=0, cordoned_by="",
                           releases=facts.releases + facts.quarantined,
                           quarantine_expires_at=0, probation_since=0, probation_failures=0)
        case NodeQuarantineExpired():
            return replace(facts, quarantined=False, quarantine_reason="", quarantined_at=0,
                           releases=facts.releases + facts.quarantined,
                           quarantine_expires_at=0, probation_since=at,
                           probation_failures=event.failures)
    return facts


def fold(node: str, events: Iterable[Event]) -> NodeFacts:
    """``node``'s facts after ``events`` in log order; other nodes' are passed over."""
    facts = NOTHING
    for event in events:
        if isinstance(event, NODE_FACTS) and event.node == node:
            facts = observe(facts, event)
    return facts


def cordon_why(facts: NodeFacts) -> str:
    """Why the node is cordoned, and by whom: ``disk (by alice)``."""
    return f"{facts.cordon_reason} (by {facts.cordoned_by})"


def standing(facts: NodeFacts) -> tuple[str, str, int]:
    """(state, why, since when in ms; 0 for ready) from the facts alone: quarantine first,
    then a cordon; a drained node is cordoned ("drained: ..."), as an idle one is."""
    if facts.quarantined:
        return QUARANTINED, facts.quarantine_reason, facts.quarantined_at
    if facts.cordon:
        why = cordon_why(facts)
        return CORDONED, f"drained: {why}" if facts.cordon == "drain" else why, facts.cordoned_at
    return READY, "", 0
