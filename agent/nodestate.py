"""What an agent says of its own node when it starts: ready, cordoned or quarantined. Pure.

The controller decides a node's state from its facts on ``runledger.runs``
(keyed ``events.model.node_key(node)``): ``NodeQuarantined``, ``NodeCordoned``
(mode cordon or drain), ``NodeUncordoned`` and ``NodeQuarantineExpired``. An
agent may import only ``events``, so the fold of those facts lives there
(``events.nodefold``) and the controller's inventory folds them with it too:
:func:`fold` and :func:`state` are that fold and its verdict, and a property test
holds the agent's line to the controller's ``state_of``. An agent that has just
started runs no worker, so a drained node is simply cordoned ("drained: ..."),
as ``runledger nodes`` shows an idle drained node.

:func:`line` is the one log line: the state, since when and why, and for a
node that takes no work the command that frees it. The facts are only read for
this line (the agent acts on no node fact: the controller places the work), so
their signatures are not checked here.

Tested in tests/agent/test_nodestate.py.
"""

from __future__ import annotations

from datetime import UTC, datetime

from events.nodefold import CORDONED, NOTHING, QUARANTINED, READY, NodeFacts, fold
from events.nodefold import standing as state

__all__ = ["CORDONED", "NOTHING", "QUARANTINED", "READY", "NodeFacts", "fold", "line", "state",
           "unknown"]


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
