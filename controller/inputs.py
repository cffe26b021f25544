"""What the controller does with each type of input, in one table: :data:`RULES`.

Every request and report that reaches the controller is looked up by its type
(:func:`rule_for`) and taken (:func:`take`) by its :class:`Input` rule:

- ``INVENTORY``: an agent's offer of a node, folded into the inventory;
- ``REQUEST``: asks the controller to decide (submit, cancel, resume a paused
  run, commit a checkpoint); its act judges it, and appends what it decides;
- ``REPORT``: a worker's observation of its run, judged by the run fold once:
  refused, it is recorded as a ``WriteRejected``; accepted, it is folded, kept
  as a fact unless ``keep`` is false, and followed by its act, if any.

Silent data corruption: an accepted ``CorruptionSuspected`` (which opens the
run's suspicion) revokes every committed checkpoint at or after its step
(``CheckpointRevoked``, reason ``corruption_suspected``, caused by the
suspicion), so the restart that follows the ranks' exit 87 resumes from the
newest checkpoint before it and replays the step. An accepted ``StepReplayed``
of the open suspicion is classified (``controller.sdc_verdict``) into
``CorruptionClassified``, which closes it; a ``node_fault`` also quarantines
the node with the evidence (``NodeQuarantined``), whether or not the run
injects faults: the replay, not a failure count, is the evidence.

``alerts``: whether the run's alert rules are judged right after the input.
For the bulk of all reports (heartbeats, step times) and agents' reports the
tick judges them instead, every tick_s, rather than once per report, which for
stragglers would cost O(ranks) per report.

An operator's request (submit, cancel, resume, node operation) whose event
id the controller has already taken, applied or refused, is refused as
``replayed`` before its rule sees it (``controller.replays``): a signed copy
of it, however genuine, does nothing a second time, in every window of the
run; a submit of a run id that exists is refused the same way.

A type not in the table is no input: :func:`rule_for` has no rule for it, and
the controller takes nothing from it (``events.authority`` names who may send
what; the shell quarantines strays at the door, before they reach this table).

Times are the controller's, not the sender's alone (:func:`received`): a
heartbeat counts when it is received, and no input may be dated after it was
received, so a clock set ten years ahead cannot hide a hang. The one exception
is a ``RunSubmitted``: its fact is the operator's signed bytes, copied
(``controller.chains``), which a new date would break; a submission's time
starts no timer.

Tested in tests/controller/test_inputs.py and tests/controller/test_sdc_flow.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from controller import checkpoints, node_decide, replays, sdc_verdict
from controller.emitter import Emitter
from controller.model import Tracked
from events.fold import UNKNOWN_RUN, apply
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    CancelRequested,
    CheckpointReplicated,
    CheckpointRestored,
    CheckpointSkipped,
    CheckpointStaged,
    CheckpointVerificationFailed,
    CheckpointWriteFailed,
    CorruptionClassified,
    CorruptionSuspected,
    Event,
    HeartbeatRecorded,
    ManifestProposed,
    MembersHeartbeatRecorded,
    NodeCordoned,
    NodeOperationRequested,
    NodeQuarantined,
    NodeUncordoned,
    ResumeRequested,
    RunCancelled,
    RunResumed,
    RunSubmitted,
    ShardWritten,
    StepCommitted,
    StepReplayed,
    StepTimesRecorded,
    WorkerExited,
    node_key,
)
from events.topics import RUNS

RUN_NOT_PAUSED = "run_not_paused"


class Kind(StrEnum):
    INVENTORY = "inventory"
    REQUEST = "request"
    REPORT = "report"


# (emitter, the input, the run as it was before the input, if known)
Act = Callable[[Emitter, Any, Tracked | None], None]


@dataclass(frozen=True, slots=True)
class Input:
    kind: Kind
    act: Act | None = None
    keep: bool = True  # REPORT: an accepted one is appended to runledger.runs
    alerts: bool = True


def received(event: Event, now: int) -> Event:
    """``event`` as the controller judges it, dated by when it was received.

    Liveness (a heartbeat, a node's) is the receive time itself; any other input
    keeps its sender's time unless that is later than its receipt.
    """
    if isinstance(event, _COPIED):
        return event
    at = event.header.occurred_at
    if isinstance(event, _LIVENESS) or at > now:
        at = now
    if at == event.header.occurred_at:
        return event
    return replace(event, header=replace(event.header, occurred_at=at))


def take(em: Emitter, event: Event, rule: Input) -> None:
    """Take one input by its rule (dated by :func:`received` first)."""
    event = received(event, em.now)
    if rule.kind == Kind.INVENTORY:
        em.draft.absorb(event)
        return
    before = em.draft.get(event.run_id)
    replayed = replays.judge(em.draft.requests, event)  # before any rule: a request is taken once
    if replayed is not None:
        em.reject(event, *replayed)
        return
    if rule.kind == Kind.REPORT:
        verdict = em.draft.absorb_run(event)
        if not verdict.accepted:
            em.reject(event, verdict.reason, verdict.detail)
            return
        if rule.keep:
            em.keep(event)
    if rule.act is not None:
        rule.act(em, event, before)


def _submit(em: Emitter, event: RunSubmitted, before: Tracked | None) -> None:
    if before is None:
        em.emit(RUNS, event)
        return
    # A new request (another event id) for a run id that exists: a copy of the request
    # that created it never gets here (replays.judge refused it before this rule).
    em.reject(event, replays.REPLAYED, f"submit of run {event.run_id}, which exists "
              f"({before.state.status.value}): a run is submitted once; submit the spec "
              "again for a new run id")


def _cancel(em: Emitter, event: CancelRequested, before: Tracked | None) -> None:
    if before is None:
        em.reject(event, UNKNOWN_RUN, f"cancel of unknown run {event.run_id}")
        return
    state = before.state
    if state.status.terminal:
        em.reject(event, "run_terminal", f"cancel after the run is {state.status.value}")
        return
    allowed = before.plan.cancel_authority | {state.principal}
    if event.principal not in allowed:
        em.reject(event, "unauthorized",
                  f"{event.principal!r} is not in the cancel authority {sorted(allowed)}")
        return
    # The fact first: it revokes the generation, so nothing the workers send
    # from now on is accepted, whatever the stop commands' fate.
    h = em.header(event.run_id, state.generation, f"{event.run_id}/RunCancelled",
                  event.header.event_id)
    em.emit(RUNS, RunCancelled(header=h, principal=event.principal, reason=event.reason))
    em.stop(state, f"cancelled by {event.principal}: {event.reason}")


def _resume(em: Emitter, event: ResumeRequested, before: Tracked | None) -> None:
    """An operator resumes a run an alert paused; judged by the cancel authority."""
    if before is None:
        em.reject(event, UNKNOWN_RUN, f"resume of unknown run {event.run_id}")
        return
    state = before.state
    if not state.paused:
        em.reject(event, RUN_NOT_PAUSED, f"resume of a run that is {state.status.value} and "
                  "not paused (only an alert whose action is pause pauses a run)")
        return
    allowed = before.plan.cancel_authority | {state.principal}
    if event.principal not in allowed:
        em.reject(event, "unauthorized",
                  f"{event.principal!r} is not in the cancel authority {sorted(allowed)}, "
                  "which may resume")
        return
    h = em.header(event.run_id, state.generation, f"{event.header.event_id}/RunResumed",
                  event.header.event_id)
    em.emit(RUNS, RunResumed(header=h, principal=event.principal, reason=event.reason))


def _node(em: Emitter, event: NodeOperationRequested, before: Tracked | None) -> None:
    """An operator's cordon, drain or uncordon, judged by ``controller.node_decide``, in
    order: one decided on an older view of the node is refused (``controller.replays``)."""
    stale = replays.judge_epoch(em.draft.node_epochs.get(event.node, 0), event)
    if stale is not None:
        em.reject(event, *stale)
        return
    decision = node_decide.judge(em.draft.inventory, em.draft.node_failures, event)
    h = em.header(event.run_id, 0, f"{event.header.event_id}/{event.operation}",
                  event.header.event_id)
    match decision:
        case node_decide.Refuse(reason, detail):
            em.reject(event, reason, detail)
        case node_decide.Cordon(node, mode):
            em.emit(RUNS, NodeCordoned(header=h, node=node, mode=mode,
                                       principal=event.principal, reason=event.reason))
        case node_decide.Uncordon(node, cleared):
            em.emit(RUNS, NodeUncordoned(header=h, node=node, principal=event.principal,
                                         reason=event.reason, failures_cleared=cleared))


def _propose(em: Emitter, event: ManifestProposed, before: Tracked | None) -> None:
    """Commit a checkpoint once the fold accepts it and every member wrote its shard.

    The proposal itself changes no state; its commit does, as the facts it becomes.
    """
    verdict = apply(before.state if before is not None else None, event).verdict
    if not verdict.accepted:
        em.reject(event, verdict.reason, verdict.detail)
        return
    assert before is not None  # the fold accepts nothing for an unknown run
    missing = checkpoints.missing_shards(before.state, before.shards, event)
    if missing:
        em.reject(event, checkpoints.INCOMPLETE_SHARDS,
                  f"no ShardWritten for step {event.step} from {', '.join(missing)}")
        return
    for fact in checkpoints.commit_events(event, em.header_for(event)):
        em.emit(RUNS, fact)


def _revoke(em: Emitter, event: CheckpointVerificationFailed, before: Tracked | None) -> None:
    """A committed checkpoint that failed a worker's verification is revoked."""
    run = em.draft.get(event.run_id)
    assert run is not None
    revoked = checkpoints.revocation(run.state, event, em.header_for(event))
    if revoked is not None:
        em.emit(RUNS, revoked)


def _retune(em: Emitter, event: CheckpointStaged, before: Tracked | None) -> None:
    """The auto checkpoint interval, from this staging and the one before it."""
    run = em.draft.get(event.run_id)
    assert run is not None and before is not None
    auto = run.plan.auto_interval
    if auto is not None:
        change = checkpoints.interval_decision(auto, run.state, before.staged, event,
                                               em.header_for(event))
        if change is not None:
            em.emit(RUNS, change)


def _suspect(em: Emitter, event: CorruptionSuspected, before: Tracked | None) -> None:
    """Revoke every committed checkpoint at or after the suspect step."""
    run = em.draft.get(event.run_id)
    assert run is not None
    for revoked in checkpoints.suspicion_revocations(run.state, event, em.header_for(event)):
        em.emit(RUNS, revoked)


def _replayed(em: Emitter, event: StepReplayed, before: Tracked | None) -> None:
    """Classify the open suspicion from its replay; quarantine a faulty node."""
    assert before is not None  # the fold accepted the replay: the run is known
    s = before.state.suspicion
    if s is None or (s.step, s.generation) != (event.step, event.suspected_generation):
        return  # no suspicion, or another one: this replay settles nothing
    v = sdc_verdict.classify(s, event)
    cause = event.header.event_id
    em.emit(RUNS, CorruptionClassified(
        header=em.header_for(event)(f"{cause}/CorruptionClassified", cause), step=s.step,
        suspected_generation=s.generation, detector=s.detector, verdict=v.verdict,
        ranks=v.ranks, nodes=v.nodes, detail=v.detail))
    if v.verdict != sdc_verdict.NODE_FAULT:
        return
    for node in v.nodes:
        known = em.draft.inventory.nodes.get(node)
        if known is not None and known.quarantined:
            continue
        # A node's facts are its key's owner's to write; another owner writes it under
        # the run's key, which every controller folds into its inventory all the same.
        key = node_key(node) if em.owns(node_key(node)) else event.run_id
        eid = f"{key}/NodeQuarantined/sdc/{event.run_id}/g{s.generation}/s{s.step}"
        em.emit(RUNS, NodeQuarantined(
            header=em.header(key, 0, eid, cause), node=node,
            reason=f"silent data corruption in run {event.run_id}: {v.detail}",
            expires_at=em.draft.node_policy.expires_at(em.now)))


_KEPT = Input(Kind.REPORT)
_CLOCKED = Input(Kind.REPORT, keep=False, alerts=False)  # judged by the tick, never a fact
_AGENT = Input(Kind.INVENTORY, alerts=False)

RULES: Mapping[type[Event], Input] = {
    AgentRegistered: _AGENT,
    AgentHeartbeatRecorded: _AGENT,
    RunSubmitted: Input(Kind.REQUEST, _submit),
    CancelRequested: Input(Kind.REQUEST, _cancel),
    ResumeRequested: Input(Kind.REQUEST, _resume),
    NodeOperationRequested: Input(Kind.REQUEST, _node),
    ManifestProposed: Input(Kind.REQUEST, _propose),
    HeartbeatRecorded: _CLOCKED,
    MembersHeartbeatRecorded: _CLOCKED,  # a node's members' heartbeats, one record
    StepTimesRecorded: _CLOCKED,
    StepCommitted: _KEPT,
    WorkerExited: _KEPT,
    ShardWritten: _KEPT,
    CheckpointStaged: Input(Kind.REPORT, _retune),
    CheckpointSkipped: _KEPT,
    CheckpointWriteFailed: _KEPT,
    CheckpointVerificationFailed: Input(Kind.REPORT, _revoke),
    CheckpointRestored: _KEPT,
    CheckpointReplicated: _KEPT,  # the durability facts RPO per failure domain is built on
    CorruptionSuspected: Input(Kind.REPORT, _suspect),
    StepReplayed: Input(Kind.REPORT, _replayed),
}
_LIVENESS = (HeartbeatRecorded, MembersHeartbeatRecorded, AgentHeartbeatRecorded, AgentRegistered)
# Appended as the request's own bytes (the operator's signature covers them).
_COPIED = (RunSubmitted,)


def rule_for(event: Event) -> Input | None:
    """The rule for an input; None for a fact, a command or anything else."""
    return RULES.get(type(event))
