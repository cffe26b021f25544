"""Which worker log ``runledger logs`` shows, from a run's facts. Pure.

Agents name each worker's log file in its ``WorkerExited`` (v2), which the
controller keeps as a fact; ``GenerationStarted`` says who the members were,
in rank order. :func:`pick` chooses one exit: the generation asked for (by
default the newest that has an exit), and the member asked for by rank number
or logical id (by default the first that failed, else rank 0). Anything it
cannot find it names, listing what exists.

Tested in tests/runledger/test_logview.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from events.model import Event, GenerationStarted, WorkerExited


class LogNotFound(Exception):
    """The run, generation or rank asked for has no log; the message lists what exists."""


@dataclass(frozen=True, slots=True)
class Picked:
    generation: int
    logical_id: str
    rank: int | None
    node: str
    log_path: str
    exited: WorkerExited | None  # None: the member has not exited (no log named yet)


def pick(run_id: str, facts: Sequence[Event], rank: str | None,
         generation: int | None) -> Picked:
    gens: dict[int, tuple[str, ...]] = {}
    exits: dict[int, dict[str, WorkerExited]] = {}
    for e in facts:
        if isinstance(e, GenerationStarted):
            gens[e.generation] = tuple(m.logical_id for m in e.members)
        elif isinstance(e, WorkerExited):
            exits.setdefault(e.generation, {}).setdefault(e.logical_id, e)
    if not gens:
        raise LogNotFound(f"run {run_id} has started no generation, so no worker has a log")
    if generation is None:
        generation = max(exits) if exits else max(gens)
    if generation not in gens:
        raise LogNotFound(f"run {run_id} has no generation {generation}; it has"
                          f" {', '.join(str(g) for g in sorted(gens))}")
    members, done = gens[generation], exits.get(generation, {})
    lid = _member(run_id, generation, members, done, rank)
    ex = done.get(lid)
    node = ex.node if ex is not None else ""
    index = members.index(lid) if lid in members else None
    return Picked(generation, lid, index, node, ex.log_path if ex is not None else "", ex)


def _member(run_id: str, generation: int, members: tuple[str, ...],
            done: dict[str, WorkerExited], rank: str | None) -> str:
    if rank is None:
        failed = [lid for lid in members if lid in done and _failed(done[lid])]
        return failed[0] if failed else members[0]
    if rank in members:
        return rank
    if rank.isdigit() and int(rank) < len(members):
        return members[int(rank)]
    listed = ", ".join(f"{i} ({lid})" for i, lid in enumerate(members))
    raise LogNotFound(f"run {run_id} generation {generation} has no rank {rank!r}; its ranks"
                      f" are {listed}")


def _failed(e: WorkerExited) -> bool:
    return e.signal is not None or e.exit_code != 0 or bool(e.launch_error)
