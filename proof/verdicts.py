"""The controller's verdicts on a generation, held to what it read and what the world knows.

The judgements of ``proof.truth`` that concern a failure's verdict, each a
function of a :class:`Reading` (what the controller has read, the facts
appended so far, and the simulated world; ``proof.truth.Truth`` is one):

- :func:`hang_is_true` and :func:`stall_is_true` (H): a hang after its
  timeout and, once another member's exit is read, after the exit grace; a
  stall with no exit read and no progress for the stall timeout;
- :func:`job_is_true` (J): the job's own error exactly when the world's job
  failed;
- :func:`joined` (M) and :func:`success_is_true` (O): a confirmation once
  every member is heard from, a success once every exit 0 is read;
- :func:`suspicion_awaited` (Z's wait);
- :func:`classified`: every judgement a ``FailureClassified`` calls for.

Tested in tests/proof/test_truth.py and tests/proof/test_truth_verdicts.py.
"""

from __future__ import annotations

from typing import Protocol

from controller.liveness import EXIT_GRACE_MS
from controller.policy import JOB, NO_HEARTBEAT, NO_PROGRESS
from controller.run_decide import START_EXIT_WAIT_MS
from controller.runplan import RunPlan
from events.model import (
    CorruptionSuspected,
    FailureClassified,
    Member,
    MembershipConfirmed,
    StepReplayed,
)
from proof.props import Violation
from proof.world import World


class Reading(Protocol):
    """What a verdict is judged by (``proof.truth.Truth`` keeps it, read by read)."""

    plan: RunPlan
    world: World
    members: dict[int, tuple[Member, ...]]  # by generation
    started: dict[int, int]  # gen -> GenerationStarted at
    read_steps: dict[int, int]  # gen -> highest step read
    heard: dict[tuple[int, str], int]  # newest beat read
    codes: dict[tuple[int, str], int | None]  # exits read
    first_exit: dict[int, int]  # gen -> its first exit's time
    refused: set[int]  # generations with a launch error read
    registered: dict[str, int]  # node -> its agent's registration, read at
    progress: dict[int, int]  # gen -> its newest progress fact
    sdc: dict[str, CorruptionSuspected | StepReplayed]  # suspicions and replays read
    since: int  # when the controller last began listening


def classified(t: Reading, f: FailureClassified) -> None:
    """Hold ``f`` to H, J and Z's wait."""
    suspicion_awaited(t, f)
    hang_is_true(t, f)
    if f.signature == NO_PROGRESS:
        stall_is_true(t, f)
    job_is_true(t, f)


def timeout(t: Reading, gen: int, lid: str) -> tuple[int, int]:
    """When a member's silence counts from, and its timeout."""
    heard = t.heard.get((gen, lid))
    since = max(heard or 0, t.started.get(gen, 0))
    return since, (t.plan.heartbeat_timeout_ms if heard is not None
                   else t.plan.start_timeout_ms)


def hang_is_true(t: Reading, f: FailureClassified) -> None:
    if f.signature != NO_HEARTBEAT or f.logical_id is None:
        return
    since, limit = timeout(t, f.generation, f.logical_id)
    now = f.header.occurred_at
    read = (f.generation, f.logical_id) in t.codes
    if read or now - since < limit:
        raise Violation("H", f"{f.logical_id} of generation {f.generation} called hung at "
                             f"{now}: heard from at {since} ({now - since} ms before, the "
                             f"timeout {limit} ms), its exit {'read' if read else 'not read'}")
    # Exit beats timeout: after another member's exit, a silent one has the grace.
    first = t.first_exit.get(f.generation)
    waited = max(max(since, t.since) + limit, first or 0)
    if first is not None and now - waited <= EXIT_GRACE_MS:
        raise Violation("H", f"{f.logical_id} of generation {f.generation} called hung at "
                             f"{now}, {now - waited} ms after its timeout and the first "
                             f"exit at {first}: inside the {EXIT_GRACE_MS} ms exit grace")


def stall_is_true(t: Reading, f: FailureClassified) -> None:
    g, now = f.generation, f.header.occurred_at
    last = max(t.progress.get(g, 0), t.since)
    exits = sorted(lid for gen, lid in t.codes if gen == g)
    if exits or now - last <= t.plan.stall_timeout_ms:
        raise Violation("H", f"generation {g} called stalled at {now}: its last progress "
                             f"at {last} ({now - last} ms before, the stall timeout "
                             f"{t.plan.stall_timeout_ms} ms), exits read: {exits}")


def suspicion_awaited(t: Reading, f: FailureClassified) -> None:
    g, now = f.generation, f.header.occurred_at
    sent, first = t.world.suspicions.get(g), t.first_exit.get(g)
    read = any(isinstance(x, CorruptionSuspected) and x.generation == g
               for x in t.sdc.values())
    exits = sum(1 for gen, _ in t.codes if gen == g)
    if (f.failure_class == "silent_corruption" and sent is not None and not read
            and first is not None and exits < len(t.members.get(g, ()))
            and now - first < START_EXIT_WAIT_MS):
        raise Violation("Z", f"generation {g} failed from an exit 87 at {now}, "
                             f"{now - first} ms after its first exit, with its suspicion "
                             f"(sent at {sent}) not yet read")


def joined(t: Reading, e: MembershipConfirmed) -> None:
    g, members = e.generation, t.members.get(e.generation, ())
    unheard = [m.logical_id for m in members
               if (g, m.logical_id) not in t.heard and (g, m.logical_id) not in t.codes]
    if unheard or e.members_joined != len(members):
        raise Violation("M", f"generation {g} confirmed with {e.members_joined} joined; "
                             f"{len(members)} members, unheard and not exited: {unheard}")


def success_is_true(t: Reading) -> None:
    g = max(t.started, default=0)
    codes = {m.logical_id: t.codes.get((g, m.logical_id), None)
             for m in t.members.get(g, ())}
    undone = [str(w.key) for w in t.world.workers if w.gen == g
              and t.world.peer(g, w.lid) is w and not w.clean]
    if not codes or set(codes.values()) != {0} or undone:
        raise Violation("O", f"the run succeeded in generation {g} with the exits read "
                             f"{codes} and workers not done: {undone}")


def job_is_true(t: Reading, f: FailureClassified) -> None:
    g = f.generation
    launched = [w for w in t.world.workers if w.gen == g]
    if f.failure_class == JOB:
        if f.signature == "job:launch" and g in t.refused:
            return
        if f.signature.startswith("job:start_exit") and any(w.broken for w in launched):
            return
        raise Violation("J", f"generation {g} failed as the job's own error "
                             f"({f.signature}: {f.detail}), and its job was not broken")
    members, started = t.members.get(g, ()), t.started.get(g, 0)
    if (launched and all(w.broken for w in launched) and g not in t.read_steps
            and {t.codes.get((g, m.logical_id), 0) for m in members} == {1}
            and t.since <= started
            and all(t.registered.get(m.node, 0) < started for m in members)):
        raise Violation("J", f"every worker of generation {g} raised at import, each "
                             f"member's exit 1 was read and no step, and the failure is "
                             f"{f.signature}, not the job's")
