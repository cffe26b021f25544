"""The event catalog as Python values: frozen, slotted dataclasses.

Each class here has a schema file ``schemas/<Name>.v<N>.avsc``; the codec
checks at load time that the newest version's fields are exactly the class's
fields. Times are integer milliseconds since the epoch taken from the event's
writer (``occurred_at``); nothing in this module reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from events.errors import InvalidEvent


@dataclass(frozen=True, slots=True)
class Header:
    """The record every event starts with (DESIGN section 3)."""

    event_id: str
    run_id: str
    generation: int
    occurred_at: int
    producer: str
    causation_id: str | None = None
    schema_version: int = 1

    def __post_init__(self) -> None:
        for name in ("event_id", "run_id", "producer"):
            if not getattr(self, name):
                raise InvalidEvent(f"header.{name} must be a non-empty string")
        if self.generation < 0:
            raise InvalidEvent(f"header.generation must be >= 0, got {self.generation}")
        if self.occurred_at < 0:
            raise InvalidEvent(f"header.occurred_at must be >= 0 ms, got {self.occurred_at}")


@dataclass(frozen=True, slots=True)
class Member:
    """One slot of a worker group: a logical id placed on a node's slot."""

    logical_id: str
    node: str
    slot: int
    domain: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every event; ``header`` comes first in every schema."""

    header: Header
    # Which topic the writer is expected to use; a reader does not rely on it.
    TOPIC: ClassVar[str] = ""

    @property
    def run_id(self) -> str:
        return self.header.run_id

    @property
    def generation(self) -> int:
        return self.header.generation

    @property
    def event_type(self) -> str:
        return type(self).__name__


def _one_of(value: str, allowed: tuple[str, ...], where: str) -> None:
    if value not in allowed:
        raise InvalidEvent(f"{where} must be one of {', '.join(allowed)}; got {value!r}")


# --- requests (operators) -------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSubmitted(Event):
    """An operator submitted a run spec; the controller copies it into ``runs``."""

    spec_digest: str
    spec_json: str
    principal: str
    world_size: int
    dataset_id: str | None = None
    TOPIC: ClassVar[str] = "runledger.requests"

    def __post_init__(self) -> None:
        if not self.spec_digest:
            raise InvalidEvent("RunSubmitted.spec_digest must be non-empty")
        if not self.principal:
            raise InvalidEvent("RunSubmitted.principal must be non-empty")
        if self.world_size < 1:
            raise InvalidEvent(f"RunSubmitted.world_size must be >= 1, got {self.world_size}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRequested(Event):
    principal: str
    reason: str
    TOPIC: ClassVar[str] = "runledger.requests"


# --- facts (controller, runs topic) ----------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RunQueued(Event):
    reason: str
    TOPIC: ClassVar[str] = "runledger.runs"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunAdmitted(Event):
    """Gang admission: the whole group was placed, or this fact is not written."""

    members: tuple[Member, ...]
    TOPIC: ClassVar[str] = "runledger.runs"

    def __post_init__(self) -> None:
        if not self.members:
            raise InvalidEvent("RunAdmitted.members must name at least one member")


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationStarted(Event):
    """The run's fencing token advanced to ``header.generation``."""

    members: tuple[Member, ...]
    reason: str
    resume_step: int | None = None
    resume_manifest: str | None = None
    TOPIC: ClassVar[str] = "runledger.runs"


@dataclass(frozen=True, slots=True)
class MembershipConfirmed(Event):
    """Every member of the current generation has joined and is healthy."""

    members_joined: int
    TOPIC: ClassVar[str] = "runledger.runs"


@dataclass(frozen=True, slots=True, kw_only=True)
class ManifestCommitted(Event):
    """A proposed checkpoint manifest was accepted under the current generation."""

    step: int
    manifest_path: str
    manifest_digest: str
    TOPIC: ClassVar[str] = "runledger.runs"


@dataclass(frozen=True, slots=True, kw_only=True)
class CursorAdvanced(Event):
    """The durable data cursor moved with a committed optimizer step."""

    step: int
    dataset_id: str
    epoch: int
    position: int
    source_counts: dict[str, int]
    # v2: the mixture's normalized target weights, for drift checks and reports.
    mixture_targets: dict[str, float] | None = None
    TOPIC: ClassVar[str] = "runledger.runs"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRevoked(Event):
    """A committed checkpoint failed verification; "latest" falls back to the one before it."""

    step: int
    manifest_path: str
    manifest_digest: str
    reason: str
    TOPIC: ClassVar[str] = "runledger.runs"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointIntervalChanged(Event):
    """The controller set the checkpoint interval (Young's model, or the spec's fixed one)."""

    interval_steps: int
    interval_s: float | None
    cost_s: float | None
    mtbf_s: float | None
    mtbf_source: str
    TOPIC: ClassVar[str] = "runledger.runs"

    def __post_init__(self) -> None:
        _one_of(self.mtbf_source, ("fixed", "prior", "observed"),
                "CheckpointIntervalChanged.mtbf_source")


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteRejected(Event):
    """A report or proposal that was computed on but not accepted."""

    rejected_event_id: str
    rejected_event_type: str
    reason: str
    detail: str
    TOPIC: ClassVar[str] = "runledger.runs"


FAILURE_CLASSES = (
    "worker_crash",
    "hang",
    "straggler",
    "storage",
    "data",
    "non_finite",
    "silent_corruption",
    "infrastructure",
)
FAILURE_ACTIONS = ("restart", "requeue", "quarantine_node", "escalate")


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureClassified(Event):
    failure_class: str
    signature: str
    action: str
    attempt: int
    detail: str
    logical_id: str | None = None
    node: str | None = None
    backoff_ms: int | None = None
    TOPIC: ClassVar[str] = "runledger.runs"

    def __post_init__(self) -> None:
        _one_of(self.failure_class, FAILURE_CLASSES, "FailureClassified.failure_class")
        _one_of(self.action, FAILURE_ACTIONS, "FailureClassified.action")


SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertRaised(Event):
    """A rule's condition holds; raised once per (alert, subject) while it holds.

    v2 adds ``subject``, ``threshold`` and ``value``; v1 records read with their defaults.
    """

    alert: str
    severity: str
    owner: str
    runbook: str
    detail: str
    subject: str = ""
    threshold: str = ""
    value: float | None = None
    TOPIC: ClassVar[str] = "runledger.runs"

    def __post_init__(self) -> None:
        _one_of(self.severity, SEVERITIES, "AlertRaised.severity")

    @property
    def key(self) -> str:
        return alert_key(self.alert, self.subject)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertResolved(Event):
    """The condition of an open alert no longer holds (or the run ended)."""

    alert: str
    subject: str
    raised_event_id: str
    detail: str
    TOPIC: ClassVar[str] = "runledger.runs"

    @property
    def key(self) -> str:
        return alert_key(self.alert, self.subject)


def alert_key(alert: str, subject: str) -> str:
    """The deduplication key of an alert within its run."""
    return f"{alert}/{subject}" if subject else alert


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCancelled(Event):
    """Recorded first; it revokes the generation before any stop command."""

    principal: str
    reason: str
    TOPIC: ClassVar[str] = "runledger.runs"


OUTCOMES = ("succeeded", "failed")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished(Event):
    outcome: str
    reason: str
    TOPIC: ClassVar[str] = "runledger.runs"

    def __post_init__(self) -> None:
        _one_of(self.outcome, OUTCOMES, "RunFinished.outcome")


# --- reports (agents and workers) -------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRecorded(Event):
    logical_id: str
    node: str
    step: int
    TOPIC: ClassVar[str] = "runledger.reports"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCommitted(Event):
    """An optimizer step finished on every rank (reported by the coordinator)."""

    step: int
    tokens: int
    loss_tokens: int
    step_time_ms: float
    input_wait_ms: float
    loss: float | None = None
    TOPIC: ClassVar[str] = "runledger.reports"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTimesRecorded(Event):
    """One rank's own times for consecutive steps, batched; the coordinator's
    ``StepCommitted`` carries only its own view, so stragglers need these."""

    logical_id: str
    node: str
    first_step: int
    step_time_ms: tuple[float, ...]
    input_wait_ms: tuple[float, ...]
    TOPIC: ClassVar[str] = "runledger.reports"

    def __post_init__(self) -> None:
        if len(self.step_time_ms) != len(self.input_wait_ms):
            raise InvalidEvent("StepTimesRecorded.input_wait_ms must have one entry per step time")
        if not self.step_time_ms:
            raise InvalidEvent("StepTimesRecorded.step_time_ms must not be empty")


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardWritten(Event):
    step: int
    logical_id: str
    path: str
    bytes: int
    crc32c: int
    TOPIC: ClassVar[str] = "runledger.reports"


@dataclass(frozen=True, slots=True, kw_only=True)
class ManifestProposed(Event):
    """A coordinator's proposal to commit a checkpoint whose manifest is written.

    v2 adds the data cursor the checkpoint holds, so the controller records
    ``CursorAdvanced`` with the ``ManifestCommitted`` in one transaction.
    """

    step: int
    manifest_path: str
    manifest_digest: str
    dataset_id: str | None = None
    epoch: int | None = None
    position: int | None = None
    source_counts: dict[str, int] | None = None
    # v3: the mixture's normalized target weights, copied into CursorAdvanced.
    mixture_targets: dict[str, float] | None = None
    TOPIC: ClassVar[str] = "runledger.reports"


CHECKPOINT_STAGES = ("staging", "shards", "coverage", "manifest", "propose")
VERIFY_REASONS = (
    "manifest_missing", "manifest_digest", "manifest_invalid", "wrong_run", "wrong_dataset",
    "shard_missing", "shard_size", "shard_checksum", "coverage",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointStaged(Event):
    """The coordinator took an immutable copy of step ``step``'s state.

    ``stall_ms`` is what the training loop waited (the C of Young's model);
    ``waited_ms`` the part spent waiting for backlog room under the delay policy.
    """

    step: int
    mode: str
    stall_ms: float
    waited_ms: float
    bytes: int
    backlog: int
    durable_step: int | None = None
    TOPIC: ClassVar[str] = "runledger.reports"

    def __post_init__(self) -> None:
        _one_of(self.mode, ("sync", "async"), "CheckpointStaged.mode")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointSkipped(Event):
    """A due checkpoint was not taken: the async backlog was full under the skip policy."""

    step: int
    reason: str
    backlog: int
    TOPIC: ClassVar[str] = "runledger.reports"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointWriteFailed(Event):
    """A checkpoint write failed on a rank at a protocol stage (a storage fault)."""

    step: int
    logical_id: str
    stage: str
    detail: str
    TOPIC: ClassVar[str] = "runledger.reports"

    def __post_init__(self) -> None:
        _one_of(self.stage, CHECKPOINT_STAGES, "CheckpointWriteFailed.stage")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointVerificationFailed(Event):
    """A committed checkpoint failed verification before anything was loaded from it."""

    step: int
    manifest_path: str
    manifest_digest: str
    logical_id: str
    reason: str
    detail: str
    TOPIC: ClassVar[str] = "runledger.reports"

    def __post_init__(self) -> None:
        _one_of(self.reason, VERIFY_REASONS, "CheckpointVerificationFailed.reason")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRestored(Event):
    """A rank loaded a verified committed checkpoint; ``fell_back`` newer ones were refused."""

    step: int
    manifest_path: str
    manifest_digest: str
    logical_id: str
    verify_ms: float
    load_ms: float
    fell_back: int
    TOPIC: ClassVar[str] = "runledger.reports"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerExited(Event):
    logical_id: str
    node: str
    exit_code: int | None = None
    signal: int | None = None
    TOPIC: ClassVar[str] = "runledger.reports"


# --- inventory (agents on reports; the controller on runs) -----------------
# Node-scoped events use the pseudo run id ``node/<name>`` so they stay keyed
# and ordered per node; ``events.fold`` never treats them as runs.


def node_key(node: str) -> str:
    """The ``run_id`` header value of a node-scoped event."""
    return f"node/{node}"


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRegistered(Event):
    """A node agent started and offers ``slots`` worker slots in ``domain``."""

    node: str
    slots: int
    domain: str
    # Where workers on this node are reachable (rank 0 is the rendezvous master).
    address: str = "127.0.0.1"
    TOPIC: ClassVar[str] = "runledger.reports"

    def __post_init__(self) -> None:
        if not self.node:
            raise InvalidEvent("AgentRegistered.node must be non-empty")
        if self.slots < 1:
            raise InvalidEvent(f"AgentRegistered.slots must be >= 1, got {self.slots}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentHeartbeatRecorded(Event):
    """A node agent is alive; ``busy_slots`` are held by worker processes."""

    node: str
    slots: int
    domain: str
    # Where workers on this node are reachable (rank 0 is the rendezvous master).
    address: str = "127.0.0.1"
    busy_slots: int
    TOPIC: ClassVar[str] = "runledger.reports"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeQuarantined(Event):
    """The controller stopped placing work on a node after repeated failures there."""

    node: str
    reason: str
    TOPIC: ClassVar[str] = "runledger.runs"


# --- commands (controller, commands topic) ----------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupStartCommanded(Event):
    """Start this node's part of a generation's worker group.

    ``command_id`` is deterministic (run, generation, node), so a re-issued
    command is recognisably the same one and agents drop the duplicate.
    """

    command_id: str
    node: str
    members: tuple[Member, ...]
    world_size: int
    master_addr: str
    master_port: int
    argv: tuple[str, ...]
    env: dict[str, str]
    resume_step: int | None = None
    resume_manifest: str | None = None
    TOPIC: ClassVar[str] = "runledger.commands"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupStopCommanded(Event):
    """Stop every worker of ``header.generation`` (and older) of this run on a node."""

    command_id: str
    node: str
    reason: str
    TOPIC: ClassVar[str] = "runledger.commands"


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        RunSubmitted,
        CancelRequested,
        RunQueued,
        RunAdmitted,
        GenerationStarted,
        MembershipConfirmed,
        ManifestCommitted,
        CursorAdvanced,
        CheckpointRevoked,
        CheckpointIntervalChanged,
        WriteRejected,
        FailureClassified,
        AlertRaised,
        AlertResolved,
        RunCancelled,
        RunFinished,
        HeartbeatRecorded,
        StepCommitted,
        StepTimesRecorded,
        ShardWritten,
        ManifestProposed,
        CheckpointStaged,
        CheckpointSkipped,
        CheckpointWriteFailed,
        CheckpointVerificationFailed,
        CheckpointRestored,
        WorkerExited,
        AgentRegistered,
        AgentHeartbeatRecorded,
        NodeQuarantined,
        GroupStartCommanded,
        GroupStopCommanded,
    )
}
