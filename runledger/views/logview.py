"""Which worker log ``runledger logs`` shows, and where its file is, from a run's facts. Pure.

``GenerationStarted`` says who the members of each generation were, in rank
order, and on which node. :func:`pick` chooses one member: of the generation
asked for (by default the newest), the one asked for by rank number or
logical id (by default the first that failed, else rank 0), with its
``WorkerExited`` if it has one. :func:`log_file` says where its log is: the
path its agent named in the exit report (v2 ``log_path``), or, for a worker
still running, the path under the work dir its agent registered
(``AgentRegistered`` v2, :func:`work_dir_of`) by the agent's own rule
(``events.workerlog``). Anything it cannot find it names, listing what exists
or saying what to do.

Tested in tests/runledger/views/test_logview.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from events.model import (
    AgentRegistered,
    Event,
    GenerationStarted,
    Member,
    RunCancelled,
    RunFinished,
    WorkerExited,
)
from events.workerlog import worker_log_file, worker_log_path


class LogNotFound(Exception):
    """The run, generation or rank asked for has no log; the message lists what exists."""


@dataclass(frozen=True, slots=True)
class Picked:
    generation: int
    logical_id: str
    rank: int | None
    node: str
    log_path: str
    exited: WorkerExited | None  # None: no exit of the member is on the log
    # Whether it may still be running: no exit, its generation the newest, the run not
    # ended (a member of an older generation, or of a run that ended, was stopped).
    live: bool = False


def pick(run_id: str, facts: Sequence[Event], rank: str | None,
         generation: int | None) -> Picked:
    gens: dict[int, tuple[Member, ...]] = {}
    exits: dict[int, dict[str, WorkerExited]] = {}
    ended = False
    for e in facts:
        if isinstance(e, GenerationStarted):
            gens[e.generation] = tuple(e.members)
        elif isinstance(e, WorkerExited):
            exits.setdefault(e.generation, {}).setdefault(e.logical_id, e)
        elif isinstance(e, RunFinished | RunCancelled):
            ended = True
    if not gens:
        raise LogNotFound(f"run {run_id} has started no generation, so no worker has a log")
    # The newest generation: its members are running, or the last to have run.
    generation = max(gens) if generation is None else generation
    if generation not in gens:
        raise LogNotFound(f"run {run_id} has no generation {generation}; it has"
                          f" {', '.join(str(g) for g in sorted(gens))}")
    members, done = gens[generation], exits.get(generation, {})
    ids = tuple(m.logical_id for m in members)
    lid = _member(run_id, generation, ids, done, rank)
    ex = done.get(lid)
    index = ids.index(lid) if lid in ids else None
    node = ex.node if ex is not None else members[index].node if index is not None else ""
    live = ex is None and generation == max(gens) and not ended
    return Picked(generation, lid, index, node, ex.log_path if ex is not None else "", ex,
                  live)


def exit_of(picked: Picked, facts: Iterable[Event]) -> WorkerExited | None:
    """The picked member's exit report among ``facts``, if there is one."""
    for e in facts:
        if isinstance(e, WorkerExited) and (e.generation, e.logical_id) == (
                picked.generation, picked.logical_id):
            return e
    return None


def work_dir_of(node: str, reports: Iterable[Event]) -> str | None:
    """The work dir ``node``'s agent registered last ("" before v2); None: it never did."""
    found: str | None = None
    for e in reports:
        if isinstance(e, AgentRegistered) and e.node == node:
            found = e.work_dir
    return found


def log_file(run_id: str, picked: Picked, work_dir: str | None) -> str:
    """Where the picked member's log is on its node; ``work_dir``: its agent's (``work_dir_of``).

    An exited member's is the one its agent reported; a running member's is
    computed from the work dir by the agent's own rule.
    """
    who = describe(picked)
    if picked.exited is not None:
        if not picked.log_path:
            raise LogNotFound(f"{who} of {run_id} generation {picked.generation} has no log:"
                              " its agent predates log reports, or refused the launch")
        return picked.log_path
    relative = worker_log_path(run_id, picked.generation, picked.logical_id)
    if work_dir is None:
        raise LogNotFound(f"{who} of {run_id} generation {picked.generation} is running on node"
                          f" {picked.node}, whose agent has no registration on the reports"
                          f" topic (older than its retention?); its log is {relative} under"
                          " that agent's --work-dir")
    if not work_dir:
        raise LogNotFound(f"{who} of {run_id} generation {picked.generation} is running on node"
                          f" {picked.node}, whose agent predates work dir reports; its log is"
                          f" {relative} under that agent's --work-dir")
    return worker_log_file(work_dir, run_id, picked.generation, picked.logical_id)


def describe(picked: Picked) -> str:
    """``rank R (id)``, or the logical id of a member that is not in the generation."""
    if picked.rank is None:
        return picked.logical_id
    return f"rank {picked.rank} ({picked.logical_id})"


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
