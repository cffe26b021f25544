"""The controller's functional core: ``handle`` inputs and ``tick`` the clock. Pure.

``Model`` is everything the controller knows: each run's folded state, the
plan taken from its spec, the inventory, what the alert rules watch (the rules,
in ``controller.alerts``, run after inputs and ticks), and when this controller
started (missing heartbeats are only counted from then, so a restarted
controller does not fail healthy runs it has not heard from yet). Both functions
return the new model and the records to append, as ``(topic, event)`` pairs with
deterministic event ids; the model already includes their effect, so a caller
that appends them in one Kafka transaction keeps model and log in step. On a
restart, folding ``runledger.runs`` rebuilds the same model and the level-
triggered ``tick`` finds nothing left to redo.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from controller import admission, alerts, checkpoints, policy
from controller.inventory import EMPTY, Inventory, observe
from controller.runplan import RunPlan
from events import workerenv
from events.fold import UNKNOWN_RUN, apply
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    CancelRequested,
    CheckpointStaged,
    CheckpointVerificationFailed,
    Event,
    FailureClassified,
    GenerationStarted,
    GroupStartCommanded,
    GroupStopCommanded,
    Header,
    HeartbeatRecorded,
    ManifestCommitted,
    ManifestProposed,
    Member,
    MembershipConfirmed,
    NodeQuarantined,
    RunAdmitted,
    RunCancelled,
    RunFinished,
    RunQueued,
    RunSubmitted,
    ShardWritten,
    StepTimesRecorded,
    WriteRejected,
    node_key,
)
from events.state import RunState, Status
from events.topics import COMMANDS, RUNS

PRODUCER = "controller"
NODE_QUARANTINE_AFTER = 3  # failures attributed to one node, across runs
NODE_TIMEOUT_MS = 15_000

Out = tuple[str, Event]


@dataclass(frozen=True, slots=True)
class Model:
    since: int
    runs: dict[str, RunState] = field(default_factory=dict)
    plans: dict[str, RunPlan] = field(default_factory=dict)
    inventory: Inventory = EMPTY
    node_failures: dict[str, int] = field(default_factory=dict)
    # Who reported ShardWritten per (run, generation, step) not yet committed.
    shards: dict[checkpoints.ShardKey, frozenset[str]] = field(default_factory=dict)
    # The last CheckpointStaged per run, for the auto interval's step time.
    staged: dict[str, checkpoints.Staged] = field(default_factory=dict)
    # What the alert rules watch per run (controller.alerts).
    watch: dict[str, alerts.Watch] = field(default_factory=dict)


PlanOf = Callable[[RunSubmitted], RunPlan]


def absorb(model: Model, event: Event, plan_of: PlanOf) -> Model:
    """Fold one record of ``runledger.runs`` (or one of our own outputs) into the model."""
    if isinstance(event, NodeQuarantined):
        return replace(model, inventory=observe(model.inventory, event))
    runs, plans, node_failures = model.runs, model.plans, model.node_failures
    transition = apply(before := runs.get(event.run_id), event)
    if transition.state is None or not transition.verdict.accepted:
        return model
    if isinstance(event, RunSubmitted) and event.run_id not in plans:
        plans = {**plans, event.run_id: plan_of(event)}
    if isinstance(event, FailureClassified) and event.node:
        node_failures = {**node_failures, event.node: node_failures.get(event.node, 0) + 1}
    runs = {**runs, event.run_id: transition.state}
    return _note(replace(model, runs=runs, plans=plans, node_failures=node_failures), event,
                 before)


def _note(model: Model, event: Event, before: RunState | None) -> Model:
    """The checkpoint and alert bookkeeping an accepted fact adds (live and on replay alike)."""
    model = replace(model, watch=alerts.observe_in(model.watch, event, before))
    match event:
        case ShardWritten():
            return replace(model, shards=checkpoints.track_shard(model.shards, event))
        case ManifestCommitted():
            return replace(model, shards=checkpoints.prune_shards(model.shards, event.run_id,
                                                                  event.step))
        case CheckpointStaged():
            staged = checkpoints.Staged(event.step, event.header.occurred_at, event.stall_ms)
            return replace(model, staged={**model.staged, event.run_id: staged})
    return model


class _Emitter:
    """Collects outputs and folds each into the model as it is emitted."""

    def __init__(self, model: Model, now: int, plan_of: PlanOf) -> None:
        self.model, self.now, self.plan_of = model, now, plan_of
        self.out: list[Out] = []

    def header(
        self, run_id: str, generation: int, event_id: str, cause: str | None = None
    ) -> Header:
        return Header(event_id, run_id, generation, self.now, PRODUCER, cause)

    def header_for(self, event: Event) -> checkpoints.HeaderFor:
        """Headers for facts caused by ``event``, in its run and generation."""
        return lambda event_id, cause: self.header(event.run_id, event.generation, event_id,
                                                   cause)

    def emit(self, topic: str, event: Event) -> None:
        self.out.append((topic, event))
        self.model = absorb(self.model, event, self.plan_of)

    def reject(self, event: Event, reason: str, detail: str) -> None:
        gen = self.model.runs[event.run_id].generation if event.run_id in self.model.runs else 0
        h = self.header(event.run_id, gen, f"{event.header.event_id}/WriteRejected",
                        event.header.event_id)
        self.emit(RUNS, WriteRejected(header=h, rejected_event_id=event.header.event_id,
                                      rejected_event_type=event.event_type, reason=reason,
                                      detail=detail))


def handle(model: Model, event: Event, now: int, plan_of: PlanOf) -> tuple[Model, list[Out]]:
    """React to one request or report."""
    em = _Emitter(model, now, plan_of)
    match event:
        case AgentRegistered() | AgentHeartbeatRecorded():
            em.model = replace(model, inventory=observe(model.inventory, event))
        case RunSubmitted():
            if event.run_id not in model.runs:  # a resubmitted request is the same run
                em.emit(RUNS, event)
        case CancelRequested():
            _cancel(em, event)
        case HeartbeatRecorded() | StepTimesRecorded():
            _report(em, event, copy=False)
        case ManifestProposed():
            _propose(em, event)
        case CheckpointVerificationFailed():
            if _report(em, event, copy=True):
                state = em.model.runs[event.run_id]
                revoked = checkpoints.revocation(state, event, em.header_for(event))
                if revoked is not None:
                    em.emit(RUNS, revoked)
        case CheckpointStaged():
            previous = em.model.staged.get(event.run_id)
            if _report(em, event, copy=True):
                plan = em.model.plans.get(event.run_id)
                if plan is not None and plan.auto_interval is not None:
                    change = checkpoints.interval_decision(
                        plan.auto_interval, em.model.runs[event.run_id], previous, event,
                        em.header_for(event))
                    if change is not None:
                        em.emit(RUNS, change)
        case _:
            _report(em, event, copy=True)
    if not isinstance(event, alerts.CLOCKED):
        _alerts(em, event.run_id)
    return em.model, em.out


def _alerts(em: _Emitter, run_id: str) -> None:
    """Raise and resolve the run's alerts (controller.alerts) for the state just reached."""
    state, plan = em.model.runs.get(run_id), em.model.plans.get(run_id)
    if state is not None and plan is not None:
        watch = em.model.watch.get(run_id, alerts.EMPTY)
        for fact in alerts.facts(state, plan.alerts, watch, em.now, PRODUCER, em.model.since):
            em.emit(RUNS, fact)


def _report(em: _Emitter, event: Event, copy: bool) -> bool:
    """Accepted reports are folded (and, except heartbeats, kept as facts)."""
    state = em.model.runs.get(event.run_id)
    transition = apply(state, event)
    if not transition.verdict.accepted:
        em.reject(event, transition.verdict.reason, transition.verdict.detail)
        return False
    if copy:
        # Kept as a fact; its state is the one just computed, not folded again.
        em.out.append((RUNS, event))
    if transition.state is not None:
        em.model = replace(em.model, runs={**em.model.runs, event.run_id: transition.state})
    if copy or isinstance(event, StepTimesRecorded):  # no fact, but the alerts watch them
        em.model = _note(em.model, event, state)
    return True


def _propose(em: _Emitter, event: ManifestProposed) -> None:
    state = em.model.runs.get(event.run_id)
    verdict = apply(state, event).verdict
    if not verdict.accepted:
        em.reject(event, verdict.reason, verdict.detail)
        return
    assert state is not None
    missing = checkpoints.missing_shards(state, em.model.shards, event)
    if missing:
        em.reject(event, checkpoints.INCOMPLETE_SHARDS,
                  f"no ShardWritten for step {event.step} from {', '.join(missing)}")
        return
    for fact in checkpoints.commit_events(event, em.header_for(event)):
        em.emit(RUNS, fact)


def _cancel(em: _Emitter, event: CancelRequested) -> None:
    state = em.model.runs.get(event.run_id)
    if state is None:
        em.reject(event, UNKNOWN_RUN, f"cancel of unknown run {event.run_id}")
        return
    if state.status.terminal:
        em.reject(event, "run_terminal", f"cancel after the run is {state.status.value}")
        return
    plan = em.model.plans[event.run_id]
    allowed = plan.cancel_authority | {state.principal}
    if event.principal not in allowed:
        em.reject(event, "unauthorized",
                  f"{event.principal!r} is not in the cancel authority {sorted(allowed)}")
        return
    # The fact first: it revokes the generation, so nothing the workers send
    # from now on is accepted, whatever the stop commands' fate.
    h = em.header(event.run_id, state.generation, f"{event.run_id}/RunCancelled",
                  event.header.event_id)
    em.emit(RUNS, RunCancelled(header=h, principal=event.principal, reason=event.reason))
    _stop(em, state, f"cancelled by {event.principal}: {event.reason}")


def _stop(em: _Emitter, state: RunState, reason: str) -> None:
    if state.generation == 0:
        return
    for node in sorted({m.node for m in state.members}):
        cid = f"{state.run_id}/g{state.generation}/stop/{node}"
        em.emit(COMMANDS, GroupStopCommanded(header=em.header(state.run_id, state.generation, cid),
                                             command_id=cid, node=node, reason=reason))


def tick(model: Model, now: int, plan_of: PlanOf) -> tuple[Model, list[Out]]:
    """Level-triggered reconcile of every live run against the clock."""
    em = _Emitter(model, now, plan_of)
    used: dict[str, int] | None = None  # slots held per node, computed once per tick
    for run_id in sorted(model.runs):
        state = em.model.runs[run_id]
        if state.status.terminal:
            _alerts(em, run_id)  # closes alerts still open at the end
            continue
        plan = em.model.plans[run_id]
        if plan.invalid:
            eid = f"{run_id}/RunFinished"
            em.emit(RUNS, RunFinished(header=em.header(run_id, state.generation, eid),
                                      outcome="failed", reason=f"invalid spec: {plan.invalid}"))
        elif state.status in (Status.SUBMITTED, Status.QUEUED):
            if used is None:
                used = _used_slots(em.model)
            _admit(em, state, plan, used)
        elif state.status == Status.RECOVERING and state.awaiting_generation:
            _restart(em, state, plan)
        elif state.status.active:
            _watch(em, state, plan)
        _alerts(em, run_id)
    return em.model, em.out


def _used_slots(model: Model) -> dict[str, int]:
    """Slots held per node by runs with a live (or just admitted) generation.

    Queued runs hold none, so the map serves every queued run of a tick.
    """
    used: dict[str, int] = {}
    for state in model.runs.values():
        if state.status.active or state.status == Status.ADMITTED:
            for m in state.members:
                used[m.node] = used.get(m.node, 0) + 1
    return used


def _queue(em: _Emitter, state: RunState, reason: str) -> None:
    if state.status == Status.QUEUED and state.queue_reason == reason:
        return
    tag = hashlib.sha256(reason.encode()).hexdigest()[:8]
    eid = f"{state.run_id}/g{state.generation}/f{state.failure_count}/RunQueued/{tag}"
    em.emit(RUNS, RunQueued(header=em.header(state.run_id, state.generation, eid), reason=reason))


def _admit(em: _Emitter, state: RunState, plan: RunPlan, used: dict[str, int]) -> None:
    if em.now < state.retry_not_before:
        _queue(em, state, f"backoff until {state.retry_not_before} ms")
        return
    live = em.model.inventory.live(em.now, NODE_TIMEOUT_MS)
    placed = admission.place(plan.world_size, plan.slots_per_node, plan.domain, live, used)
    if isinstance(placed, admission.Refusal):
        _queue(em, state, placed.reason)
        return
    for m in placed.members:  # later runs of this tick see these slots taken
        used[m.node] = used.get(m.node, 0) + 1
    gen = state.generation + 1
    h = em.header(state.run_id, state.generation, f"{state.run_id}/g{gen}/RunAdmitted")
    em.emit(RUNS, RunAdmitted(header=h, members=placed.members))
    _start_generation(em, em.model.runs[state.run_id], plan, placed.members, "admitted")


def _start_generation(
    em: _Emitter, state: RunState, plan: RunPlan, members: tuple[Member, ...], reason: str
) -> None:
    gen = state.generation + 1
    ckpt = state.checkpoint
    resume_step = ckpt.step if ckpt else None
    resume_manifest = ckpt.manifest_path if ckpt else None
    h = em.header(state.run_id, gen, f"{state.run_id}/g{gen}/GenerationStarted")
    em.emit(RUNS, GenerationStarted(header=h, members=members, reason=reason,
                                    resume_step=resume_step, resume_manifest=resume_manifest))
    nodes = em.model.inventory.nodes
    master = nodes[members[0].node].address if members[0].node in nodes else "127.0.0.1"
    digest = hashlib.sha256(f"{state.run_id}/g{gen}".encode()).digest()
    # Below the kernel's ephemeral range (32768+), so no outgoing connection can hold it.
    port = 10_000 + int.from_bytes(digest[:4], "big") % 22_000
    env = {**plan.env, **checkpoints.resume_env(plan.checkpoint, state),
           workerenv.RANKS: workerenv.format_ranks([m.logical_id for m in members]),
           workerenv.HEARTBEAT_INTERVAL_S: str(plan.heartbeat_interval_ms / 1000)}
    for node in sorted({m.node for m in members}):
        cid = f"{state.run_id}/g{gen}/start/{node}"
        em.emit(COMMANDS, GroupStartCommanded(
            header=em.header(state.run_id, gen, cid), command_id=cid, node=node,
            members=tuple(m for m in members if m.node == node), world_size=len(members),
            master_addr=master, master_port=port, argv=plan.argv, env=env,
            resume_step=resume_step, resume_manifest=resume_manifest))


def _restart(em: _Emitter, state: RunState, plan: RunPlan) -> None:
    if em.now < state.retry_not_before:
        return
    live = {n.name for n in em.model.inventory.live(em.now, NODE_TIMEOUT_MS)}
    lost = sorted({m.node for m in state.members} - live)
    if lost:
        _queue(em, state, f"placement lost: {', '.join(lost)} not available")
        return
    _start_generation(em, state, plan, state.members, "restart")


def _watch(em: _Emitter, state: RunState, plan: RunPlan) -> None:
    failure = _failure(em, state, plan)
    if failure is not None:
        _fail(em, state, plan, failure)
        return
    exits = state.exits
    lids = [m.logical_id for m in state.members]
    joined = all(lid in state.heartbeats or lid in exits for lid in lids)
    if state.status != Status.RUNNING and joined:
        eid = f"{state.run_id}/g{state.generation}/MembershipConfirmed"
        em.emit(RUNS, MembershipConfirmed(header=em.header(state.run_id, state.generation, eid),
                                          members_joined=len(lids)))
        state = em.model.runs[state.run_id]
    if state.status == Status.RUNNING and lids and all(exits.get(lid) == 0 for lid in lids):
        eid = f"{state.run_id}/RunFinished"
        em.emit(RUNS, RunFinished(header=em.header(state.run_id, state.generation, eid),
                                  outcome="succeeded", reason="every member exited 0"))


def _failure(em: _Emitter, state: RunState, plan: RunPlan) -> policy.Failure | None:
    for m in state.members:
        code = state.exits.get(m.logical_id, 0)
        if code != 0:
            signal = -code if code is not None and code < 0 else None
            return policy.from_exit(m.logical_id, m.node, None if signal else code, signal)
    grace_from = max(state.generation_started_at, em.model.since)
    for m in state.members:
        if m.logical_id in state.exits:
            continue
        seen = state.heartbeats.get(m.logical_id)
        last = max(seen or 0, grace_from)
        limit = plan.heartbeat_timeout_ms if seen is not None else plan.start_timeout_ms
        if em.now - last > limit:
            return policy.no_heartbeat(m.logical_id, m.node, em.now - last)
    if state.status == Status.RUNNING and not state.exits:
        last = max(state.last_progress_at, em.model.since)
        if em.now - last > plan.stall_timeout_ms:
            return policy.no_progress(state.step, em.now - last)
    return None


def _fail(em: _Emitter, state: RunState, plan: RunPlan, failure: policy.Failure) -> None:
    decision = policy.decide(state, failure, plan.retry_for(failure.failure_class))
    eid = f"{state.run_id}/g{state.generation}/FailureClassified"
    em.emit(RUNS, FailureClassified(
        header=em.header(state.run_id, state.generation, eid),
        failure_class=failure.failure_class, signature=failure.signature, action=decision.action,
        attempt=decision.attempt, detail=f"{failure.detail}; {decision.reason}",
        logical_id=failure.logical_id, node=failure.node, backoff_ms=decision.backoff_ms))
    _stop(em, state, f"{failure.signature}: {decision.action}")
    if failure.node and em.model.node_failures.get(failure.node, 0) >= NODE_QUARANTINE_AFTER:
        node = em.model.inventory.nodes.get(failure.node)
        if node is None or not node.quarantined:
            n = em.model.node_failures[failure.node]
            eid = f"{node_key(failure.node)}/NodeQuarantined/{n}"
            em.emit(RUNS, NodeQuarantined(header=em.header(node_key(failure.node), 0, eid),
                                          node=failure.node, reason=f"{n} failures on the node"))
    if decision.action == "escalate":
        eid = f"{state.run_id}/RunFinished"
        em.emit(RUNS, RunFinished(header=em.header(state.run_id, state.generation, eid),
                                  outcome="failed", reason=decision.reason))


def replay(events: Iterable[Event], since: int, plan_of: PlanOf) -> Model:
    """The model a (re)started controller holds after reading ``runledger.runs``."""
    model = Model(since=since)
    for event in events:
        model = absorb(model, event, plan_of)
    return model
