"""A run's lifecycle decisions, as a pure function of what the controller knows of it.

``decide(run, world) -> tuple[Action, ...]``: level-triggered, over the run's
whole state, with time from ``world.now``. The shell (``controller.reconcile``)
turns each action into records with deterministic ids and appends and folds
them in order; the alert rules (``controller.alerts``) then judge the state
they reached.

Rules for a run that has not ended, in this order (the first that applies decides):

1. a spec the controller could not read: the run fails (``Finish``);
2. Submitted or Queued: paused by an alert's ``pause`` action, nothing until
   an operator resumes it; inside its retry backoff, it is queued with that
   reason; while a gate its spec requires has not passed for its digest
   (``controller.gates``: the evidence every controller reads), queued with a
   reason naming each missing or failed gate and the command that earns it;
   without room for the whole group on live nodes, queued with the
   refusal, which names every live node that is quarantined, cordoned or
   drained and the command that frees it (``Queue``: a reason already
   recorded is not recorded again);
   otherwise admitted (``Admit``, which takes its slots for the rest of the
   tick) and its first generation started (``Start``); a requeued fixed run
   replaying a corruption suspicion has its suspect ranks moved off the nodes
   they deviated on, as in rule 3 (``sdc_verdict.replay_members``);
3. Recovering and awaiting its next generation: nothing until the backoff is
   over; then back to the queue if a node of its placement is no longer live
   or is quarantined or drained (a plain cordon keeps the runs placed there),
   else the next generation starts on the same members (``Start``), except
   that a fixed data-parallel run replaying a corruption suspicion swaps a
   suspect rank's node with another rank's (``sdc_verdict.replay_members``);
4. a live generation: on a failure (a member exited non-zero or by a signal,
   judged with its evidence by ``controller.policy``, except that a non-zero
   exit before the generation's first step waits up to ``START_EXIT_WAIT_MS``
   for the other members, to tell a failure on every rank from one rank's
   (never the job's when a member's node may have restarted under the
   generation: its agent registered since it started, or this controller
   began after it did), and
   an exit 87 waits as long for the generation's corruption suspicion, which
   the coordinator reports before every rank exits;
   a member silent past its heartbeat timeout, or its start timeout before
   its first heartbeat, except that once any member of the generation has
   exited (any code) a silent member is a hang only ``liveness.EXIT_GRACE_MS`` after
   the later of its timeout and that first exit, and a member whose session
   said it closed (``HeartbeatRecorded.closing``: the rest is teardown) only
   ``EXIT_GRACE_MS`` after its timeout: an exit the agent observed is the
   fact about its process, and the group's other exits decide when they come
   within the grace; Running with no step past the stall timeout), the
   failure is classified with the retry policy's verdict (``Classify``), the
   generation stopped (``Stop``), the failure's node quarantined at its
   ``NODE_QUARANTINE_AFTER``-th failure that the evidence attributes to it
   (``policy.counts_against_node``; ``Quarantine``; never for a run whose
   spec injects faults, ``policy.injected``, nor for an exit 87 while a
   corruption suspicion is open, ``policy.suspected``), and the run failed if
   the policy escalates (``Finish``); otherwise, once every member has joined
   (a heartbeat or an exit), it is Running (``Confirm``), and once every member
   has exited 0 it has succeeded (``Finish``).

An elastic run (``RunPlan.elastic``) differs in three places, each decided
by ``controller.elastic``: rule 2 admits it at the largest allowed size the
live nodes hold (at least ``min``); rule 3 starts its next generation with the
members whose nodes it keeps plus newcomers, at the largest allowed size
(``shrink``, ``restart`` or ``grow``), queueing it only below ``min``; and, as
the last part of rule 4, a Running generation below ``max`` that just
committed a checkpoint grows when the nodes hold more replicas (``Stop``,
then ``Start`` with reason ``grow``). Fixed runs never reach those branches.

A failure rule 4 finds is first judged by ``controller.lost``: when a node of
the generation disappeared (its agent and its members silent past
``world.silence_ms``: ``lost.LOST_AFTER_MS`` unless the controller's
``NodePolicy`` says longer), the failure is that node's, recorded first (``Lost``,
the fact ``NodeLost``) and classified as ``infrastructure:node_lost`` on it,
the survivors' exits named as its consequences; an exit waits for a node not
heard from since it, at most ``world.silence_ms`` plus ``lost.REPORTED_AFTER_MS``.

An Admitted run starts its generation in the same step as its admission, so
no rule waits for one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from controller import admission, elastic, gates, liveness, lost, policy, sdc_verdict
from controller.exits import Evidence
from controller.gates import EMPTY as NO_GATES
from controller.gates import GateBook
from controller.inventory import Inventory, blocked_note
from controller.lost import Lost
from controller.model import Tracked
from controller.runplan import RunPlan
from events.model import Member
from events.state import RunState, Status

NODE_QUARANTINE_AFTER = 3  # failures attributed to one node, across runs
NODE_TIMEOUT_MS = 15_000
# How long a member's non-zero exit before the first step waits for the others
# to exit too (the same code on every rank is the job's own error).
START_EXIT_WAIT_MS = 10_000


class World(NamedTuple):  # one per run per tick: a tuple is the cheapest immutable value
    """What a decision about one run reads beyond the run itself."""

    now: int
    since: int  # when this controller began listening: silences count from then
    inventory: Inventory
    node_failures: Mapping[str, int]
    # Slots held per node by live generations, asked only by an admission.
    used: Callable[[], Mapping[str, int]]
    # The gate evidence every controller has read (controller.gates), asked by rule 2.
    gates: GateBook = NO_GATES
    # A node this long silent (its agent and its members) is gone: NodePolicy.silence_ms;
    # one this long unheard takes no new work (placement_ms below).
    silence_ms: int = elastic.FRESH_MS
    timeout_ms: int = NODE_TIMEOUT_MS


def placement_ms(silence_ms: int) -> int:
    """How long an unheard node stays placeable: ``NODE_TIMEOUT_MS``, or two and a half
    silences where the controller waits longer for a node (so at least seven of its
    agent's heartbeats: a slow agent is never taken for a gone one)."""
    return max(NODE_TIMEOUT_MS, silence_ms * 5 // 2)


@dataclass(frozen=True, slots=True)
class Queue:
    reason: str


@dataclass(frozen=True, slots=True)
class Admit:
    members: tuple[Member, ...]
    generation: int  # the one it is admitted to start


@dataclass(frozen=True, slots=True)
class Start:
    members: tuple[Member, ...]
    generation: int
    reason: str  # "admitted", "restart", "shrink" or "grow"
    # The widest failure domain the previous generation lost: "host" when a member's
    # node is gone (restore must not read that host's tiers), else "process".
    domain: str = "process"


@dataclass(frozen=True, slots=True)
class Classify:
    failure: policy.Failure
    decision: policy.Decision


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the run's current generation on every node it runs on."""

    reason: str


@dataclass(frozen=True, slots=True)
class Quarantine:
    node: str
    failures: int  # attributed to the node so far, this one included


@dataclass(frozen=True, slots=True)
class Confirm:
    joined: int


@dataclass(frozen=True, slots=True)
class Finish:
    outcome: str  # "succeeded" or "failed"
    reason: str


# Lost (controller.lost): a node of the live generation disappeared; recorded as NodeLost.
Action = Queue | Admit | Start | Lost | Classify | Stop | Quarantine | Confirm | Finish


def decide(run: Tracked, world: World) -> tuple[Action, ...]:
    state, plan = run.state, run.plan
    if state.status.terminal:
        return ()
    if plan.invalid:
        return (Finish("failed", f"invalid spec: {plan.invalid}"),)
    if state.status in (Status.SUBMITTED, Status.QUEUED):
        return _admission(state, plan, world)
    if state.status == Status.RECOVERING and state.awaiting_generation:
        return _restart(state, plan, world, {k: n.at for k, n in run.evidence.exits.items()})
    if state.status.active:
        return _watch(run, plan, world)
    return ()


def queue_tag(reason: str) -> str:
    """Part of a RunQueued's id: the same run may be queued again for another reason."""
    return hashlib.sha256(reason.encode()).hexdigest()[:8]


def _queued(state: RunState, reason: str) -> tuple[Action, ...]:
    if state.status == Status.QUEUED and state.queue_reason == reason:
        return ()
    return (Queue(reason),)


def _admission(state: RunState, plan: RunPlan, world: World) -> tuple[Action, ...]:
    if state.paused:  # an alert paused it: queued (the fold says why) until resumed
        return ()
    if world.now < state.retry_not_before:
        return _queued(state, f"backoff until {state.retry_not_before} ms")
    shut = gates.blocked(world.gates, plan.gates, state.spec_digest) if plan.gates else None
    if shut is not None:
        return _queued(state, shut)
    if plan.elastic is not None:
        return _admit_elastic(state, plan, plan.elastic, world)
    live = world.inventory.live(world.now, world.timeout_ms)
    placed = admission.place(plan.world_size, plan.slots_per_node, plan.domain, live,
                             world.used())
    if isinstance(placed, admission.Refusal):
        note = blocked_note(world.inventory, world.now, world.timeout_ms)
        if note and not live:
            return _queued(state, f"no node may take work: {note}")
        return _queued(state, f"{placed.reason}; {note}" if note else placed.reason)
    generation = state.generation + 1
    # A requeued run replaying a suspicion is placed anew: keep its suspect ranks off the
    # nodes they deviated on, as a restart does, or the replay cannot blame a node.
    moved = _replay_members(placed.members, state, plan)
    if moved is not None:
        return (Admit(moved, generation), Start(moved, generation, "admitted", "host"))
    return (Admit(placed.members, generation), Start(placed.members, generation, "admitted"))


def _where(plan: RunPlan, world: World, used: Mapping[str, int]) -> elastic.Where:
    """Where an elastic run may place members: nodes heard from in ``world.silence_ms``."""
    live = world.inventory.live(world.now, world.silence_ms)
    return elastic.Where(live, used, plan.slots_per_node, plan.domain)


def _admit_elastic(state: RunState, plan: RunPlan, e: elastic.Elastic,
                   world: World) -> tuple[Action, ...]:
    where = _where(plan, world, world.used())
    sized = elastic.admit(e, where)
    if sized is None:
        capacity = sum(n.slots for n in world.inventory.nodes.values())
        reason = elastic.refusal(e, where, capacity)
        note = blocked_note(world.inventory, world.now, world.timeout_ms)
        return _queued(state, f"{reason}; {note}" if note else reason)
    generation = state.generation + 1
    return (Admit(sized.members, generation), Start(sized.members, generation, "admitted"))


def _restart(state: RunState, plan: RunPlan, world: World,
             exited: Mapping[str, int]) -> tuple[Action, ...]:
    if world.now < state.retry_not_before:
        return ()
    keeps = world.inventory.keeps(world.now, world.timeout_ms)
    lost = sorted({m.node for m in state.members} - keeps)
    if plan.elastic is not None:
        where = _where(plan, world, elastic.others(world.used(), state.members))
        fresh = world.inventory.keeps(world.now, world.silence_ms)
        seen = {n.name: n.last_seen for n in world.inventory.nodes.values()}
        if elastic.undecided(state.members, exited, state.heartbeats, seen, world.now,
                             world.silence_ms):
            return ()  # requeue: within silence_ms each node reports or falls silent
        resized = elastic.resize(plan.elastic, state.members, fresh, where)
        if resized is not None:
            sized, reason = resized
            gone = {m.node for m in state.members} - fresh
            return (Start(sized.members, state.generation + 1, reason,
                          "host" if gone else "process"),)
    if lost:
        note = blocked_note(world.inventory, world.now, world.timeout_ms)
        why = f"placement lost: {', '.join(lost)} not available"
        if plan.elastic is not None:
            why += f", and not even membership.min {plan.elastic.min} replicas fit"
        return _queued(state, f"{why}; {note}" if note else why)
    moved = _replay_members(state.members, state, plan)
    if moved is not None:
        # Members changed nodes: their node-local checkpoint copies stay behind.
        return (Start(moved, state.generation + 1, "restart", "host"),)
    return (Start(state.members, state.generation + 1, "restart"),)


def _replay_members(members: tuple[Member, ...], state: RunState,
                    plan: RunPlan) -> tuple[Member, ...] | None:
    """A fixed data-parallel run's replay placement of ``members``, when its checkpoints
    outlive a host (the moved ranks restore from a tier every node reaches)."""
    ckpt = plan.checkpoint
    if state.suspicion is None or plan.ranks_per_replica != 1 or (
            ckpt is not None and not any(t.survives("host") for t in ckpt.storage_tiers())):
        return None
    return sdc_verdict.replay_members(members, state.suspicion)


def _grow(state: RunState, plan: RunPlan, world: World) -> tuple[Action, ...]:
    """Rule 4's last part: an elastic Running generation grows at a checkpoint boundary."""
    e, ckpt = plan.elastic, state.checkpoint
    if (e is None or state.status != Status.RUNNING or state.exits or ckpt is None
            or ckpt.generation != state.generation
            or world.now - ckpt.committed_at > elastic.GROW_WINDOW_MS):
        return ()
    bigger = elastic.grow(e, state.members,
                          _where(plan, world, elastic.others(world.used(), state.members)))
    if bigger is None:
        return ()
    why = f"grow to {bigger.replicas} replicas at checkpoint step {ckpt.step}"
    return (Stop(why), Start(bigger.members, state.generation + 1, "grow"))


def _watch(run: Tracked, plan: RunPlan, world: World) -> tuple[Action, ...]:
    state = run.state
    failure = _failure(run, plan, world)
    if failure is not None:
        found = lost.judge(state.members, state.exits, state.heartbeats, run.evidence,
                           world.inventory, failure, world.now, world.since,
                           world.silence_ms)
        if found is lost.WAIT:
            return ()  # an exit, while a node of the generation may be gone (controller.lost)
        if isinstance(found, lost.Found):
            return (found.lost, *_failed(state, plan, _marked(found.failure, plan), world))
        if state.suspicion is not None and failure.failure_class == "silent_corruption":
            failure = policy.suspected(failure)
        return _failed(state, plan, _marked(failure, plan), world)
    exits, members = state.exits, state.members
    # Each scan of the members below runs only when its answer can be yes: a healthy
    # running run of 10^5 ranks costs a tick nothing per member (bench/scale.py).
    confirm = (state.status != Status.RUNNING
               and len(state.heartbeats) + len(exits) >= len(members)  # else someone unheard
               and all(m.logical_id in state.heartbeats or m.logical_id in exits
                       for m in members))
    actions: list[Action] = [Confirm(len(members))] if confirm else []
    running = state.status == Status.RUNNING or confirm
    if (running and members and len(exits) == len(members)
            and all(exits.get(m.logical_id) == 0 for m in members)):
        actions.append(Finish("succeeded", "every member exited 0"))
    return tuple(actions) or _grow(state, plan, world)


def _marked(failure: policy.Failure, plan: RunPlan) -> policy.Failure:
    return policy.injected(failure) if plan.injects_faults else failure


def _failure(run: Tracked, plan: RunPlan, world: World) -> policy.Failure | None:
    state = run.state
    failed = [m for m in state.members if state.exits.get(m.logical_id, 0) != 0
              ] if any(code != 0 for code in state.exits.values()) else []
    if failed:
        found = _exit_failure(state, run.evidence, failed[0], world)
        if found is not None:
            return found
    hang = liveness.silent(state, run.evidence, plan, world.now, world.since)
    if hang is not None:
        return hang
    if state.status == Status.RUNNING and not state.exits:
        last = max(state.last_progress_at, world.since)
        if world.now - last > plan.stall_timeout_ms:
            return policy.no_progress(state.step, world.now - last)
    return None


def _exit_failure(state: RunState, evidence: Evidence, member: Member,
                  world: World) -> policy.Failure | None:
    """The failure a member's non-zero exit shows; None while waiting for the others."""
    code = state.exits[member.logical_id]
    signal = -code if code is not None and code < 0 else None
    failure = policy.from_exit(member.logical_id, member.node, None if signal else code, signal,
                               evidence.exits.get(member.logical_id))
    if failure.failure_class == "silent_corruption" and _awaits_suspicion(state, evidence, world):
        return None
    if failure.failure_class != "worker_crash" or signal is not None or evidence.stepped:
        return failure
    notes = [evidence.exits[m.logical_id] for m in state.members
             if m.logical_id in evidence.exits]
    at_start = None if _restarted_under(state, world) else policy.at_start(
        notes, len(state.members))
    if at_start is not None:
        return at_start
    mine = evidence.exits.get(member.logical_id)
    if mine is not None and len(notes) < len(state.members):
        first_at = min(n.at for n in notes)
        if world.now - first_at < START_EXIT_WAIT_MS:
            return None  # the others may be failing the same way right now
    return failure


def _restarted_under(state: RunState, world: World) -> bool:
    """Whether a member's node may have restarted under this generation: its agent
    registered since the generation started, or this controller began after that and
    never saw the registrations before it. A rank whose node restarted is gone, and
    each peer exits as its collective fails, as does the rank itself when its agent
    launched it again: one code on every rank, which says nothing about the job."""
    start = state.generation_started_at
    if world.since > start:
        return True
    nodes = world.inventory.nodes
    return any((n := nodes.get(m.node)) is not None and n.registered_at >= start
               for m in state.members)


def _awaits_suspicion(state: RunState, evidence: Evidence, world: World) -> bool:
    """An exit 87 before its generation's ``CorruptionSuspected``: every rank exits once
    the coordinator has flushed it, so wait for every member's exit (or
    ``START_EXIT_WAIT_MS``), lest the restart decision fence the suspicion out."""
    s = state.suspicion
    if s is not None and s.generation == state.generation:
        return False
    notes = [evidence.exits[m.logical_id] for m in state.members
             if m.logical_id in evidence.exits]
    if not notes or len(notes) >= len(state.members):
        return False
    return world.now - min(n.at for n in notes) < START_EXIT_WAIT_MS


def _failed(state: RunState, plan: RunPlan, failure: policy.Failure,
            world: World) -> tuple[Action, ...]:
    decision = policy.decide(state, failure, plan.retry_for(failure.failure_class))
    actions: list[Action] = [Classify(failure, decision),
                             Stop(f"{failure.signature}: {decision.action}")]
    if failure.node and policy.counts_against_node(failure.failure_class, failure.signature):
        count = world.node_failures.get(failure.node, 0) + 1
        node = world.inventory.nodes.get(failure.node)
        if count >= NODE_QUARANTINE_AFTER and (node is None or not node.quarantined):
            actions.append(Quarantine(failure.node, count))
    if decision.action == "escalate":
        actions.append(Finish("failed", decision.reason))
    return tuple(actions)
