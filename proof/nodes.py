"""Operators' requests and the nodes' cordons, as the simulator's truth reads them.

:class:`Operations` follows the facts an operator's requests become and
checks, for ``proof.truth``:

- N  a node operation (``NodeOperationRequested``) is judged as the log
  stood when the controller read it: one decided on an older epoch than the
  node's operation facts (``NodeCordoned``, ``NodeUncordoned``) is refused
  as ``superseded``; one for a node the controller does not know (no fact
  names it, and its agent was not heard since the controller began) as
  ``unknown_node``; any other becomes the fact it asks for
  (``NodeCordoned`` with its mode, or ``NodeUncordoned``), caused by it;
- X  a request is taken once: a copy of an operator's request (a submission,
  a cancel, a node operation) that was already taken (applied, or refused
  with a record) appends no fact for it, and is refused as replayed (or
  only counted, ``controller.rejections``);
- G's rules for cordons: admission places no member on a cordoned or
  drained node; a restart keeps a cordoned node of its last placement but
  none that is drained, and takes no cordoned node it was not on.

Tested in tests/proof/test_truth_verdicts.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from controller.emitter import Out
from controller.inventory import NODE_FACTS
from controller.node_decide import UNKNOWN_NODE
from controller.replays import REPLAYED, SUPERSEDED, request_of
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    CancelRequested,
    Event,
    GenerationStarted,
    Member,
    NodeCordoned,
    NodeOperationRequested,
    NodeUncordoned,
    RunSubmitted,
    WriteRejected,
)
from proof.props import Violation

REQUESTS = (RunSubmitted, CancelRequested, NodeOperationRequested)
DRAIN = "drain"


@dataclass
class Operations:
    cordons: dict[str, str] = field(default_factory=dict)  # node -> "cordon" or "drain"
    epochs: dict[str, int] = field(default_factory=dict)  # node -> operation facts so far
    taken: set[str] = field(default_factory=set)  # applied, or refused with a record
    seen: dict[str, tuple[int, bool]] = field(default_factory=dict)  # request -> its node's
    # epoch when the controller read it, and whether it knew the node then
    again: dict[str, bool] = field(default_factory=dict)  # request -> applied before its read
    named: set[str] = field(default_factory=set)  # nodes a node fact names
    heard: dict[str, int] = field(default_factory=dict)  # node -> its agent's report, read at

    def fact(self, e: Event) -> None:
        """A fact appended: what it does to a node, and which request it took."""
        if isinstance(e, NODE_FACTS):
            self.named.add(e.node)
        if isinstance(e, NodeCordoned | NodeUncordoned):
            self.epochs[e.node] = self.epochs.get(e.node, 0) + 1
            if isinstance(e, NodeCordoned):
                self.cordons[e.node] = e.mode
            else:
                self.cordons.pop(e.node, None)
        taken = request_of(e)
        if taken is not None:
            self.taken.add(taken)

    def known(self, node: str, since: int) -> bool:
        """Whether the controller knows the node: a fact names it, or its agent was heard
        since the controller began (a restarted one reads agents' reports from then on)."""
        return node in self.named or self.heard.get(node, since - 1) >= since

    def reading(self, e: Event, since: int) -> None:
        """The controller (listening since ``since``) is about to read ``e``: whether it was
        applied already, and the node as it must be judged by."""
        if isinstance(e, REQUESTS):
            self.again[e.header.event_id] = e.header.event_id in self.taken
        if isinstance(e, NodeOperationRequested):
            self.seen[e.header.event_id] = (self.epochs.get(e.node, 0),
                                            self.known(e.node, since))

    def judged(self, e: Event, outs: Sequence[Out], now: int) -> None:
        """N and X for a request the controller read at ``now``, and the records it
        appended."""
        if isinstance(e, AgentRegistered | AgentHeartbeatRecorded):
            self.heard[e.node] = now
        if not isinstance(e, REQUESTS):
            return
        rid = e.header.event_id
        caused = [x for _, x in outs if not isinstance(x, WriteRejected) and request_of(x) == rid]
        refused = [x.reason for _, x in outs
                   if isinstance(x, WriteRejected) and x.rejected_event_id == rid]
        if self.again.get(rid):
            if caused or refused not in ([], [REPLAYED]):  # [] a refusal only counted
                raise Violation("X", f"{e.event_type} {rid}, already taken, was read again: "
                                     f"appended {[x.event_type for x in caused]}, refused "
                                     f"{refused}")
            return
        if not isinstance(e, NodeOperationRequested):
            return
        epoch, known = self.seen.get(rid, (0, False))
        if e.epoch is not None and e.epoch < epoch:
            if caused or refused not in ([], [SUPERSEDED]):
                raise Violation("N", f"{e.operation} of {e.node} seen at epoch {e.epoch}, the "
                                     f"node at {epoch}: appended {[x.event_type for x in caused]},"
                                     f" refused {refused}")
            return
        if not known:
            if caused or refused not in ([], [UNKNOWN_NODE]):
                raise Violation("N", f"{e.operation} of {e.node}, a node the controller has not "
                                     f"heard of: appended {[x.event_type for x in caused]}, "
                                     f"refused {refused}")
            return
        want = "NodeUncordoned" if e.operation == "uncordon" else "NodeCordoned"
        if [x.event_type for x in caused] != [want] or any(
                x.node != e.node or (isinstance(x, NodeCordoned) and x.mode != e.operation)
                for x in caused if isinstance(x, NodeCordoned | NodeUncordoned)):
            raise Violation("N", f"{e.operation} of {e.node} at the current epoch {epoch} "
                                 f"appended {caused}, refused {refused}; want one {want}")

    def unplaceable(self, e: GenerationStarted, last: tuple[Member, ...]) -> list[str]:
        """The nodes of ``e`` its cordons forbid (``last``: the generation before's members)."""
        kept = {m.node for m in last} if e.reason != "admitted" else set()
        return sorted({m.node for m in e.members if m.node in self.cordons
                       and (self.cordons[m.node] == DRAIN or m.node not in kept)})
