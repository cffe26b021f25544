"""Reports: what agents and workers observed, on ``runledger.reports``.

The controller judges them; the ones it accepts become facts (``events.facts``).
Node-scoped reports carry the pseudo run id ``events.base.node_key(node)``.

Tested in tests/events/test_codec.py and tests/events/test_compat.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from events.base import Event, one_of
from events.errors import InvalidEvent


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRecorded(Event):
    """A worker is alive at ``step``.

    v2 adds ``closing``: the worker's session has closed, and what follows is the
    process's teardown (interpreter exit, the process group's destructors), which
    a loaded node can stretch past the heartbeat timeout; the controller then
    judges the member by its exit, within its exit grace. v1 records read false.
    """

    logical_id: str
    node: str
    step: int
    closing: bool = False
    TOPIC: ClassVar[str] = "runledger.reports"


@dataclass(frozen=True, slots=True)
class MemberBeat:
    """One member's heartbeat as its agent read it from the member's beat file."""

    logical_id: str
    step: int
    closing: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class MembersHeartbeatRecorded(Event):
    """A node's agent read these members of one run's generation alive on its node.

    Node-aggregated liveness (docs/architecture.md §8): a worker launched by an
    agent writes its heartbeat to a beat file on its node instead of sending a
    record of its own, and the agent sends, per run and generation, the members
    whose beat moved since its last record, at the fastest heartbeat interval
    its runs ask for. One record per node where a run of 10^5 ranks would send
    10^5. Signed by the node's key; every member listed must be placed on
    ``node`` in the generation, or the record is refused whole. Each entry means
    exactly what a ``HeartbeatRecorded`` of that member would.
    """

    node: str
    beats: tuple[MemberBeat, ...]
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
    ``StepCommitted`` carries only its own view, so stragglers need these.

    v2 adds ``device``: what the rank stepped on (``cpu``, or ``cuda: <name>``), so
    the report names device hours by the devices a run had; v1 records read None.
    """

    logical_id: str
    node: str
    first_step: int
    step_time_ms: tuple[float, ...]
    input_wait_ms: tuple[float, ...]
    device: str | None = None
    TOPIC: ClassVar[str] = "runledger.reports"

    def __post_init__(self) -> None:
        if len(self.step_time_ms) != len(self.input_wait_ms):
            raise InvalidEvent("StepTimesRecorded.input_wait_ms must have one entry per step time")
        if not self.step_time_ms:
            raise InvalidEvent("StepTimesRecorded.step_time_ms must not be empty")
        if self.first_step + len(self.step_time_ms) - 1 > 2**63 - 1:
            raise InvalidEvent("StepTimesRecorded: its last step does not fit a long")


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
        one_of(self.mode, ("sync", "async"), "CheckpointStaged.mode")


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
        one_of(self.stage, CHECKPOINT_STAGES, "CheckpointWriteFailed.stage")


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
        one_of(self.reason, VERIFY_REASONS, "CheckpointVerificationFailed.reason")


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
    tier: str = ""  # v2: the storage tier it was loaded from; v1 records read ""
    TOPIC: ClassVar[str] = "runledger.reports"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointReplicated(Event):
    """A committed checkpoint's files were copied to storage tier ``tier`` and verified there.

    ``protects`` is the widest failure domain whose loss that copy survives;
    ``lag_ms`` the durability lag: from the commit verdict to the verified copy.
    """

    step: int
    manifest_digest: str
    manifest_path: str  # the copy's manifest, under the tier's root
    logical_id: str
    tier: str
    protects: str
    lag_ms: float
    bytes: int
    TOPIC: ClassVar[str] = "runledger.reports"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerExited(Event):
    """A worker ended, or never started (``launch_error``; exit code 126 or 127).

    v2 adds the evidence: ``log_path`` (the worker's stdout and stderr, on
    the agent's node), ``stderr_tail`` (the last at most 4 KiB of that output)
    and ``launch_error``. v1 records read with all three empty.
    """

    logical_id: str
    node: str
    exit_code: int | None = None
    signal: int | None = None
    log_path: str = ""
    stderr_tail: str = ""
    launch_error: str = ""
    TOPIC: ClassVar[str] = "runledger.reports"


# --- inventory: node-scoped, under the pseudo run id ``node_key(node)`` -------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRegistered(Event):
    """A node agent started and offers ``slots`` worker slots in ``domain``.

    v2 adds ``work_dir``: the agent's work dir, absolute, on its node, under
    which its workers' log files lie (``events.workerlog``), so a running
    worker's log can be found; v1 records read with it empty. v3 adds the
    node's ``python_version`` and ``torch_version`` (``-``: no torch), which
    ``runledger preflight`` compares across nodes; older records read with them empty.
    """

    node: str
    slots: int
    domain: str
    # Where workers on this node are reachable (rank 0 is the rendezvous master).
    address: str = "127.0.0.1"
    work_dir: str = ""
    python_version: str = ""
    torch_version: str = ""
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
