"""Who may say what: every event type's topic, the role that sends it, and size limits.

One table (:data:`SENDERS`) for the whole system (docs/architecture.md §4):
operators send requests (and the evidence of :data:`EVIDENCE`, a preflight's
result), agents report on their node and its workers, workers
report on their run, only the controller writes facts and commands, and only
an admin writes key records (``runledger.keys``, ``events.principals``). The
controller's input path admits a record only when its type is one it takes and
it arrived on its type's topic (:func:`stray`); anything else is quarantined
with its origin, never folded and never copied onto ``runledger.runs``. The
security work enforces the same table at the broker (ACLs per role).

Sizes are bounded at the same door (:func:`oversize`): a record larger than its
topic's limit is quarantined, so one report cannot make the controller hold or
copy megabytes; and so are names (:func:`names_problem`): a run id or node name
outside ``events.names``' charset never reaches the controller.

Tested in tests/events/test_authority.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from events.errors import DecodeError
from events.model import (
    EVENT_TYPES,
    AgentHeartbeatRecorded,
    AgentRegistered,
    Event,
    MembersHeartbeatRecorded,
    NodeOperationRequested,
)
from events.names import BAD_NAME, host_problem, key_problem
from events.record import Record
from events.topics import COMMANDS, KEYS, REPORTS, REQUESTS, RUNS


class Role(StrEnum):
    OPERATOR = "operator"
    AGENT = "agent"
    WORKER = "worker"
    CONTROLLER = "controller"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Sender:
    topic: str
    role: Role


# Reports by agents, not workers: the node's life and the exits of the processes it ran.
# A node's aggregated member heartbeats are the agent's word too (it read the beat files).
_AGENT_REPORTS = frozenset({"AgentRegistered", "AgentHeartbeatRecorded", "WorkerExited",
                            "MembersHeartbeatRecorded"})
_ROLE_OF_TOPIC = {REQUESTS: Role.OPERATOR, RUNS: Role.CONTROLLER, COMMANDS: Role.CONTROLLER,
                  KEYS: Role.ADMIN}


def _sender(cls: type[Event]) -> Sender:
    if cls.TOPIC == REPORTS:
        return Sender(REPORTS, Role.AGENT if cls.__name__ in _AGENT_REPORTS else Role.WORKER)
    return Sender(cls.TOPIC, _ROLE_OF_TOPIC[cls.TOPIC])


SENDERS: Mapping[type[Event], Sender] = {cls: _sender(cls) for cls in EVENT_TYPES.values()}

# The controller's inputs: requests and reports. Facts and commands are its outputs only.
INPUT_TOPICS = (REQUESTS, REPORTS)

# Records on an input topic that are evidence, not inputs: the controller takes
# nothing from one when it arrives (``controller.inputs`` has no rule for it). A
# preflight's (pilot's, drill's) result is an operator client's observation about a spec, sent where
# operators may write and keyed ``spec/<hex digest>``, so admission gates can look
# it up by digest; it decides nothing by itself.
EVIDENCE: frozenset[str] = frozenset({"PreflightCompleted", "PilotCompleted", "DrillCompleted"})

# Record size limits per input topic, in bytes of the encoded value. A request
# carries a whole spec (itself limited to 990,000 bytes, ``events.limits``); this
# door passes every request a producer can send, and one whose copy would not
# fit is refused as a fact (``controller.fit``), not quarantined; a report is a few
# hundred bytes, a checkpoint proposal with a large mixture a few kilobytes.
MAX_BYTES: Mapping[str, int] = {REQUESTS: 2 * 1024 * 1024, REPORTS: 256 * 1024}

# Quarantine reasons (the ``reason`` header of the quarantined copy).
STRAY = "stray"
OVERSIZE = "oversize"


def stray(topic: str, event: Event) -> str | None:
    """Why ``event`` may not arrive on ``topic`` as a controller input, or None if it may."""
    sender = SENDERS.get(type(event))
    if sender is None:
        return f"{event.event_type} is not in the event catalog"
    if topic not in INPUT_TOPICS:
        return f"{topic} is not an input topic of the controller"
    if sender.topic != topic:
        return (f"{event.event_type} is sent by the {sender.role.value} on {sender.topic}, "
                f"not on {topic}")
    return None


def oversize(topic: str, size: int) -> str | None:
    """Why a record of ``size`` bytes is too large for ``topic``, or None."""
    limit = MAX_BYTES.get(topic)
    if limit is not None and size > limit:
        return f"{size} bytes on {topic} is over its limit of {limit} bytes"
    return None


def admit_input(record: Record, size: int) -> DecodeError | None:
    """The controller's door (``kafka.clients.Admit``): strays and oversize records are refused."""
    why = oversize(record.topic, size)
    if why is not None:
        return DecodeError(OVERSIZE, why)
    why = stray(record.topic, record.event)
    if why is not None:
        return DecodeError(STRAY, why)
    why = names_problem(record.event)
    return DecodeError(BAD_NAME, why) if why is not None else None


def names_problem(event: Event) -> str | None:
    """Why the names an input is keyed by are not valid (events.names), or None."""
    why = key_problem(event.run_id)
    if why is None and isinstance(event, AgentRegistered | AgentHeartbeatRecorded
                                  | MembersHeartbeatRecorded | NodeOperationRequested):
        why = host_problem(event.node)
    return why
