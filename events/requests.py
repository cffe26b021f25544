"""Requests: what operators ask of the controller (``runledger.requests``).

Tested in tests/events/test_codec.py and tests/events/test_compat.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from events.base import Event, one_of
from events.errors import InvalidEvent


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


NODE_OPERATIONS = ("cordon", "uncordon", "drain")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeOperationRequested(Event):
    """An operator asks to cordon, uncordon or drain a node; keyed ``node/<name>``."""

    node: str
    operation: str
    principal: str
    reason: str
    TOPIC: ClassVar[str] = "runledger.requests"

    def __post_init__(self) -> None:
        one_of(self.operation, NODE_OPERATIONS, "NodeOperationRequested.operation")
        if not self.principal:
            raise InvalidEvent("NodeOperationRequested.principal must be non-empty")


PREFLIGHT_VERDICTS = ("pass", "fail", "skip")


@dataclass(frozen=True, slots=True)
class PreflightCheck:
    """One preflight check: what was checked, its verdict, figure and threshold, and why."""

    check: str
    subject: str
    verdict: str
    figure: float | None
    threshold: float | None
    unit: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PreflightCompleted(Event):
    """An operator's client checked the path a spec would use; keyed ``spec/<hex digest>``.

    The client's observation, not a controller decision: it is sent on
    ``runledger.requests`` (the operator's topic), so admission gates can find
    it by the spec's digest. ``verdict`` is ``pass`` when no check failed.
    """

    spec_digest: str
    principal: str
    verdict: str
    checks: tuple[PreflightCheck, ...]
    TOPIC: ClassVar[str] = "runledger.requests"

    def __post_init__(self) -> None:
        if not self.spec_digest:
            raise InvalidEvent("PreflightCompleted.spec_digest must be non-empty")
        if not self.principal:
            raise InvalidEvent("PreflightCompleted.principal must be non-empty")
        one_of(self.verdict, PREFLIGHT_VERDICTS[:2], "PreflightCompleted.verdict")
        for c in self.checks:
            one_of(c.verdict, PREFLIGHT_VERDICTS, f"PreflightCompleted.checks[{c.check}].verdict")
