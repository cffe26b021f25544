"""What an agent says of its own node when it starts: ready, cordoned or quarantined. Pure.

The controller decides a node's state from its facts on ``runledger.runs``
(keyed ``events.model.node_key(node)``): ``NodeQuarantined``, ``NodeCordoned``
(mode cordon or drain), ``NodeUncordoned`` and ``NodeQuarantineExpired``. An
agent may import only ``events``, so it cannot reuse the controller's
inventory fold (``controller.inventory``); :func:`fold` is the small part of it
an agent needs, and a property test holds the two to the same verdict. An agent
that has just started runs no worker, so a drained node is simply cordoned
("drained: ..."), as ``runledger nodes`` shows an idle drained node.

:func:`line` is the one log line: the state, since when and why, and for a
node that takes no work the command that frees it. The facts are only read for
this line (the agent acts on no node fact: the controller places the work), so
their signatures are not checked here.

Tested in tests/agent/test_nodestate.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from events.model import (
    Event,
    NodeCordoned,
    NodeQuarantined,
    NodeQuarantineExpired,
    NodeUncordoned,
)

READY, CORDONED, QUARANTINED = "ready", "cordoned", "quarantined"


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """A node as its facts leave it (times in ms, 0 when not set)."""

    quarantine_reason: str = ""
    quarantined_at: int = 0
    quarantined: bool = False
    cordon: str = ""  # "", "cordon" or "drain"
    cordon_reason: str = ""
    cordoned_by: str = ""
    cordoned_at: int = 0


NOTHING = NodeFacts()


def observe(facts: NodeFacts, event: Event) -> NodeFacts:
    """The node after one of its facts; events of other kinds change nothing."""
    at = event.header.occurred_at
    match event:
        case NodeQuarantined():
            return replace(facts, quarantined=True, quarantine_reason=event.reason,
                           quarantined_at=at)
        case NodeCordoned():
            return replace(facts, cordon=event.mode, cordon_reason=event.reason,
                           cordoned_by=event.principal, cordoned_at=at)
        case NodeUncordoned():
            return NOTHING  # lifts cordon, drain and quarantine alike
        case NodeQuarantineExpired():
            return replace(facts, quarantined=False, quarantine_reason="", quarantined_at=0)
    return facts


def fold(node: str, events: Iterable[Event]) -> NodeFacts:
    """The node's facts after ``events`` in log order; other nodes' are passed over."""
    facts = NOTHING
    for event in events:
        if getattr(event, "node", None) == node:
            facts = observe(facts, event)
    return facts


def state(facts: NodeFacts) -> tuple[str, str, int]:
    """(state, why, since when in ms; 0 for ready): quarantine first, as the controller."""
    if facts.quarantined:
        return QUARANTINED, facts.quarantine_reason, facts.quarantined_at
    if facts.cordon:
        why = f"{facts.cordon_reason} (by {facts.cordoned_by})"
        return CORDONED, f"drained: {why}" if facts.cordon == "drain" else why, facts.cordoned_at
    return READY, "", 0


def line(node: str, facts: NodeFacts) -> str:
    """The agent's start line for its node, e.g. ``node n1: ready``."""
    what, why, since = state(facts)
    if what == READY:
        return f"node {node}: ready"
    blocks = ("no new run is placed here and none restarts here" if what == QUARANTINED
              else "no new run is placed here")
    return (f"node {node}: {what} since {_iso(since)} ({why}); {blocks}; "
            f"`runledger node uncordon {node} --reason R` frees it")


def unknown(node: str, problem: str) -> str:
    """The start line when the node's facts could not be read."""
    return (f"node {node}: state unknown (its facts on runledger.runs could not be read: "
            f"{problem}); `runledger nodes` shows it")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
