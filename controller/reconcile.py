"""The controller's functional core: ``handle`` inputs and ``tick`` the clock. Pure.

Both take the model (``controller.model.Model``) and return the new model and
the records to append, as ``(topic, event)`` pairs with deterministic event
ids; the model already includes their effect (``controller.emitter``), so a
caller that appends them in one Kafka transaction keeps model and log in step.
On a restart, folding ``runledger.runs`` (``controller.model.replay``)
rebuilds the same model through the same update path, and the level-triggered
``tick`` finds nothing left to redo.

- :func:`handle`: one request or report, taken by its rule in
  ``controller.inputs``, then the alert rules for its run if the rule says so.
- :func:`tick`: :func:`reconcile_run` for every run that can still change
  (and every finished run with an alert still open), in run id order.

Both take ``owns``, the runs (and node keys) this controller decides for
(``controller.ownership``); by default every one, as for a lone controller.
- :func:`reconcile_run`: the run's lifecycle decisions
  (``controller.run_decide``) performed in order, then its alert rules
  (``controller.alerts``) on the state they reached.

What a report calls for (success once every member has exited 0, a failure)
waits for the tick, as it always has, so each decision lands in the same cycle
as before; only requests are decided at once (a cancellation, a commit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from controller import alerts, checkpoints, elastic, inputs, node_decide
from controller.emitter import PRODUCER, Emitter, Out
from controller.lost import Lost
from controller.model import Draft, Model, PlanOf, Tracked
from controller.run_decide import (
    NODE_QUARANTINE_AFTER,
    Action,
    Admit,
    Classify,
    Confirm,
    Finish,
    Quarantine,
    Queue,
    Start,
    Stop,
    World,
    decide,
    placement_ms,
    queue_tag,
)
from events import authority, workerenv
from events.base import by_node
from events.model import (
    AlertRaised,
    Event,
    FailureClassified,
    GenerationStarted,
    GroupStartCommanded,
    Member,
    MembershipConfirmed,
    NodeLost,
    NodeQuarantined,
    NodeQuarantineExpired,
    RunAdmitted,
    RunFinished,
    RunPaused,
    RunQueued,
    node_key,
)
from events.state import RunState, Status
from events.topics import COMMANDS, RUNS

# Whether this controller decides for a run (or node) key: controller.ownership.
Owns = Callable[[str], bool]


def everything(_key: str) -> bool:
    """A lone controller owns every run."""
    return True


def handle(model: Model, event: Event, now: int, plan_of: PlanOf,
           topic: str | None = None, *, owns: Owns = everything) -> tuple[Model, list[Out]]:
    """React to one request or report that arrived on ``topic`` (by default its own).

    Anything else (a fact or a command sent as an input, a type on another
    type's topic) changes nothing and appends nothing: the shell's door
    (``events.authority.admit_input``) quarantines such records before they get
    here. Of a run this controller does not ``owns``, it takes only an agent's
    offer of a node (the inventory is cluster-wide).
    """
    rule = inputs.rule_for(event)
    if rule is None or authority.stray(topic or event.TOPIC, event) is not None:
        return model, []
    if rule.kind != inputs.Kind.INVENTORY and not owns(event.run_id):
        return model, []
    em = Emitter(model, now, plan_of, owns)
    inputs.take(em, event, rule)
    if rule.alerts:
        judge_alerts(em, event.run_id)
    return em.result()


def tick(model: Model, now: int, plan_of: PlanOf,
         owns: Owns = everything) -> tuple[Model, list[Out]]:
    """Level-triggered reconcile of every live run this controller ``owns`` against the
    clock (slots are counted over every run, owned or not: they are the cluster's)."""
    em = Emitter(model, now, plan_of)
    slots = Slots(em.draft)
    for run_id in model.due():
        if owns(run_id):
            reconcile_run(em, run_id, slots, owns)
    quarantine_nodes(em, owns)
    em.close_rejections()
    return em.result()


def quarantine_nodes(em: Emitter, owns: Owns) -> None:
    """Quarantine the nodes whose key this controller owns once their failures call for it,
    and free those whose quarantine has expired (``controller.node_decide.expiries``).

    The failure that tips a node is usually decided by another run's owner, which
    may not own the node's key: only one controller writes a node's facts.
    """
    draft = em.draft
    for expire in node_decide.expiries(draft.inventory, draft.node_policy, em.now):
        key = node_key(expire.node)
        if owns(key):
            releases = draft.inventory.nodes[expire.node].releases
            em.emit(RUNS, NodeQuarantineExpired(
                header=em.header(key, 0, f"{key}/NodeQuarantineExpired/{releases}"),
                node=expire.node, reason=expire.reason, failures=expire.failures))
    for node, count in sorted(draft.node_failures.items()):
        known = draft.inventory.nodes.get(node)
        if count >= NODE_QUARANTINE_AFTER and not (known and known.quarantined) \
                and owns(node_key(node)):
            _quarantine(em, node, count)


class Slots:
    """Slots held per node by runs with a live (or just admitted) generation.

    Counted once per tick, when the first admission asks, and then kept up to
    date by the admissions of that tick, so runs admitted in one tick never
    share a slot. Queued runs hold none, so the map serves every queued run.
    """

    def __init__(self, draft: Draft) -> None:
        self._draft = draft
        self._used: dict[str, int] | None = None

    def used(self) -> dict[str, int]:
        if self._used is None:
            self._used = {}
            for run in self._draft.live():
                if run.state.status.active or run.state.status == Status.ADMITTED:
                    for m in run.state.members:
                        self._used[m.node] = self._used.get(m.node, 0) + 1
        return self._used

    def take(self, members: tuple[Member, ...]) -> None:
        used = self.used()
        for m in members:
            used[m.node] = used.get(m.node, 0) + 1


def reconcile_run(em: Emitter, run_id: str, slots: Slots, owns: Owns = everything) -> None:
    """Every decision the run's whole state calls for now: its lifecycle, then its alerts."""
    run = em.draft.get(run_id)
    if run is None:
        return
    draft = em.draft
    silence = draft.node_policy.silence_ms
    world = World(em.now, draft.since, draft.inventory, draft.node_failures, slots.used,
                  draft.gates, silence, placement_ms(silence))
    for action in decide(run, world):
        perform(em, run, action, slots, owns)
    judge_alerts(em, run_id)


def judge_alerts(em: Emitter, run_id: str) -> None:
    """Raise and resolve the run's alerts (controller.alerts) for the state it has reached."""
    run = em.draft.get(run_id)
    if run is None:
        return
    raised = alerts.facts(run.state, run.plan.alerts, run.watch, em.now, PRODUCER,
                          em.draft.since)
    for fact in raised:
        em.emit(RUNS, fact)
    pause = alerts.pausing(raised, run.plan.alerts, run.state)
    if pause is not None:
        _pause(em, run.state, pause)


def _pause(em: Emitter, state: RunState, alert: AlertRaised) -> None:
    """An alert whose action is pause: the fact first (it revokes the generation, as a
    cancellation does), then the stop commands; the run waits for ``runledger resume``."""
    rid, gen = state.run_id, state.generation
    em.emit(RUNS, RunPaused(header=em.header(rid, gen, f"{rid}/g{gen}/RunPaused",
                                             alert.header.event_id),
                            alert=alert.alert, subject=alert.subject, reason=alert.detail))
    em.stop(state, f"paused by alert {alert.key}")


def perform(em: Emitter, run: Tracked, action: Action, slots: Slots,
            owns: Owns = everything) -> None:
    """The records that carry out one action on ``run`` (as it was when it was decided)."""
    state = run.state
    rid, gen = state.run_id, state.generation
    match action:
        case Queue(reason):
            eid = f"{rid}/g{gen}/f{state.failure_count}/RunQueued/{queue_tag(reason)}"
            em.emit(RUNS, RunQueued(header=em.header(rid, gen, eid), reason=reason))
        case Admit(members, generation):
            slots.take(members)
            eid = f"{rid}/g{generation}/RunAdmitted"
            em.emit(RUNS, RunAdmitted(header=em.header(rid, gen, eid), members=members))
        case Start(members, _, reason):
            if reason != "admitted":  # Admit took those; a resize takes its newcomers' slots
                placed = {(m.logical_id, m.node) for m in state.members}
                slots.take(tuple(m for m in members if (m.logical_id, m.node) not in placed))
            _start(em, run, action)
        case Lost(node, last_seen_at, lost_members, consequences):
            em.emit(RUNS, NodeLost(
                header=em.header(rid, gen, f"{rid}/g{gen}/NodeLost/{node}"), node=node,
                last_seen_at=last_seen_at, members=lost_members, consequences=consequences))
        case Classify(failure, decision):
            em.emit(RUNS, FailureClassified(
                header=em.header(rid, gen, f"{rid}/g{gen}/FailureClassified"),
                failure_class=failure.failure_class, signature=failure.signature,
                action=decision.action, attempt=decision.attempt,
                detail=f"{failure.detail}; {decision.reason}", logical_id=failure.logical_id,
                node=failure.node, backoff_ms=decision.backoff_ms, log_path=failure.log_path,
                stderr_tail=failure.stderr_tail))
        case Stop(reason):
            em.stop(state, reason)
        case Quarantine(node, count):
            if owns(node_key(node)):  # else its owner does, in quarantine_nodes
                _quarantine(em, node, count)
        case Confirm(joined):
            em.emit(RUNS, MembershipConfirmed(
                header=em.header(rid, gen, f"{rid}/g{gen}/MembershipConfirmed"),
                members_joined=joined))
        case Finish(outcome, reason):
            em.emit(RUNS, RunFinished(header=em.header(rid, gen, f"{rid}/RunFinished"),
                                      outcome=outcome, reason=reason))


def _quarantine(em: Emitter, node: str, count: int) -> None:
    key = node_key(node)
    known = em.draft.inventory.nodes.get(node)
    # A node freed before counts its failures again from 0: its releases keep the id new.
    releases = known.releases if known is not None else 0
    eid = f"{key}/NodeQuarantined/{count}" + (f"/r{releases}" if releases else "")
    em.emit(RUNS, NodeQuarantined(header=em.header(key, 0, eid), node=node,
                                  reason=f"{count} failures on the node",
                                  expires_at=em.draft.node_policy.expires_at(em.now)))


def _start(em: Emitter, run: Tracked, start: Start) -> None:
    """A new generation: the fact, then a start command per node of its members."""
    state, plan, members, gen = run.state, run.plan, start.members, start.generation
    ckpt = state.checkpoint
    resume_step = ckpt.step if ckpt else None
    resume_manifest = ckpt.manifest_path if ckpt else None
    replicas, accumulation = elastic.shape(plan.elastic, plan.ranks_per_replica, len(members))
    h = em.header(state.run_id, gen, f"{state.run_id}/g{gen}/GenerationStarted")
    em.emit(RUNS, GenerationStarted(header=h, members=members, reason=start.reason,
                                    resume_step=resume_step, resume_manifest=resume_manifest,
                                    replicas=replicas, accumulation=accumulation))
    nodes = em.draft.inventory.nodes
    master = nodes[members[0].node].address if members[0].node in nodes else "127.0.0.1"
    digest = hashlib.sha256(f"{state.run_id}/g{gen}".encode()).digest()
    # Below the kernel's ephemeral range (32768+), so no outgoing connection can hold it.
    port = 10_000 + int.from_bytes(digest[:4], "big") % 22_000
    env = {**plan.env, **checkpoints.resume_env(plan.checkpoint, state, start.domain),
           **(plan.sdc.to_environ() if plan.sdc is not None else {}),
           workerenv.RANKS: workerenv.format_ranks([m.logical_id for m in members]),
           workerenv.HEARTBEAT_INTERVAL_S: str(plan.heartbeat_interval_ms / 1000),
           workerenv.REPLICAS: str(replicas), workerenv.ACCUMULATION: str(accumulation)}
    placed = by_node(members)
    for node in sorted(placed):
        cid = f"{state.run_id}/g{gen}/start/{node}"
        em.emit(COMMANDS, GroupStartCommanded(
            header=em.header(state.run_id, gen, cid), command_id=cid, node=node,
            members=tuple(placed[node]), world_size=len(members),
            master_addr=master, master_port=port, argv=plan.argv, env=env,
            resume_step=resume_step, resume_manifest=resume_manifest, workdir=plan.workdir))
