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


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeRequested(Event):
    """An operator asks to resume a run an alert paused (``runledger resume RUN``)."""

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
    # How many operations the requester saw applied to the node (its NodeCordoned and
    # NodeUncordoned facts): one decided on an older view is refused (controller.replays).
    # None: not said (a v1 writer); judged by its event id alone.
    epoch: int | None = None
    TOPIC: ClassVar[str] = "runledger.requests"

    def __post_init__(self) -> None:
        one_of(self.operation, NODE_OPERATIONS, "NodeOperationRequested.operation")
        if self.epoch is not None and self.epoch < 0:
            raise InvalidEvent(f"NodeOperationRequested.epoch must be >= 0, got {self.epoch}")
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


@dataclass(frozen=True, slots=True, kw_only=True)
class PilotCompleted(Event):
    """An operator's client ran a spec small and short; keyed ``spec/<hex digest>``.

    The pilot run (``pilot_run_id``) is the spec at ``replicas`` members for
    ``steps`` steps, with a checkpoint, a restore of it and the run's
    manifest. The figures are the inputs of Young's interval: the median step
    time, the median checkpoint cost (stall plus commit) and the restore time
    (verify plus load); each is None when the pilot never got that far. Like
    ``PreflightCompleted``, evidence for admission gates, not a controller input.
    """

    spec_digest: str
    principal: str
    verdict: str
    pilot_run_id: str
    steps: int
    replicas: int
    step_time_ms: float | None
    checkpoint_ms: float | None
    restore_ms: float | None
    checks: tuple[PreflightCheck, ...]
    TOPIC: ClassVar[str] = "runledger.requests"

    def __post_init__(self) -> None:
        _evidence(type(self).__name__, self.spec_digest, self.principal, self.verdict,
                  self.checks, PREFLIGHT_VERDICTS[:2])


@dataclass(frozen=True, slots=True, kw_only=True)
class DrillCompleted(Event):
    """One fault of a drill on a spec, and what the system did; keyed ``spec/<hex digest>``.

    ``fault`` names the injected fault (``runledger.drill`` lists them);
    ``verdict`` is ``skip`` when the spec's topology cannot show it (the reason
    in ``reason``), else whether every expected outcome held (the rows in
    ``checks``). ``rpo_s`` is the progress lost to the fault and ``rto_s`` the
    time from the fault to the first step after it, in seconds, when measured.
    """

    spec_digest: str
    principal: str
    fault: str
    verdict: str
    drill_run_id: str
    rpo_s: float | None
    rto_s: float | None
    reason: str
    checks: tuple[PreflightCheck, ...]
    TOPIC: ClassVar[str] = "runledger.requests"

    def __post_init__(self) -> None:
        _evidence(type(self).__name__, self.spec_digest, self.principal, self.verdict,
                  self.checks, PREFLIGHT_VERDICTS)
        if not self.fault:
            raise InvalidEvent("DrillCompleted.fault must be non-empty")


def _evidence(name: str, digest: str, principal: str, verdict: str,
              checks: tuple[PreflightCheck, ...], verdicts: tuple[str, ...]) -> None:
    if not digest:
        raise InvalidEvent(f"{name}.spec_digest must be non-empty")
    if not principal:
        raise InvalidEvent(f"{name}.principal must be non-empty")
    one_of(verdict, verdicts, f"{name}.verdict")
    for c in checks:
        one_of(c.verdict, PREFLIGHT_VERDICTS, f"{name}.checks[{c.check}].verdict")
