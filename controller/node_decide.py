"""The node lifecycle's decisions: an operator's request, a quarantine's expiry. Pure.

:func:`judge` takes a ``NodeOperationRequested`` (already verified as an
operator's by its signature, ``controller.signatures``) and says which fact it
becomes, or why it is refused. Rules, the first that applies decides:

1. a request keyed other than ``node/<its node>`` is refused (``wrong_key``):
   the key decides which controller judges it, so it must be the node's;
2. a node no agent has registered and no fact names is refused
   (``unknown_node``), naming the nodes that are known;
3. ``cordon`` and ``drain`` become ``NodeCordoned`` with that mode (again on
   a cordoned node: the newer reason and mode win);
4. ``uncordon`` becomes ``NodeUncordoned``, which lifts any cordon, drain and
   quarantine and clears the node's failure count (``failures_cleared`` says
   how many there were).

:func:`expiries`, from the tick, with ``now`` passed in: a quarantine older
than the policy's ``expiry_ms`` (0: never) expires (``NodeQuarantineExpired``),
and the node goes on probation with ``probation_failures`` failures counted.

Tested in tests/controller/test_inventory.py and tests/controller/test_nodes.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.inventory import Inventory
from controller.model import NodePolicy
from events.model import NodeOperationRequested, node_key

UNKNOWN_NODE = "unknown_node"
WRONG_KEY = "wrong_key"


@dataclass(frozen=True, slots=True)
class Cordon:
    node: str
    mode: str  # "cordon" or "drain"


@dataclass(frozen=True, slots=True)
class Uncordon:
    node: str
    failures_cleared: int


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Expire:
    node: str
    failures: int  # the count it keeps: probation
    reason: str


Decision = Cordon | Uncordon | Refuse


def judge(inventory: Inventory, failures: Mapping[str, int],
          request: NodeOperationRequested) -> Decision:
    node = request.node
    if request.run_id != node_key(node):
        return Refuse(WRONG_KEY, f"{request.operation} of node {node!r} was keyed "
                                 f"{request.run_id!r}, not {node_key(node)!r}; send it with "
                                 f"`runledger node {request.operation}`")
    if node not in inventory.nodes:
        known = ", ".join(sorted(inventory.nodes)) or "none"
        return Refuse(UNKNOWN_NODE, f"{request.operation} of unknown node {node!r}: no agent "
                                    f"has registered it (known nodes: {known})")
    if request.operation == "uncordon":
        return Uncordon(node, failures.get(node, 0))
    return Cordon(node, request.operation)


def expiries(inventory: Inventory, policy: NodePolicy, now: int) -> list[Expire]:
    """The quarantines that have lasted the policy's expiry by ``now``, by node name."""
    if policy.expiry_ms <= 0:
        return []
    return [Expire(n.name, policy.probation_failures,
                   f"quarantined since {n.quarantined_at} ms ({n.quarantine_reason}); expired "
                   f"after {policy.expiry_ms // 1000} s, on probation with "
                   f"{policy.probation_failures} failure(s) counted")
            for n in sorted(inventory.nodes.values(), key=lambda n: n.name)
            if n.quarantined and now - n.quarantined_at >= policy.expiry_ms]
