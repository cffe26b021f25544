"""The evidence of the current generation's worker exits, as the controller keeps it. Pure.

``WorkerExited`` folds into ``RunState.exits`` as a bare code; the failure
rules need more: where the worker's output is, its last lines, whether it
never started, when it ended, and whether the generation had committed a
step by then (a failure before the first step, the same on every rank, is
the job's own; ``controller.policy``). :func:`observe` keeps that per run,
reset by each ``GenerationStarted``; it sees the same facts live and on
replay, so a restarted controller judges with the same evidence. It also keeps
which members said their session closed (a heartbeat with ``closing``): a report,
never on ``runledger.runs``, so a restarted controller starts without it and
counts their silence from when it began listening.

Tested in tests/controller/test_exits.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from events.model import (
    Event,
    GenerationStarted,
    HeartbeatRecorded,
    MembersHeartbeatRecorded,
    StepCommitted,
    WorkerExited,
)
from events.shelf import Shelf


@dataclass(frozen=True, slots=True)
class ExitNote:
    logical_id: str
    node: str
    exit_code: int | None
    signal: int | None
    at: int  # when the controller accepted the report (ms)
    log_path: str = ""
    stderr_tail: str = ""
    launch_error: str = ""
    stepped: bool = False  # the generation had committed a step before this exit


@dataclass(frozen=True, slots=True)
class Evidence:
    """The current generation's exits by logical id, and whether it has committed a step."""

    # Shelves (events.shelf): a generation of 10^5 members ends with 10^5 exits and
    # closing heartbeats, each of which must cost one key, not a copy of the map.
    exits: Mapping[str, ExitNote] = field(default_factory=Shelf)
    stepped: bool = False
    # Members whose session closed (``HeartbeatRecorded.closing``): their silence
    # from then on is teardown, judged by their exit within the exit grace.
    closing: Mapping[str, bool] = field(default_factory=Shelf)


EMPTY = Evidence()


def observe(evidence: Evidence, event: Event) -> Evidence:
    """The evidence after an accepted fact of the run."""
    match event:
        case GenerationStarted():
            return EMPTY
        case HeartbeatRecorded(closing=True) if event.logical_id not in evidence.closing:
            return replace(evidence, closing=Shelf.of(evidence.closing).with_(
                {event.logical_id: True}))
        case MembersHeartbeatRecorded():
            new = {b.logical_id: True for b in event.beats
                   if b.closing and b.logical_id not in evidence.closing}
            return replace(evidence, closing=Shelf.of(evidence.closing).with_(new)) if new \
                else evidence
        case StepCommitted():
            return evidence if evidence.stepped else replace(evidence, stepped=True)
        case WorkerExited():
            note = ExitNote(event.logical_id, event.node, event.exit_code, event.signal,
                            event.header.occurred_at, event.log_path, event.stderr_tail,
                            event.launch_error, evidence.stepped)
            return replace(evidence, exits=Shelf.of(evidence.exits).with_(
                {event.logical_id: note}))
    return evidence
