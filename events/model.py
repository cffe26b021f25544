"""The event catalog: every event class, by name, as frozen, slotted dataclasses.

The classes live by concern: ``events.base`` (``Header``, ``Member``, the
``Event`` base), ``events.requests`` (operators), ``events.facts`` (the
controller, ``runledger.runs``), ``events.reports`` (agents and workers),
``events.commands`` (the controller to agents), ``events.principals`` (admins'
key records, ``runledger.keys``). This module gathers them:
import any of them from here. Each class has a schema file
``schemas/<Name>.v<N>.avsc``; the codec checks at load time that the newest
version's fields are exactly the class's fields, and ``EVENT_TYPES`` is the
list it checks against.

Tested in tests/events/test_codec.py and tests/events/test_registry.py.
"""

from __future__ import annotations

from events.base import Event, Header, Member, node_key
from events.commands import GroupStartCommanded, GroupStopCommanded
from events.facts import (
    CORDON_MODES,
    FAILURE_ACTIONS,
    FAILURE_CLASSES,
    OUTCOMES,
    SEVERITIES,
    AlertRaised,
    AlertResolved,
    CheckpointIntervalChanged,
    CheckpointRevoked,
    CursorAdvanced,
    FailureClassified,
    GenerationStarted,
    ManifestCommitted,
    MembershipConfirmed,
    NodeCordoned,
    NodeQuarantined,
    NodeQuarantineExpired,
    NodeUncordoned,
    RunAdmitted,
    RunCancelled,
    RunFinished,
    RunQueued,
    WriteRejected,
    alert_key,
)
from events.principals import (
    PRINCIPAL_ROLES,
    PrincipalKeyRegistered,
    PrincipalKeyRevoked,
    principal_key,
)
from events.reports import (
    CHECKPOINT_STAGES,
    VERIFY_REASONS,
    AgentHeartbeatRecorded,
    AgentRegistered,
    CheckpointReplicated,
    CheckpointRestored,
    CheckpointSkipped,
    CheckpointStaged,
    CheckpointVerificationFailed,
    CheckpointWriteFailed,
    HeartbeatRecorded,
    ManifestProposed,
    ShardWritten,
    StepCommitted,
    StepTimesRecorded,
    WorkerExited,
)
from events.requests import (
    NODE_OPERATIONS,
    CancelRequested,
    NodeOperationRequested,
    RunSubmitted,
)

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
        CheckpointReplicated,
        WorkerExited,
        AgentRegistered,
        AgentHeartbeatRecorded,
        NodeQuarantined,
        NodeOperationRequested,
        NodeCordoned,
        NodeUncordoned,
        NodeQuarantineExpired,
        GroupStartCommanded,
        GroupStopCommanded,
        PrincipalKeyRegistered,
        PrincipalKeyRevoked,
    )
}

__all__ = [
    "CHECKPOINT_STAGES",
    "CORDON_MODES",
    "EVENT_TYPES",
    "FAILURE_ACTIONS",
    "FAILURE_CLASSES",
    "NODE_OPERATIONS",
    "OUTCOMES",
    "PRINCIPAL_ROLES",
    "SEVERITIES",
    "VERIFY_REASONS",
    "AgentHeartbeatRecorded",
    "AgentRegistered",
    "AlertRaised",
    "AlertResolved",
    "CancelRequested",
    "CheckpointIntervalChanged",
    "CheckpointReplicated",
    "CheckpointRestored",
    "CheckpointRevoked",
    "CheckpointSkipped",
    "CheckpointStaged",
    "CheckpointVerificationFailed",
    "CheckpointWriteFailed",
    "CursorAdvanced",
    "Event",
    "FailureClassified",
    "GenerationStarted",
    "GroupStartCommanded",
    "GroupStopCommanded",
    "Header",
    "HeartbeatRecorded",
    "ManifestCommitted",
    "ManifestProposed",
    "Member",
    "MembershipConfirmed",
    "NodeCordoned",
    "NodeOperationRequested",
    "NodeQuarantineExpired",
    "NodeQuarantined",
    "NodeUncordoned",
    "PrincipalKeyRegistered",
    "PrincipalKeyRevoked",
    "RunAdmitted",
    "RunCancelled",
    "RunFinished",
    "RunQueued",
    "RunSubmitted",
    "ShardWritten",
    "StepCommitted",
    "StepTimesRecorded",
    "WorkerExited",
    "WriteRejected",
    "alert_key",
    "node_key",
    "principal_key",
]
