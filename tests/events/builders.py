"""Events for tests, built one way: ``Ev`` hands out headers and the common events.

Each ``Ev`` belongs to one run. Its headers come from a clock that only moves
forward (``tick`` ms a header, starting after ``start``) and carry event ids
that never repeat (``ids`` formats them from the run and a counter). Each event
method fills the fields a test does not care about with plausible values; any
field, and any part of the header, is a keyword where the test does care::

    ev = Ev("run-1")
    ev.submitted()                                 # RunSubmitted, generation 0
    ev.generation_started(2, resume_step=10)       # a restart from step 10
    ev.step(2, 120, loss=None)                     # StepCommitted of generation 2
    ev.heartbeat(1, "w1", at=5_000, event_id="hb/1", producer="worker/run-1/w1")

Header keywords (every event method takes them):

- ``at``: ``occurred_at``; the clock does not move for a header given one;
- ``n``: a log position the test names instead of the counter: the id is
  ``ids`` formatted with it, the time ``start + n * tick`` unless ``at`` is given,
  and neither the counter nor the clock moves;
- ``run_id`` (another run, e.g. ``node/<name>``), ``event_id``, ``producer``,
  ``causation_id``, ``schema_version``.

A test that keeps its own time (a simulated controller, a hand-timed log) passes
``tick=0`` and moves ``ev.now`` itself. ``ev.h(gen, ...)`` is the header alone, for
an event built by hand; ``members("r0", "r1")`` is a group on one node. The
hypothesis strategies (``tests/events/strategies.py``) build their logs with ``Ev``
too; ``tests/events/sample_events.py`` spells out one event of every type.
"""

from __future__ import annotations

from typing import Any, TypeVar

from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    AlertRaised,
    AlertResolved,
    CancelRequested,
    CheckpointIntervalChanged,
    CheckpointReplicated,
    CheckpointRestored,
    CheckpointRevoked,
    CheckpointSkipped,
    CheckpointStaged,
    CheckpointVerificationFailed,
    CheckpointWriteFailed,
    CorruptionClassified,
    CorruptionSuspected,
    CursorAdvanced,
    DrillCompleted,
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
    MemberBeat,
    MembersHeartbeatRecorded,
    MembershipConfirmed,
    NodeCordoned,
    NodeLost,
    NodeOperationRequested,
    NodeQuarantined,
    NodeQuarantineExpired,
    NodeUncordoned,
    PilotCompleted,
    PreflightCheck,
    PreflightCompleted,
    PrincipalKeyRegistered,
    PrincipalKeyRevoked,
    ResumeRequested,
    RunAdmitted,
    RunCancelled,
    RunFinished,
    RunManifestPublished,
    RunPaused,
    RunQueued,
    RunResumed,
    RunSubmitted,
    ShardWritten,
    StepCommitted,
    StepReplayed,
    StepTimesRecorded,
    WorkerExited,
    WriteRejected,
    node_key,
    principal_key,
    spec_key,
)
from events.signed.signing import key_id_of
from events.state import Checkpoint

E = TypeVar("E", bound=Event)

MEMBERS = (Member("w0", "node-a", 0, "rack-1"), Member("w1", "node-b", 1, None))
HEADER_PARTS = ("at", "n", "run_id", "event_id", "producer", "causation_id", "schema_version")


def members(*logical_ids: str, node: str = "n", domain: str | None = None) -> tuple[Member, ...]:
    """One node's members, slot ``i`` for the ``i``-th id: ``members("r0", "r1")``."""
    return tuple(Member(lid, node, i, domain) for i, lid in enumerate(logical_ids))


class Ev:
    """Headers and events of one run (see the module docstring)."""

    def __init__(self, run_id: str = "r1", start: int = 1_700_000_000_000, tick: int = 1000, *,
                 producer: str = "test", ids: str = "{run}-e{n}") -> None:
        self.run_id = run_id
        self.start = start
        self.now = start
        self.tick = tick
        self.producer = producer
        self.ids = ids
        self._n = 0

    def h(self, gen: int = 0, at: int | None = None, *, n: int | None = None,
          run_id: str | None = None, event_id: str | None = None, producer: str | None = None,
          causation_id: str | None = None, schema_version: int = 1) -> Header:
        rid = run_id or self.run_id
        if n is None:
            self._n += 1
            n = self._n
            if at is None:
                self.now += self.tick
                at = self.now
        elif at is None:
            at = self.start + n * self.tick
        return Header(event_id or self.ids.format(run=rid, n=n), rid, gen, at,
                      producer or self.producer, causation_id, schema_version)

    def event(self, cls: type[E], gen: int, fields: dict[str, Any], kw: dict[str, Any]) -> E:
        """``cls`` with a header from ``kw``'s header keywords and ``fields`` updated by the
        rest of ``kw``: what every method below does."""
        parts = {k: kw.pop(k) for k in HEADER_PARTS if k in kw}
        return cls(header=self.h(gen, **parts), **{**fields, **kw})

    # -- requests and the run's life ------------------------------------------------

    def submitted(self, gen: int = 0, **kw: Any) -> RunSubmitted:
        return self.event(RunSubmitted, gen, dict(
            spec_digest="sha256:spec", spec_json="{}", principal="alice",
            world_size=len(MEMBERS), dataset_id="ds-1"), kw)

    def cancel_requested(self, gen: int = 0, **kw: Any) -> CancelRequested:
        return self.event(CancelRequested, gen, dict(principal="bob", reason="budget"), kw)

    def queued(self, gen: int = 0, reason: str = "no capacity", **kw: Any) -> RunQueued:
        return self.event(RunQueued, gen, dict(reason=reason), kw)

    def admitted(self, gen: int = 0, members: tuple[Member, ...] = MEMBERS,
                 **kw: Any) -> RunAdmitted:
        return self.event(RunAdmitted, gen, dict(members=members), kw)

    def generation_started(self, gen: int, resume_step: int | None = None,
                           members: tuple[Member, ...] = MEMBERS, reason: str = "start",
                           **kw: Any) -> GenerationStarted:
        manifest = None if resume_step is None else f"ckpt/s{resume_step}/manifest.json"
        return self.event(GenerationStarted, gen, dict(
            members=members, reason=reason, resume_step=resume_step,
            resume_manifest=manifest), kw)

    def confirmed(self, gen: int, joined: int = len(MEMBERS), **kw: Any) -> MembershipConfirmed:
        return self.event(MembershipConfirmed, gen, dict(members_joined=joined), kw)

    def failure(self, gen: int, action: str = "restart", signature: str = "crash:w1",
                failure_class: str = "worker_crash", attempt: int = 1,
                **kw: Any) -> FailureClassified:
        return self.event(FailureClassified, gen, dict(
            failure_class=failure_class, signature=signature, action=action, attempt=attempt,
            detail="exit 1", logical_id="w1", node="node-b",
            backoff_ms=1000 if action == "requeue" else None), kw)

    def rejected(self, gen: int = 0, reason: str = "stale_generation",
                 **kw: Any) -> WriteRejected:
        return self.event(WriteRejected, gen, dict(
            rejected_event_id="x", rejected_event_type="ManifestProposed", reason=reason,
            detail="generation 1, current 2"), kw)

    def alert(self, gen: int = 0, severity: str = "warning", **kw: Any) -> AlertRaised:
        return self.event(AlertRaised, gen, dict(
            alert="stalled", severity=severity, owner="ml-infra", runbook="runbooks/stall.md",
            detail="no progress"), kw)

    def alert_resolved(self, gen: int = 0, **kw: Any) -> AlertResolved:
        return self.event(AlertResolved, gen, dict(
            alert="stalled", subject="", raised_event_id="r1-e1", detail="progress resumed"), kw)

    def cancelled(self, gen: int = 0, **kw: Any) -> RunCancelled:
        return self.event(RunCancelled, gen, dict(principal="bob", reason="budget"), kw)

    def paused(self, gen: int = 0, **kw: Any) -> RunPaused:
        return self.event(RunPaused, gen, dict(alert="non_finite_loss", subject="",
                                               reason="loss nan"), kw)

    def resumed(self, gen: int = 0, **kw: Any) -> RunResumed:
        return self.event(RunResumed, gen, dict(principal="bob", reason="fixed"), kw)

    def resume_requested(self, gen: int = 0, **kw: Any) -> ResumeRequested:
        return self.event(ResumeRequested, gen, dict(principal="bob", reason="fixed"), kw)

    def finished(self, gen: int, outcome: str = "succeeded", reason: str = "done",
                 **kw: Any) -> RunFinished:
        return self.event(RunFinished, gen, dict(outcome=outcome, reason=reason), kw)

    def node_lost(self, gen: int, node: str = "node-b", **kw: Any) -> NodeLost:
        return self.event(NodeLost, gen, dict(node=node, last_seen_at=1_000, members=("r1",),
                                              consequences=("r0 on node-a exited with 1",)),
                          kw)

    def manifest_published(self, gen: int = 0, **kw: Any) -> RunManifestPublished:
        return self.event(RunManifestPublished, gen, dict(
            digest="sha256:00", path="", status="Succeeded", checkpoint_step=None,
            accepted_loss_tokens=0, discarded_loss_tokens=0, incidents=0, cost=None), kw)

    # -- workers' reports -----------------------------------------------------------

    def heartbeat(self, gen: int, logical_id: str = "w0", step: int = 0,
                  at: int | None = None, **kw: Any) -> HeartbeatRecorded:
        return self.event(HeartbeatRecorded, gen, dict(
            logical_id=logical_id, node="node-a", step=step), {**kw, "at": at})

    def members_heartbeat(self, gen: int, *beats: tuple[str, int] | MemberBeat,
                          node: str = "node-a", **kw: Any) -> MembersHeartbeatRecorded:
        """A node agent's record of its members' heartbeats: ``(logical id, step)`` pairs
        or whole ``MemberBeat`` values."""
        listed = tuple(b if isinstance(b, MemberBeat) else MemberBeat(*b) for b in beats)
        return self.event(MembersHeartbeatRecorded, gen, dict(node=node, beats=listed), kw)

    def step(self, gen: int, step: int, tokens: int = 1000, loss_tokens: int = 900,
             **kw: Any) -> StepCommitted:
        return self.event(StepCommitted, gen, dict(
            step=step, tokens=tokens, loss_tokens=loss_tokens, step_time_ms=100.0,
            input_wait_ms=1.5, loss=2.0), kw)

    def step_times(self, gen: int, first: int = 1, logical_id: str = "w0",
                   times: tuple[float, ...] = (100.0, 101.0), **kw: Any) -> StepTimesRecorded:
        return self.event(StepTimesRecorded, gen, dict(
            logical_id=logical_id, node="node-a", first_step=first, step_time_ms=times,
            input_wait_ms=tuple(1.0 for _ in times)), kw)

    def exited(self, gen: int, logical_id: str = "w1", exit_code: int | None = 1,
               signal: int | None = None, **kw: Any) -> WorkerExited:
        return self.event(WorkerExited, gen, dict(
            logical_id=logical_id, node="node-b", exit_code=exit_code, signal=signal), kw)

    # -- checkpoints ----------------------------------------------------------------

    def shard(self, gen: int, step: int, logical_id: str = "w0", **kw: Any) -> ShardWritten:
        return self.event(ShardWritten, gen, dict(
            step=step, logical_id=logical_id, path=f"ckpt/g{gen}/s{step}/{logical_id}.distcp",
            bytes=1 << 20, crc32c=0xDEADBEEF), kw)

    def proposed(self, gen: int, step: int, with_cursor: bool = False,
                 **kw: Any) -> ManifestProposed:
        """A proposal as v1 wrote it, or (``with_cursor``) with v2's data cursor."""
        cursor: dict[str, Any] = {}
        if with_cursor:
            cursor = dict(epoch=0, position=step * 64,
                          source_counts={"web": step * 40, "code": step * 24})
        return self.event(ManifestProposed, gen, dict(
            step=step, manifest_path=f"ckpt/g{gen}/s{step}/manifest.json",
            manifest_digest=f"sha256:g{gen}s{step}", dataset_id="ds-1", **cursor), kw)

    def committed(self, gen: int, step: int, **kw: Any) -> ManifestCommitted:
        return self.event(ManifestCommitted, gen, dict(
            step=step, manifest_path=f"ckpt/g{gen}/s{step}/manifest.json",
            manifest_digest=f"sha256:g{gen}s{step}"), kw)

    def cursor(self, gen: int, step: int, position: int | None = None,
               **kw: Any) -> CursorAdvanced:
        return self.event(CursorAdvanced, gen, dict(
            step=step, dataset_id="ds-1", epoch=0,
            position=step * 64 if position is None else position,
            source_counts={"web": step * 40, "code": step * 24}), kw)

    def staged(self, gen: int, step: int, mode: str = "async", backlog: int = 1,
               durable_step: int | None = None, **kw: Any) -> CheckpointStaged:
        return self.event(CheckpointStaged, gen, dict(
            step=step, mode=mode, stall_ms=40.0, waited_ms=0.0, bytes=1 << 30, backlog=backlog,
            durable_step=durable_step), kw)

    def skipped(self, gen: int, step: int, backlog: int = 2, **kw: Any) -> CheckpointSkipped:
        return self.event(CheckpointSkipped, gen, dict(
            step=step, reason="backlog full", backlog=backlog), kw)

    def write_failed(self, gen: int, step: int, logical_id: str = "w0", stage: str = "shards",
                     **kw: Any) -> CheckpointWriteFailed:
        return self.event(CheckpointWriteFailed, gen, dict(
            step=step, logical_id=logical_id, stage=stage, detail="OSError: disk full"), kw)

    def verify_failed(self, gen: int, ckpt: Checkpoint, logical_id: str = "w0",
                      reason: str = "shard_checksum", **kw: Any) -> CheckpointVerificationFailed:
        return self.event(CheckpointVerificationFailed, gen, dict(
            step=ckpt.step, manifest_path=ckpt.manifest_path,
            manifest_digest=ckpt.manifest_digest, logical_id=logical_id, reason=reason,
            detail="crc32c mismatch"), kw)

    def restored(self, gen: int, ckpt: Checkpoint, logical_id: str = "w0", fell_back: int = 0,
                 **kw: Any) -> CheckpointRestored:
        return self.event(CheckpointRestored, gen, dict(
            step=ckpt.step, manifest_path=ckpt.manifest_path,
            manifest_digest=ckpt.manifest_digest, logical_id=logical_id, verify_ms=12.5,
            load_ms=250.0, fell_back=fell_back), kw)

    def replicated(self, gen: int, ckpt: Checkpoint, logical_id: str = "w0",
                   tier: str = "remote", **kw: Any) -> CheckpointReplicated:
        return self.event(CheckpointReplicated, gen, dict(
            step=ckpt.step, manifest_path=ckpt.manifest_path,
            manifest_digest=ckpt.manifest_digest, logical_id=logical_id, tier=tier,
            protects="cluster", lag_ms=80.0, bytes=4096), kw)

    def revoked(self, gen: int, step: int, committed_gen: int | None = None,
                digest: str | None = None, reason: str = "shard_checksum",
                **kw: Any) -> CheckpointRevoked:
        """Revoke the checkpoint ``committed(committed_gen, step)`` wrote (by default one
        committed under ``gen``), or the one with ``digest``."""
        cg = gen if committed_gen is None else committed_gen
        return self.event(CheckpointRevoked, gen, dict(
            step=step, manifest_path=f"ckpt/g{cg}/s{step}/manifest.json",
            manifest_digest=digest or f"sha256:g{cg}s{step}", reason=reason), kw)

    def revoke(self, gen: int, ckpt: Checkpoint, **kw: Any) -> CheckpointRevoked:
        """Revoke exactly ``ckpt``."""
        return self.revoked(gen, ckpt.step, digest=ckpt.manifest_digest, **kw)

    def interval(self, gen: int, steps: int, source: str = "observed",
                 **kw: Any) -> CheckpointIntervalChanged:
        return self.event(CheckpointIntervalChanged, gen, dict(
            interval_steps=steps, interval_s=steps * 0.5, cost_s=10.0,
            mtbf_s=None if source == "fixed" else 36_000.0, mtbf_source=source), kw)

    # -- silent data corruption -----------------------------------------------------

    def suspected(self, gen: int, step: int, ranks: tuple[int, ...] = (1,),
                  fingerprints: tuple[str, ...] = ("aa", "bb"),
                  nodes: tuple[str, ...] = ("node-a", "node-b"), detector: str = "agreement",
                  **kw: Any) -> CorruptionSuspected:
        return self.event(CorruptionSuspected, gen, dict(
            step=step, detector=detector, ranks=ranks, fingerprints=fingerprints, nodes=nodes,
            part="params", detail="replicas disagree"), kw)

    def replayed(self, gen: int, step: int, suspected_generation: int,
                 fingerprints: tuple[str, ...] = ("aa", "aa"),
                 nodes: tuple[str, ...] = ("node-a", "node-b"), **kw: Any) -> StepReplayed:
        return self.event(StepReplayed, gen, dict(
            step=step, suspected_generation=suspected_generation, fingerprints=fingerprints,
            nodes=nodes), kw)

    def classified(self, gen: int, step: int, suspected_generation: int,
                   verdict: str = "transient", **kw: Any) -> CorruptionClassified:
        return self.event(CorruptionClassified, gen, dict(
            step=step, suspected_generation=suspected_generation, detector="agreement",
            verdict=verdict, ranks=(1,), nodes=("node-b",), detail="one-off"), kw)

    # -- commands to agents ---------------------------------------------------------

    def group_start(self, gen: int, node: str = "node-a", resume_step: int | None = None,
                    **kw: Any) -> GroupStartCommanded:
        return self.event(GroupStartCommanded, gen, dict(
            command_id=f"{self.run_id}/g{gen}/start/{node}", node=node, members=MEMBERS,
            world_size=len(MEMBERS), master_addr="10.0.0.1", master_port=29500,
            argv=("python", "-m", "train"), env={"SEED": "1"}, resume_step=resume_step,
            resume_manifest=None), kw)

    def group_stop(self, gen: int, node: str = "node-a", **kw: Any) -> GroupStopCommanded:
        return self.event(GroupStopCommanded, gen, dict(
            node=node, reason="cancelled", command_id=f"{self.run_id}/g{gen}/stop/{node}"), kw)

    # -- nodes (keyed ``node/<name>``, not by run) ------------------------------------

    def agent_registered(self, node: str = "node-a", **kw: Any) -> AgentRegistered:
        kw["run_id"] = kw.get("run_id") or node_key(node)
        return self.event(AgentRegistered, 0, dict(node=node, slots=8, domain="rack-1"), kw)

    def agent_heartbeat(self, node: str = "node-a", **kw: Any) -> AgentHeartbeatRecorded:
        kw["run_id"] = kw.get("run_id") or node_key(node)
        return self.event(AgentHeartbeatRecorded, 0, dict(
            node=node, slots=8, domain="rack-1", busy_slots=2), kw)

    def quarantined(self, node: str = "node-b", **kw: Any) -> NodeQuarantined:
        kw["run_id"] = kw.get("run_id") or node_key(node)
        return self.event(NodeQuarantined, 0, dict(node=node, reason="3 crashes"), kw)

    def node_request(self, operation: str = "cordon", node: str = "node-b",
                     **kw: Any) -> NodeOperationRequested:
        kw["run_id"] = kw.get("run_id") or node_key(node)
        return self.event(NodeOperationRequested, 0, dict(
            node=node, operation=operation, principal="alice", reason="maintenance"), kw)

    def preflight(self, verdict: str = "fail", digest: str = "sha256:" + "ab" * 32,
                  **kw: Any) -> PreflightCompleted:
        kw["run_id"] = kw.get("run_id") or spec_key(digest)
        check = PreflightCheck("storage.write", "/ckpt", verdict, None, None, "",
                               "checkpoint root /ckpt: read-only")
        return self.event(PreflightCompleted, 0, dict(
            spec_digest=digest, principal="alice", verdict=verdict, checks=(check,)), kw)

    def pilot(self, verdict: str = "pass", digest: str = "sha256:" + "ab" * 32,
              **kw: Any) -> PilotCompleted:
        kw["run_id"] = kw.get("run_id") or spec_key(digest)
        return self.event(PilotCompleted, 0, dict(
            spec_digest=digest, principal="alice", verdict=verdict, pilot_run_id="p-1",
            steps=20, replicas=2, step_time_ms=40.0, checkpoint_ms=120.0, restore_ms=300.0,
            checks=()), kw)

    def drill(self, fault: str = "kill_compute", verdict: str = "pass",
              digest: str = "sha256:" + "ab" * 32, **kw: Any) -> DrillCompleted:
        kw["run_id"] = kw.get("run_id") or spec_key(digest)
        return self.event(DrillCompleted, 0, dict(
            spec_digest=digest, principal="alice", fault=fault, verdict=verdict,
            drill_run_id="d-1", rpo_s=1.0, rto_s=5.0, reason="", checks=()), kw)

    def cordoned(self, node: str = "node-b", mode: str = "cordon", **kw: Any) -> NodeCordoned:
        kw["run_id"] = kw.get("run_id") or node_key(node)
        return self.event(NodeCordoned, 0, dict(node=node, mode=mode, principal="alice",
                                                reason="maintenance"), kw)

    def uncordoned(self, node: str = "node-b", **kw: Any) -> NodeUncordoned:
        kw["run_id"] = kw.get("run_id") or node_key(node)
        return self.event(NodeUncordoned, 0, dict(node=node, principal="alice",
                                                  reason="fixed", failures_cleared=0), kw)

    def quarantine_expired(self, node: str = "node-b", **kw: Any) -> NodeQuarantineExpired:
        kw["run_id"] = kw.get("run_id") or node_key(node)
        return self.event(NodeQuarantineExpired, 0, dict(node=node, reason="expired",
                                                         failures=2), kw)

    # -- keys (keyed ``key/<principal>``, on ``runledger.keys``) ----------------------

    def key_registered(self, principal: str = "alice", role: str = "operator",
                       public_key: bytes = b"\x01" * 32, **kw: Any) -> PrincipalKeyRegistered:
        """A registration; ``key_id`` defaults to the id of ``public_key``."""
        kw["run_id"] = kw.get("run_id") or principal_key(principal)
        key_id = kw.pop("key_id", None) or key_id_of(public_key)
        return self.event(PrincipalKeyRegistered, 0, dict(
            principal=principal, role=role, key_id=key_id, public_key=public_key,
            reason="onboarding"), kw)

    def key_revoked(self, principal: str = "alice", key_id: str = "0123456789abcdef",
                    **kw: Any) -> PrincipalKeyRevoked:
        kw["run_id"] = kw.get("run_id") or principal_key(principal)
        return self.event(PrincipalKeyRevoked, 0, dict(
            principal=principal, key_id=key_id, reason="rotated"), kw)
