"""One owner per run: which runs this controller decides, and what it learns of the others. Pure.

The unit of work is a partition number. ``requests``, ``reports`` and ``runs``
are co-partitioned and every producer places a record by the murmur2 hash of
its run id (``events.partition``), so a run lives on one partition number in
each topic. The controllers share one consumer group with the ``range``
assignor, which hands partition *p* of ``requests`` and of ``reports`` to the
same member: that member owns the runs of partition *p*.

Every controller keeps the whole model (slot use and node failures are
cluster-wide) but decides only for the runs it owns (:meth:`Ownership.owns`,
the predicate ``controller.reconcile.handle`` and ``tick`` take):

- an assigned partition is *held* until this controller's tail of ``runs`` has
  reached the partition's end as it was at the assignment (``takeover``, the
  uncommitted end, so a previous owner's last transaction is settled and
  read first); only then is it *ready*, and its runs owned;
- :func:`follow` folds what the tail reads: facts written by another writer
  (the ``writer`` header) for any run, never this controller's own (they were
  folded when emitted). A fact another writer appended, after the takeover,
  on a partition this controller holds means a second writer: the run is
  marked ``foreign``, never decided here again, and ``foreign_writer`` is
  raised on it (docs/architecture.md §7).

Tested in tests/controller/test_ownership.py and tests/e2e/test_multi.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache

from controller.alerts import runbook_of
from controller.emitter import Emitter, Out
from controller.model import Model, PlanOf
from events.model import AlertRaised, Event
from events.partition import partition_for
from events.record import Record
from events.topics import RUNS

FOREIGN_WRITER = "foreign_writer"


@dataclass(frozen=True, slots=True)
class Ownership:
    """The partitions this controller was given, and which of them it decides for."""

    me: str  # this controller's transactional id: the writer header of its records
    partitions: int  # of each co-partitioned topic
    assigned: frozenset[int] = frozenset()
    # Per assigned partition: the offset of runs this controller must have read
    # before it decides for the partition's runs; a fact from another writer at
    # or past it was written after this controller took the partition.
    takeover: Mapping[int, int] = field(default_factory=dict)
    ready: frozenset[int] = frozenset()
    foreign: Mapping[str, str] = field(default_factory=dict)  # run id -> the other writer

    def partition(self, key: str) -> int:
        return partition_for(key, self.partitions)

    def owns(self, key: str) -> bool:
        """Whether this controller decides for the run (or node) ``key`` now."""
        return _partition(key, self.partitions) in self.ready and key not in self.foreign


@lru_cache(maxsize=1 << 17)
def _partition(key: str, partitions: int) -> int:
    """``partition_for``, remembered: the tick asks it of every live run four times a
    second (12% of a controller's CPU with 1,000 live runs, bench/cluster.py)."""
    return partition_for(key, partitions)


def assign(own: Ownership, partitions: Iterable[int], takeover: Mapping[int, int]) -> Ownership:
    """A new assignment replaces the old one; every partition in it is held until caught up."""
    parts = frozenset(partitions)
    return replace(own, assigned=parts, ready=frozenset(),
                   takeover={p: takeover.get(p, 0) for p in parts})


def catch_up(own: Ownership, positions: Mapping[int, int]) -> tuple[Ownership, frozenset[int]]:
    """Ready the held partitions the tail has read up to their takeover offset.

    ``positions``: per partition of ``runs``, how far the tail has read. Returns
    the ownership and the partitions that became ready now.
    """
    now_ready = frozenset(p for p in own.assigned - own.ready
                          if positions.get(p, 0) >= own.takeover.get(p, 0))
    if not now_ready:
        return own, now_ready
    return replace(own, ready=own.ready | now_ready), now_ready


def follow(model: Model, facts: Iterable[Record], nodes: Iterable[Event], own: Ownership,
           now: int, plan_of: PlanOf) -> tuple[Model, Ownership, list[Out]]:
    """Fold what the tail read: other writers' facts and every agent's node records.

    Returns the model, the ownership (with any run newly found ``foreign``) and
    the alerts to append.
    """
    em = Emitter(model, now, plan_of)
    for event in nodes:
        em.draft.absorb(event)
    foreign = dict(own.foreign)
    for record in facts:
        if record.writer == own.me:
            continue  # folded when this controller emitted it
        em.draft.absorb(record.event)
        key = record.event.run_id
        p = record.partition
        if p in own.assigned and record.offset >= own.takeover.get(p, 0) and key not in foreign:
            foreign[key] = record.writer or "(no writer header)"
            _raise_foreign(em, own.me, foreign[key], record)
    if len(foreign) != len(own.foreign):
        own = replace(own, foreign=foreign)
    model, out = em.result()
    return model, own, out


def _raise_foreign(em: Emitter, me: str, writer: str, record: Record) -> None:
    run_id = record.event.run_id
    run = em.draft.get(run_id)
    if run is None:
        return  # a node key or a run the fold does not know: nothing to raise it on
    state = run.state
    detail = (f"{record.event.event_type} {record.event.header.event_id!r} at "
              f"{RUNS}[{record.partition}]@{record.offset} was written by {writer!r}, "
              f"not by the owner of the run's partition; this controller stops deciding "
              f"for the run: stop the other writer, then restart this controller")
    # Per (run, other writer, detector): a later owner that finds the same writer
    # raises its own alert, never a second fact under this one's id.
    eid = f"{run_id}/alert/{FOREIGN_WRITER}/{writer}/by/{me}"
    h = em.header(run_id, state.generation, eid, record.event.header.event_id)
    alerts = run.plan.alerts
    em.emit(RUNS, AlertRaised(
        header=h, alert=FOREIGN_WRITER, severity="critical",
        owner=alerts.owner or state.principal, runbook=runbook_of(alerts.runbook_base,
                                                                  FOREIGN_WRITER),
        detail=detail, subject=writer))
