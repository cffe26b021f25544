"""One valid event of every type in the catalog, for round-trip and broker tests.

Headers come from ``tests.events.builders.Ev``; the fields are spelled out, since every
field holding a value other than its default is the point of the sample.
"""

from __future__ import annotations

import dataclasses
import functools

from events.model import (
    EVENT_TYPES,
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
)
from events.registry import SchemaRegistry
from events.signed.signing import key_id_of
from tests.events.builders import Ev

MEMBERS = (Member("r0", "node-a", 0, "rack-1"), Member("r1", "node-b", 1, None))
KEY_ID = key_id_of(bytes(range(32)))


@functools.cache
def written_versions() -> dict[str, int]:
    """The schema version today's codec writes for each type (the newest file)."""
    registry = SchemaRegistry.from_directory()
    return {name: registry.latest(name).version for name in EVENT_TYPES}


def as_written(event: Event) -> Event:
    """``event`` with the ``header.schema_version`` the codec writes, so that what
    comes back from a round trip (the writer's version) equals what was sent."""
    version = written_versions()[event.event_type]
    if event.header.schema_version == version:
        return event
    return dataclasses.replace(
        event, header=dataclasses.replace(event.header, schema_version=version))


def one_of_each(run_id: str) -> list[Event]:
    """Every event type exactly once, with non-default values in every field, each
    header carrying the schema version its type is written with."""
    ev = Ev(run_id, tick=1)
    h = iter(range(100))

    def hd(gen: int = 1) -> Header:
        n = next(h)  # each caused by the one before
        return ev.h(gen, n=n, causation_id=None if n == 0 else f"{run_id}-e{n - 1}")

    events: list[Event] = [
        RunSubmitted(header=hd(0), spec_digest="sha256:ab", spec_json='{"a": 1}',
                     principal="alice", world_size=2, dataset_id="ds-1"),
        CancelRequested(header=hd(), principal="alice", reason="budget — überschritten"),
        RunQueued(header=hd(0), reason="waiting for 2 slots in rack-1"),
        RunAdmitted(header=hd(0), members=MEMBERS),
        GenerationStarted(header=hd(), members=MEMBERS, reason="admitted", resume_step=None,
                          resume_manifest=None, replicas=2, accumulation=1),
        MembershipConfirmed(header=hd(), members_joined=2),
        ManifestCommitted(header=hd(), step=100, manifest_path="file:///c/r/g1/s100/manifest.json",
                          manifest_digest="sha256:cd"),
        CursorAdvanced(header=hd(), step=100, dataset_id="ds-1", epoch=0, position=6400,
                       source_counts={"web": 4000, "code": 2400},
                       mixture_targets={"web": 0.625, "code": 0.375}),
        WriteRejected(header=hd(), rejected_event_id="x", rejected_event_type="ManifestProposed",
                      reason="stale_generation", detail="generation 0, current 1"),
        FailureClassified(header=hd(), failure_class="hang", signature="hang:r1", action="restart",
                          attempt=2, detail="no step for 600 s", logical_id="r1", node="node-b",
                          backoff_ms=4000),
        AlertRaised(header=hd(), alert="stalled", severity="critical", owner="ml-infra",
                    runbook="runbooks/stall.md", detail="no progress", subject="r1",
                    threshold="p50 > 1.5 x median", value=2.25),
        AlertResolved(header=hd(), alert="stalled", subject="r1", raised_event_id="run-1/a/1",
                      detail="progress resumed"),
        RunCancelled(header=hd(), principal="alice", reason="budget"),
        RunPaused(header=hd(), alert="non_finite_loss", subject="",
                  reason="loss nan at step 9 — angehalten"),
        RunResumed(header=hd(), principal="alice", reason="lr lowered"),
        ResumeRequested(header=hd(), principal="alice", reason="lr lowered"),
        CorruptionSuspected(header=hd(), step=12, detector="agreement", ranks=(1,),
                            fingerprints=("0f1e2d3c4b5a6978", "0f1e2d3c4b5a6979"),
                            nodes=("node-a", "node-b"), part="grad:block.linear1.weight",
                            detail="rank 1 differs from rank 0 in 1 of 14 tensors — Bitfehler",
                            consumed=("1a2b3c4d5e6f7081", "1a2b3c4d5e6f7082")),
        StepReplayed(header=hd(), step=12, suspected_generation=1,
                     fingerprints=("0f1e2d3c4b5a6978", "0f1e2d3c4b5a6978"),
                     nodes=("node-b", "node-a"),
                     consumed=("1a2b3c4d5e6f7081", "1a2b3c4d5e6f7081")),
        CorruptionClassified(header=hd(), step=12, suspected_generation=1, detector="agreement",
                             verdict="transient", ranks=(1,), nodes=("node-b",),
                             detail="the replay agreed with rank 0"),
        RunFinished(header=hd(), outcome="failed", reason="escalated after 3 hangs"),
        RunManifestPublished(header=hd(), digest="sha256:ab12", path="file:///c/r/run-manifest.json",
                             status="Failed", checkpoint_step=100, accepted_loss_tokens=60000,
                             discarded_loss_tokens=0, incidents=3, cost=1.5),
        HeartbeatRecorded(header=hd(), logical_id="r0", node="node-a", step=42, closing=True),
        StepCommitted(header=hd(), step=43, tokens=65536, loss_tokens=60000, step_time_ms=812.5,
                      input_wait_ms=3.25, loss=2.75),
        StepTimesRecorded(header=hd(), logical_id="r1", node="node-a", first_step=41,
                          step_time_ms=(810.0, 812.5), input_wait_ms=(3.0, 0.5)),
        ShardWritten(header=hd(), step=100, logical_id="r1", path="file:///c/r/g1/s100/__1_0.distcp",
                     bytes=123456789, crc32c=0xFFFFFFFF),
        # v2: with the data cursor the checkpoint holds (see ``variants`` for v1's shape).
        ManifestProposed(header=hd(), step=100, manifest_path="file:///c/m.json",
                         manifest_digest="sha256:ef", dataset_id="ds-1", epoch=3,
                         position=12800, source_counts={"web": 8000, "code": 4800},
                         mixture_targets={"web": 0.625, "code": 0.375}),
        WorkerExited(header=hd(), logical_id="r1", node="node-b", exit_code=None, signal=9),
        AgentRegistered(header=hd(0), node="node-a", slots=8, domain="rack-1",
                        address="10.0.0.7", work_dir="/var/lib/runledger",
                        python_version="3.11.9", torch_version="2.5.1"),
        AgentHeartbeatRecorded(header=hd(0), node="node-a", slots=8, domain="rack-1",
                               busy_slots=2),
        MembersHeartbeatRecorded(header=hd(), node="node-a", beats=(
            MemberBeat("r0", 42), MemberBeat("r1", 42, closing=True))),
        NodeQuarantined(header=hd(0), node="node-b", reason="3 crashes of run x",
                        expires_at=1_700_003_600_000),
        NodeLost(header=hd(), node="node-b", last_seen_at=1_700_000_000_000, members=("r1",),
                 consequences=("r0 on node-a exited with 1",)),
        NodeOperationRequested(header=hd(0), node="node-b", operation="drain",
                               principal="alice", reason="disk swap — Wartung"),
        NodeCordoned(header=hd(0), node="node-b", mode="drain", principal="alice",
                     reason="disk swap"),
        NodeUncordoned(header=hd(0), node="node-b", principal="alice", reason="disk swapped",
                       failures_cleared=3),
        NodeQuarantineExpired(header=hd(0), node="node-b", reason="quarantined for 3600 s",
                              failures=2),
        GroupStartCommanded(header=hd(), command_id=f"{run_id}/g1/start/node-a", node="node-a",
                            members=MEMBERS[:1], world_size=2, master_addr="127.0.0.1",
                            master_port=29500, argv=("python", "-m", "train"),
                            env={"RUNLEDGER_RUN_ID": run_id}, resume_step=100,
                            resume_manifest="file:///c/m.json"),
        GroupStopCommanded(header=hd(), command_id=f"{run_id}/g1/stop/node-a", node="node-a",
                           reason="cancelled"),
        # The checkpoint protocol (appended, so the indices above stay put).
        CheckpointStaged(header=hd(), step=200, mode="async", stall_ms=41.5, waited_ms=7.25,
                         bytes=987654321, backlog=2, durable_step=100),
        CheckpointSkipped(header=hd(), step=300, reason="backlog full (skip policy)", backlog=2),
        CheckpointWriteFailed(header=hd(), step=300, logical_id="r1", stage="shards",
                              detail="OSError: [Errno 28] No space left on device"),
        CheckpointVerificationFailed(header=hd(2), step=200,
                                     manifest_path="file:///c/r/g1/s200/manifest.json",
                                     manifest_digest="sha256:f0", logical_id="r0",
                                     reason="shard_checksum",
                                     detail="__1_0.distcp: crc32c 0x1 != 0x2"),
        CheckpointRevoked(header=hd(2), step=200,
                          manifest_path="file:///c/r/g1/s200/manifest.json",
                          manifest_digest="sha256:f0", reason="shard_checksum"),
        CheckpointRestored(header=hd(2), step=100,
                           manifest_path="file:///c/r/g1/s100/manifest.json",
                           manifest_digest="sha256:cd", logical_id="r0", verify_ms=125.5,
                           load_ms=2048.75, fell_back=1, tier="remote"),
        CheckpointReplicated(header=hd(2), step=100, manifest_digest="sha256:cd",
                             manifest_path="s3://bucket/r/g1/s100/manifest.json",
                             logical_id="r0", tier="remote", protects="cluster",
                             lag_ms=1534.25, bytes=1 << 33),
        CheckpointIntervalChanged(header=hd(2), interval_steps=250, interval_s=812.5,
                                  cost_s=12.25, mtbf_s=27000.0, mtbf_source="observed"),
        # Key records (runledger.keys).
        PrincipalKeyRegistered(header=hd(0), principal="alice", role="operator",
                               key_id=KEY_ID, public_key=bytes(range(32)),
                               reason="onboarding — Ärztin"),
        PrincipalKeyRevoked(header=hd(0), principal="alice", key_id=KEY_ID,
                            reason="laptop lost"),
        # A client's observation about a spec (runledger.requests, keyed spec/<hex>).
        PreflightCompleted(header=hd(0), spec_digest="sha256:" + "ab" * 32, principal="alice",
                           verdict="fail", checks=(
                               PreflightCheck("storage.write", "/ckpt", "fail", None, None, "",
                                              "checkpoint root /ckpt: read-only — Schreibschutz"),
                               PreflightCheck("storage.read", "s3://b/c", "pass", 812.5, 5.0,
                                              "MB/s", "read 4.2 MB"))),
        PilotCompleted(header=hd(0), spec_digest="sha256:" + "ab" * 32, principal="alice",
                       verdict="pass", pilot_run_id="tiny-pilot-1", steps=20, replicas=2,
                       step_time_ms=41.5, checkpoint_ms=None, restore_ms=812.25, checks=(
                           PreflightCheck("pilot.restore", "step 10", "pass", 0.81, 300.0, "s",
                                          "restored step 10 — wiederhergestellt"),)),
        DrillCompleted(header=hd(0), spec_digest="sha256:" + "ab" * 32, principal="alice",
                       fault="kill_compute", verdict="pass", drill_run_id="tiny-drill-1",
                       rpo_s=1.5, rto_s=None, reason="every expectation held", checks=()),
    ]
    events = [as_written(e) for e in events]
    assert {type(e).__name__ for e in events} == set(EVENT_TYPES), "sample set is incomplete"
    return events


def variants(run_id: str) -> list[Event]:
    """Second samples of types whose fields have shapes ``one_of_each`` cannot show at
    once: ManifestProposed as a v1-era writer fills it (no data cursor, no dataset)."""
    ev = Ev(run_id, tick=1)
    return [as_written(e) for e in (
        ev.proposed(1, 100, n=100, causation_id=f"{run_id}-e99", manifest_path="file:///c/m.json",
                    manifest_digest="sha256:ef", dataset_id=None),
        ev.proposed(1, 200, n=101, causation_id=f"{run_id}-e100",
                    manifest_path="file:///c/m2.json", manifest_digest="sha256:f1",
                    dataset_id="ds-1", epoch=0, position=0, source_counts={}),
    )]
