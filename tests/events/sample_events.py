"""One valid event of every type in the catalog, for round-trip and broker tests."""

from __future__ import annotations

from events.model import (
    EVENT_TYPES,
    AgentHeartbeatRecorded,
    AgentRegistered,
    AlertRaised,
    CancelRequested,
    CursorAdvanced,
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
    StepCommitted,
    WorkerExited,
    WriteRejected,
)

MEMBERS = (Member("r0", "node-a", 0, "rack-1"), Member("r1", "node-b", 1, None))


def header(run_id: str, n: int, generation: int = 1, producer: str = "test") -> Header:
    return Header(f"{run_id}-e{n}", run_id, generation, 1_700_000_000_000 + n, producer,
                  causation_id=None if n == 0 else f"{run_id}-e{n - 1}")


def one_of_each(run_id: str) -> list[Event]:
    """Every event type once, with non-default values in every field."""
    h = iter(range(100))

    def hd(gen: int = 1) -> Header:
        return header(run_id, next(h), gen)

    events: list[Event] = [
        RunSubmitted(header=hd(0), spec_digest="sha256:ab", spec_json='{"a": 1}',
                     principal="alice", world_size=2, dataset_id="ds-1"),
        CancelRequested(header=hd(), principal="alice", reason="budget — überschritten"),
        RunQueued(header=hd(0), reason="waiting for 2 slots in rack-1"),
        RunAdmitted(header=hd(0), members=MEMBERS),
        GenerationStarted(header=hd(), members=MEMBERS, reason="admitted", resume_step=None,
                          resume_manifest=None),
        MembershipConfirmed(header=hd(), members_joined=2),
        ManifestCommitted(header=hd(), step=100, manifest_path="file:///c/r/g1/s100/manifest.json",
                          manifest_digest="sha256:cd"),
        CursorAdvanced(header=hd(), step=100, dataset_id="ds-1", epoch=0, position=6400,
                       source_counts={"web": 4000, "code": 2400}),
        WriteRejected(header=hd(), rejected_event_id="x", rejected_event_type="ManifestProposed",
                      reason="stale_generation", detail="generation 0, current 1"),
        FailureClassified(header=hd(), failure_class="hang", signature="hang:r1", action="restart",
                          attempt=2, detail="no step for 600 s", logical_id="r1", node="node-b",
                          backoff_ms=4000),
        AlertRaised(header=hd(), alert="stalled", severity="critical", owner="ml-infra",
                    runbook="runbooks/stall.md", detail="no progress"),
        RunCancelled(header=hd(), principal="alice", reason="budget"),
        RunFinished(header=hd(), outcome="failed", reason="escalated after 3 hangs"),
        HeartbeatRecorded(header=hd(), logical_id="r0", node="node-a", step=42),
        StepCommitted(header=hd(), step=43, tokens=65536, loss_tokens=60000, step_time_ms=812.5,
                      input_wait_ms=3.25, loss=2.75),
        ShardWritten(header=hd(), step=100, logical_id="r1", path="file:///c/r/g1/s100/__1_0.distcp",
                     bytes=123456789, crc32c=0xFFFFFFFF),
        ManifestProposed(header=hd(), step=100, manifest_path="file:///c/m.json",
                         manifest_digest="sha256:ef", dataset_id="ds-1"),
        WorkerExited(header=hd(), logical_id="r1", node="node-b", exit_code=None, signal=9),
        AgentRegistered(header=hd(0), node="node-a", slots=8, domain="rack-1"),
        AgentHeartbeatRecorded(header=hd(0), node="node-a", slots=8, domain="rack-1",
                               busy_slots=2),
        NodeQuarantined(header=hd(0), node="node-b", reason="3 crashes of run x"),
        GroupStartCommanded(header=hd(), command_id=f"{run_id}/g1/start/node-a", node="node-a",
                            members=MEMBERS[:1], world_size=2, master_addr="127.0.0.1",
                            master_port=29500, argv=("python", "-m", "train"),
                            env={"RUNLEDGER_RUN_ID": run_id}, resume_step=100,
                            resume_manifest="file:///c/m.json"),
        GroupStopCommanded(header=hd(), command_id=f"{run_id}/g1/stop/node-a", node="node-a",
                           reason="cancelled"),
    ]
    assert {type(e).__name__ for e in events} == set(EVENT_TYPES), "sample set is incomplete"
    return events
