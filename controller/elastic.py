"""Elastic membership: the size of each generation of an elastic run. Pure.

A run with ``membership: {kind: elastic, min, max, step}`` may run with any
replica count in ``min, min+step, .. max``; each replica is
``ranks_per_replica`` ranks (slots). ``controller.run_decide`` asks this
module, in these cases (the rule numbers are run_decide's):

- rule 2, admission: the largest allowed size the live nodes hold now
  (:func:`admit`); below ``min``, the run is queued with the reason, which
  says so when ``min`` exceeds every slot the registered nodes have;
- rule 3, a restart after a failure: once no member is :func:`undecided`,
  the members whose node the run keeps
  (:meth:`controller.inventory.Inventory.keeps`, with the agent heard from in
  the last ``FRESH_MS`` rather than the node timeout) stay, with their logical ids
  and slots, and the largest allowed size is filled up with newcomers on live
  nodes (:func:`resize`): ``shrink`` when smaller than the failed generation,
  ``restart`` at the same size, ``grow`` when larger; nothing reaches ``min``:
  queued, as a fixed run is;
- rule 4, growth: a Running generation below ``max`` that committed a
  checkpoint in the last ``GROW_WINDOW_MS`` (its checkpoint boundary) grows
  to the largest allowed size the nodes now hold (:func:`grow`): the generation
  is stopped and the next one starts bigger from that checkpoint, so the grow
  costs the few steps since the commit, never an interval's worth.

Identity is the logical id, never the rank: a survivor keeps its id (its rank
is its index in the new member list: survivors first, in their old order);
newcomers take the lowest ids the generation does not use.

The global batch keeps its meaning across sizes: the data plane splits the
same global batch across however many replicas there are
(``dataplane.loader``), and each replica runs ``accumulation`` micro-batches
per optimizer step, ``ceil(reference / replicas)``, where ``reference`` is the
spec's ``topology.replicas``: at or above the reference size a replica's share
is one micro-batch; below it, the larger share is split so no micro-batch is
bigger than at the reference size. Both numbers are recorded in
``GenerationStarted`` (v2) and passed to the workers
(``events.workerenv.REPLICAS``, ``ACCUMULATION``).

Tested in tests/controller/test_elastic.py.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller import admission
from controller.inventory import Node
from events.model import Member

# How recently a node's agent must have reported for an elastic run to keep or
# place members there: three agent heartbeats (2 s each by default). A fixed run
# has nowhere else to go and waits out the controller's node timeout (15 s); an
# elastic one would otherwise restart on a dead node, wait out the start
# timeout, and only then shrink.
FRESH_MS = 6_000
# A node counts as heard from after a failure only with a report this much later:
# a dead node's last report, read from another partition, may arrive in the same
# poll as the failure (or a little after it).
REPORTED_AFTER_MS = 500
# A grow waits for a checkpoint boundary: a commit of the live generation at
# most this old. A tick that comes later waits for the next commit instead.
GROW_WINDOW_MS = 10_000


@dataclass(frozen=True, slots=True)
class Elastic:
    """The elastic part of a run plan, in replicas."""

    min: int
    max: int
    step: int = 1
    ranks_per_replica: int = 1
    reference: int = 1  # the spec's topology.replicas: one micro-batch per replica

    def sizes(self) -> range:
        """The allowed replica counts, smallest first."""
        return range(self.min, self.max + 1, self.step)

    def accumulation(self, replicas: int) -> int:
        return max(1, math.ceil(self.reference / max(1, replicas)))


@dataclass(frozen=True, slots=True)
class Sized:
    members: tuple[Member, ...]
    replicas: int


@dataclass(frozen=True, slots=True)
class Where:
    """The nodes a placement may use: live ones and the slots others hold there."""

    nodes: Sequence[Node]
    used: Mapping[str, int]  # other runs' slots per node (this run's own excluded)
    slots_per_node: int
    domain: str | None


def others(used: Mapping[str, int], members: Sequence[Member]) -> dict[str, int]:
    """``used`` without the slots ``members`` (this run's own generation) hold."""
    left = dict(used)
    for m in members:
        left[m.node] = left.get(m.node, 0) - 1
    return {k: v for k, v in left.items() if v > 0}


def undecided(members: Sequence[Member], exited: Mapping[str, int], heartbeats: Mapping[str, int],
              last_seen: Mapping[str, int], now: int,
              fresh_ms: int = FRESH_MS) -> tuple[str, ...]:
    """Members a restart waits for before it sizes the next generation.

    A node lost with its agent takes its workers down silently, while the
    members elsewhere fail at once (their collectives break): sized then, the
    dead node would still look fresh and the run would restart at full size
    onto it, wait out the start timeout and only then shrink. The failure's
    time is the newest exit (``exited``: when each was accepted) or heartbeat
    of the generation; a member that did not exit is undecided while its
    node's agent has not reported since then (``last_seen``, at least
    ``REPORTED_AFTER_MS`` later) and is not yet
    ``fresh_ms`` silent (``FRESH_MS``, or the controller's ``NodePolicy.silence_ms``):
    a live agent reports within its interval, a dead one falls out of it.
    """
    failed_at = max([*exited.values(), *heartbeats.values()], default=0)
    return tuple(m.logical_id for m in members
                 if m.logical_id not in exited
                 and last_seen.get(m.node, 0) < failed_at + REPORTED_AFTER_MS
                 and now - last_seen.get(m.node, 0) <= fresh_ms)


def shape(elastic: Elastic | None, ranks_per_replica: int, world: int) -> tuple[int, int]:
    """(replicas, accumulation) of a generation of ``world`` ranks: a fixed run's is (n, 1)."""
    replicas = max(1, world // max(1, ranks_per_replica))
    return replicas, elastic.accumulation(replicas) if elastic is not None else 1


def _fit(e: Elastic, keep: Sequence[Member], where: Where, replicas: int) -> Sized | None:
    world = replicas * e.ranks_per_replica
    if world <= len(keep):
        return Sized(tuple(keep[:world]), replicas)
    have = {m.logical_id for m in keep}
    fresh = (f"r{i}" for i in range(world + len(have)) if f"r{i}" not in have)
    ids = [next(fresh) for _ in range(world - len(keep))]
    held = Counter(m.node for m in keep)
    placed = admission.place(len(ids), where.slots_per_node, where.domain, where.nodes,
                             where.used, held, ids)
    if isinstance(placed, admission.Refusal):
        return None
    return Sized((*keep, *placed.members), replicas)


def largest(e: Elastic, keep: Sequence[Member], where: Where, floor: int) -> Sized | None:
    """The largest allowed size >= ``floor`` that fits, keeping ``keep``; None if none.

    Whether k newcomers fit is monotone in k, so a binary search over the
    allowed sizes finds it with O(log) placements.
    """
    sizes = [s for s in e.sizes() if s >= floor]
    lo, hi, best = 0, len(sizes) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        found = _fit(e, keep, where, sizes[mid])
        if found is None:
            hi = mid - 1
        else:
            best, lo = found, mid + 1
    return best


def refusal(e: Elastic, where: Where, capacity: int) -> str:
    """Why not even ``min`` replicas fit; ``capacity``: every registered node's slots."""
    need = e.min * e.ranks_per_replica
    placed = admission.place(need, where.slots_per_node, where.domain, where.nodes, where.used)
    why = placed.reason if isinstance(placed, admission.Refusal) else f"needs {need} slots"
    head = f"elastic min {e.min} replicas x {e.ranks_per_replica} ranks: {why}"
    if need > capacity:
        return (f"{head}; every registered node together has {capacity} slots, so it cannot"
                " start until nodes are added (or submit again with a lower membership.min)")
    return head


def admit(e: Elastic, where: Where) -> Sized | None:
    """Rule 2: the largest allowed size the live nodes hold, from scratch."""
    return largest(e, (), where, e.min)


def resize(e: Elastic, members: Sequence[Member], kept: set[str],
           where: Where) -> tuple[Sized, str] | None:
    """Rule 3: the next generation after a failure, and its reason; None below ``min``."""
    keep = [m for m in members if m.node in kept]
    found = largest(e, keep, where, e.min)
    if found is None:
        return None
    before = len(members) // max(1, e.ranks_per_replica)
    if found.replicas < before:
        return found, "shrink"
    return found, "grow" if found.replicas > before else "restart"


def grow(e: Elastic, members: Sequence[Member], where: Where) -> Sized | None:
    """Rule 4: a bigger generation keeping every member, when the nodes hold one."""
    current = len(members) // max(1, e.ranks_per_replica)
    if current >= e.max:
        return None
    return largest(e, members, where, current + 1)
