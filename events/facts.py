"""Facts: what the controller accepted, on ``runledger.runs``, the authoritative record.

Tested in tests/events/test_codec.py and tests/events/test_compat.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from events.base import Event, Member, one_of
from events.errors import InvalidEvent


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
    # v2: the data-parallel replicas and the micro-batches each runs per optimizer
    # step (controller.elastic); None in a v1 record, which did not say.
    replicas: int | None = None
    accumulation: int | None = None
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
        one_of(self.mtbf_source, ("fixed", "prior", "observed"),
                "CheckpointIntervalChanged.mtbf_source")


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteRejected(Event):
    """A report or proposal that was computed on but not accepted.

    v2: ``member`` and ``rejected_generation`` name the sender, and ``repeats``
    counts the rejections of the same (run, generation, member, reason) that
    this record also stands for (controller.rejections aggregates them).
    """

    rejected_event_id: str
    rejected_event_type: str
    reason: str
    detail: str
    member: str | None = None
    rejected_generation: int | None = None
    repeats: int = 0
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
    "job",
)
FAILURE_ACTIONS = ("restart", "requeue", "quarantine_node", "escalate")


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureClassified(Event):
    """A generation failed; its class, signature and the policy's action.

    v2 carries the evidence of a worker's failure into the log: ``log_path``
    and ``stderr_tail`` copied from its ``WorkerExited`` (v1 reads them empty).
    """

    failure_class: str
    signature: str
    action: str
    attempt: int
    detail: str
    logical_id: str | None = None
    node: str | None = None
    backoff_ms: int | None = None
    log_path: str = ""
    stderr_tail: str = ""
    TOPIC: ClassVar[str] = "runledger.runs"

    def __post_init__(self) -> None:
        one_of(self.failure_class, FAILURE_CLASSES, "FailureClassified.failure_class")
        one_of(self.action, FAILURE_ACTIONS, "FailureClassified.action")


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
        one_of(self.severity, SEVERITIES, "AlertRaised.severity")

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


@dataclass(frozen=True, slots=True, kw_only=True)
class RunPaused(Event):
    """An alert whose action is ``pause`` fired: the generation is revoked and stopped,
    and the run waits, queued, until an operator resumes it (``RunResumed``)."""

    alert: str
    subject: str
    reason: str
    TOPIC: ClassVar[str] = "runledger.runs"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResumed(Event):
    """An operator resumed a paused run (``ResumeRequested``): it may be admitted again."""

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
        one_of(self.outcome, OUTCOMES, "RunFinished.outcome")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunManifestPublished(Event):
    """The post-run manifest of a run that ended (``events.runmanifest``): the SHA-256
    of its canonical JSON, where ``run-manifest.json`` was written ('' when the run
    has no checkpoint root: then the log alone keeps it, rebuilt by
    ``runledger query manifest``), and its key figures."""

    digest: str
    path: str
    status: str
    checkpoint_step: int | None
    accepted_loss_tokens: int
    discarded_loss_tokens: int
    incidents: int
    cost: float | None
    TOPIC: ClassVar[str] = "runledger.runs"

    def __post_init__(self) -> None:
        if not self.digest.startswith("sha256:"):
            raise InvalidEvent(f"RunManifestPublished.digest must be sha256:<hex>, "
                               f"got {self.digest!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeQuarantined(Event):
    """The controller stopped placing work on a node after repeated failures there.

    v2 adds ``expires_at``: when the controller's quarantine expiry will free the
    node (``NodeQuarantineExpired``), in ms; 0 when only an uncordon frees it. v1
    records read with 0.
    """

    node: str
    reason: str
    expires_at: int = 0
    TOPIC: ClassVar[str] = "runledger.runs"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLost(Event):
    """A node of the run's live generation disappeared (controller.lost): its agent and
    its members silent past the loss threshold, none of them exited. Keyed by the run,
    before the ``FailureClassified`` that attributes the failure to ``node``;
    ``consequences`` are the failures elsewhere that followed it, not causes."""

    node: str
    last_seen_at: int  # the fault's first evidence: the node's last report (ms)
    members: tuple[str, ...]
    consequences: tuple[str, ...] = ()
    TOPIC: ClassVar[str] = "runledger.runs"


CORDON_MODES = ("cordon", "drain")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeCordoned(Event):
    """An operator stopped new placements on a node (``mode`` cordon), or drained it
    (``mode`` drain: no restart there either; its running generations run on)."""

    node: str
    mode: str
    principal: str
    reason: str
    TOPIC: ClassVar[str] = "runledger.runs"

    def __post_init__(self) -> None:
        one_of(self.mode, CORDON_MODES, "NodeCordoned.mode")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeUncordoned(Event):
    """An operator freed a node: its cordon, drain and quarantine are lifted and its
    failure count starts again at 0 (``failures_cleared`` is the count it had)."""

    node: str
    principal: str
    reason: str
    failures_cleared: int
    TOPIC: ClassVar[str] = "runledger.runs"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeQuarantineExpired(Event):
    """A quarantine outlived the controller's expiry: the node takes work again, on
    probation: its failure count is set to ``failures`` (one short of a quarantine)."""

    node: str
    reason: str
    failures: int
    TOPIC: ClassVar[str] = "runledger.runs"
