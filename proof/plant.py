"""Known bugs to plant in the real core, so a test can show the simulator finds them.

Each is a context manager that swaps one rule of the real code for a subtly
wrong one and puts the original back on exit. The first two were planted
when the simulator was built; the other seven are the bugs an independent
check planted (docs/verification.md), of which the simulator first found two:

- ``propose_after_restart``: the controller's proposal rule
  (``controller.inputs``, ``ManifestProposed``) judges a proposal as if no
  restart had been decided: it forgets, on that one path, that the decision
  revoked the generation at once (``events.fold._fenced``'s
  ``awaiting_generation``), so a proposal that arrives between the failure
  and the next generation's start commits a revoked generation's checkpoint.
  P1 catches it.
- ``revoke_keeps_cursor``: a revocation (``events.fold``'s
  ``CheckpointRevoked`` change) leaves the data cursor where it was, so the
  cursor names a checkpoint that is no longer committed. P3 catches it.
- ``stale_accepted``: the fold's fence (``events.fold._fenced``) forgets the
  generation: a report of a revoked generation is accepted. P1.
- ``cancel_stops_first``: a cancel (``controller.inputs._cancel``) appends its
  stop commands before ``RunCancelled``. P6.
- ``restart_keeps_old``: a failure (``controller.run_decide._failed``)
  decides the restart without stopping the failed generation. P8.
- ``cursor_before_commit``: a commit (``controller.checkpoints.commit_events``)
  appends ``CursorAdvanced`` before its ``ManifestCommitted``; the fold refuses
  it, so the cursor never moves. F (and C).
- ``gang_short``: admission (``controller.admission.place``, as rule 2 of
  ``controller.run_decide`` calls it) places one member fewer than the gang.
  G.
- ``shards_any_generation``: a proposal's completeness
  (``controller.checkpoints.missing_shards``) counts shard reports of any
  generation for its step. S.
- ``recovery_as_idle``: the ETTR query (``queries/ettr.sql``, as
  ``queries.runner`` reads it) files recovery as idle. E, part by part.

Two more plant bugs in silent-data-corruption handling, which the simulator
has since it grew corruption:

- ``replay_in_place``: the restart that replays a suspicion
  (``controller.run_decide._replay_members``) keeps every rank where it was,
  so a faulty node recomputes its own rank's wrong state again and the
  verdict cannot blame it. Z.
- ``verdict_spares_node``: a ``node_fault`` verdict
  (``controller.inputs._replayed``) quarantines nobody. Z.

And one in how an exit at start is judged, since the world's nodes come back
with a new disk:

- ``restart_as_job``: rule 4 of the run's decision forgets that a member's
  node restarted under the generation
  (``controller.run_decide._restarted_under``), so one exit code on every
  rank, a lost node's doing, fails the run as the job's own error. J.

And one in the automatic checkpoint interval, since the world has it:

- ``interval_across_restart``: the interval's step time
  (``controller.checkpoints.interval_decision``) is measured from a staging
  of an earlier generation, across the restart's downtime, so the interval
  collapses to one step. I. (This was the real code until the simulator
  found it.)

``python -m proof.sim --plant NAME`` runs the simulator with one planted.

Tested in tests/proof/test_sim.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any

from controller import admission, checkpoints, inputs
from controller.emitter import Emitter
from controller.model import Tracked
from events import fold
from events.model import (
    CancelRequested,
    CheckpointRevoked,
    CursorAdvanced,
    Event,
    GroupStopCommanded,
    ManifestProposed,
)
from events.state import RunState
from proof.swap import patched
from queries import runner


@contextmanager
def propose_after_restart() -> Iterator[None]:
    rule = inputs.RULES[ManifestProposed]
    act = rule.act
    assert act is not None

    def forgetful(em: Emitter, event: Event, before: Tracked | None) -> None:
        if before is not None and before.state.awaiting_generation:
            before = replace(before, state=replace(before.state, awaiting_generation=False))
        act(em, event, before)

    table = dict(inputs.RULES)
    table[ManifestProposed] = replace(rule, act=forgetful)
    saved, inputs.RULES = inputs.RULES, table
    try:
        yield
    finally:
        inputs.RULES = saved


@contextmanager
def revoke_keeps_cursor() -> Iterator[None]:
    advance = fold.advance

    def sticky(state: RunState, e: Event) -> RunState:
        new = advance(state, e)
        return replace(new, cursor=state.cursor) if isinstance(e, CheckpointRevoked) else new

    fold.advance = sticky
    try:
        yield
    finally:
        fold.advance = advance


@contextmanager
def _swapped(module: Any, name: str, new: object) -> Iterator[None]:
    """``module.name`` is ``new`` inside the block (callers look it up at call time)."""
    saved = getattr(module, name)
    setattr(module, name, new)
    try:
        yield
    finally:
        setattr(module, name, saved)


def stale_accepted() -> AbstractContextManager[None]:
    return patched("events/fold.py", "_fenced",
                           "if e.generation != state.generation:", "if False:")


@contextmanager
def cancel_stops_first() -> Iterator[None]:
    rule = inputs.RULES[CancelRequested]
    act = rule.act
    assert act is not None

    def hasty(em: Emitter, event: Event, before: Tracked | None) -> None:
        start = len(em.out)
        act(em, event, before)
        mine = em.out[start:]
        stops = [o for o in mine if isinstance(o[1], GroupStopCommanded)]
        em.out[start:] = stops + [o for o in mine if o not in stops]

    with _swapped(inputs, "RULES", {**inputs.RULES, CancelRequested: replace(rule, act=hasty)}):
        yield


def restart_keeps_old() -> AbstractContextManager[None]:
    return patched("controller/run_decide.py", "_failed",
                           "Classify(failure, decision),\n", "Classify(failure, decision)]\n#")


def cursor_before_commit() -> AbstractContextManager[None]:
    commit = checkpoints.commit_events

    def cursor_first(e: ManifestProposed, header_for: checkpoints.HeaderFor) -> list[Event]:
        out = commit(e, header_for)
        return sorted(out, key=lambda x: not isinstance(x, CursorAdvanced))
    return _swapped(checkpoints, "commit_events", cursor_first)


def gang_short() -> AbstractContextManager[None]:
    place = admission.place

    def short(*args: Any, **kwargs: Any) -> admission.Placement | admission.Refusal:
        placed = place(*args, **kwargs)
        if isinstance(placed, admission.Placement) and len(placed.members) > 1:
            return replace(placed, members=placed.members[:-1])
        return placed
    return _swapped(admission, "place", short)


def shards_any_generation() -> AbstractContextManager[None]:
    def any_generation(state: RunState, shards: checkpoints.Shards,
                       e: ManifestProposed) -> list[str]:
        reported = {lid for (_, step), lids in shards.items() if step == e.step for lid in lids}
        return sorted(m.logical_id for m in state.members if m.logical_id not in reported)
    return _swapped(checkpoints, "missing_shards", any_generation)


def recovery_as_idle() -> AbstractContextManager[None]:
    text = runner.sql_text

    def filed_as_idle(name: str) -> str:
        sql = text(name)
        return sql.replace("SELECT 'recovery', 2,", "SELECT 'idle', 2,") if name == "ettr" \
            else sql
    return _swapped(runner, "sql_text", filed_as_idle)


def replay_in_place() -> AbstractContextManager[None]:
    return patched("controller/run_decide.py", "_replay_members",
                   "return sdc_verdict.replay_members(members, state.suspicion)", "return None")


def verdict_spares_node() -> AbstractContextManager[None]:
    return patched("controller/inputs.py", "_replayed",
                   "if v.verdict != sdc_verdict.NODE_FAULT:", "if True:")


def restart_as_job() -> AbstractContextManager[None]:
    return patched("controller/run_decide.py", "_restarted_under",
                   "start = state.generation_started_at", "return False")


def interval_across_restart() -> AbstractContextManager[None]:
    return patched("controller/checkpoints.py", "interval_decision",
                   "previous.generation != e.generation or ", "")


PLANTS: dict[str, Callable[[], AbstractContextManager[None]]] = {
    "propose_after_restart": propose_after_restart,
    "revoke_keeps_cursor": revoke_keeps_cursor,
    "stale_accepted": stale_accepted,
    "cancel_stops_first": cancel_stops_first,
    "restart_keeps_old": restart_keeps_old,
    "cursor_before_commit": cursor_before_commit,
    "gang_short": gang_short,
    "shards_any_generation": shards_any_generation,
    "recovery_as_idle": recovery_as_idle,
    "replay_in_place": replay_in_place,
    "verdict_spares_node": verdict_spares_node,
    "restart_as_job": restart_as_job,
    "interval_across_restart": interval_across_restart,
}
# The property each plant must break.
BREAKS = {"propose_after_restart": "P1", "revoke_keeps_cursor": "P3", "stale_accepted": "P1",
          "cancel_stops_first": "P6", "restart_keeps_old": "P8", "cursor_before_commit": "F",
          "gang_short": "G", "shards_any_generation": "S", "recovery_as_idle": "E",
          "replay_in_place": "Z", "verdict_spares_node": "Z", "restart_as_job": "J",
          "interval_across_restart": "I"}
