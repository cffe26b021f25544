"""Which silent member of a live generation is hung: exit beats timeout. Pure.

A member is judged by its heartbeats (``HeartbeatRecorded``; before its first
one, by the start timeout) only while nothing better is known about its
process. Two things are better, and each turns the silence into a bounded wait
for the member's exit (``EXIT_GRACE_MS``), since an exit the agent observed is
the fact about a process and a timeout may only judge one still alive:

- another member of the generation has exited (any code): the group is ending,
  member by member, and this one may be tearing down;
- the member's own last heartbeat said its session closed
  (``HeartbeatRecorded.closing``): what follows is its teardown.

A member still silent and unreported once the grace is over is a live process
that stopped heartbeating (its agent reports an exit within a poll of it), which
is what a hang is. The silences count from the generation's start or from when
this controller began listening, whichever is later, so a restarted controller
never calls a member hung for the time it was not there to hear it.

Tested in tests/controller/test_run_decide.py and tests/controller/test_reconcile.py.
"""

from __future__ import annotations

from controller import policy
from controller.exits import Evidence, ExitNote
from controller.runplan import RunPlan
from events.shelf import Shelf
from events.state import RunState

# Exit beats timeout: once a member of the generation has exited, how long a silent
# member (past its heartbeat or start timeout) may take to exit too before it is
# called a hang. A group ends member by member, and a member tearing down (its
# process group, CUDA, the interpreter) may be silent for a while after its last
# heartbeat; its agent reports its exit within a poll (0.2 s) of the process ending,
# so a member still unreported after the grace is a live process that stopped
# heartbeating (or its agent died with it). At least START_EXIT_WAIT_MS, so an exit
# waiting for the others at start is never outvoted by a silence.
EXIT_GRACE_MS = 30_000


def silent(state: RunState, evidence: Evidence, plan: RunPlan, now: int,
           since: int) -> policy.Failure | None:
    """The first member hung by its silence, or None."""
    grace_from = max(state.generation_started_at, since)
    if _all_fresh(state, evidence, plan, now, grace_from):
        return None
    first_exit = _first_exit(evidence)
    for m in state.members:
        if m.logical_id in state.exits:
            continue
        seen = state.heartbeats.get(m.logical_id)
        last = max(seen or 0, grace_from)
        limit = plan.heartbeat_timeout_ms if seen is not None else plan.start_timeout_ms
        if now - last <= limit:
            continue
        closing = m.logical_id in evidence.closing
        if first_exit is None and not closing:
            return policy.no_heartbeat(m.logical_id, m.node, now - last)
        waited_from = last + limit if first_exit is None else max(last + limit, first_exit.at)
        if now - waited_from > EXIT_GRACE_MS:
            why = (_after_exit(first_exit, now) if first_exit is not None else
                   f"its session closed; no exit followed within the {EXIT_GRACE_MS} ms grace")
            return policy.no_heartbeat(m.logical_id, m.node, now - last, why)
    return None


def _all_fresh(state: RunState, evidence: Evidence, plan: RunPlan, now: int,
               grace_from: int) -> bool:
    """Whether no member can be silent: none exited or closing, the oldest heartbeat
    within the timeout, and every member heard from or the generation still inside its
    start timeout. The tick asks it of a healthy run every 0.25 s; one pass over the
    heartbeats' values, not a lookup per member (0.5 s a tick at 10^5 ranks, measured
    by bench/scale.py; and while a generation of 10^5 starts, a third of a core)."""
    if state.exits or evidence.closing:
        return False
    if len(state.heartbeats) < len(state.members) and \
            now - grace_from > plan.start_timeout_ms:
        return False  # an unheard member may be past its start timeout
    if not state.heartbeats:
        return True
    oldest = min(Shelf.of(state.heartbeats).each_value())
    return now - max(oldest, grace_from) <= plan.heartbeat_timeout_ms


def _first_exit(evidence: Evidence) -> ExitNote | None:
    """The generation's first exit (the earliest report; a tie goes to the lower id)."""
    if not evidence.exits:
        return None
    return min(evidence.exits.values(), key=lambda n: (n.at, n.logical_id))


def _after_exit(first: ExitNote, now: int) -> str:
    how = f"signal {first.signal}" if first.signal is not None else f"code {first.exit_code}"
    return (f"{first.logical_id} exited with {how} {now - first.at} ms earlier; its exit"
            f" was not followed by this member's within the {EXIT_GRACE_MS} ms grace")
