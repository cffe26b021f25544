"""What the alert rules watch per run beyond the folded state: the ``Watch``.

Updated by :func:`observe` from every accepted record of the run, live and on
replay alike (``controller.model`` folds both through one path), and read by
the rules in ``controller.alerts``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from events.model import (
    AlertRaised,
    CheckpointStaged,
    CursorAdvanced,
    Event,
    FailureClassified,
    GenerationStarted,
    ManifestCommitted,
    RunCancelled,
    RunFinished,
    StepCommitted,
    StepTimesRecorded,
)
from events.recovery import EMPTY as NO_RECOVERY
from events.recovery import KINDS as RECOVERY_FACTS
from events.recovery import Recovery
from events.recovery import observe as observe_recovery
from events.state import RunState

MAX_WINDOW = 128  # the most samples kept per rank and per run; bounds alerts.window_steps


@dataclass(frozen=True, slots=True)
class StepSeen:
    step: int
    step_time_ms: float
    input_wait_ms: float
    loss: float | None
    at: int
    event_id: str


@dataclass(frozen=True, slots=True)
class RankTimes:
    times: tuple[float, ...]  # the newest MAX_WINDOW step times of one rank
    event_id: str  # its newest StepTimesRecorded


@dataclass(frozen=True, slots=True)
class MixtureSeen:
    step: int
    counts: Mapping[str, int]
    targets: Mapping[str, float] | None
    event_id: str


@dataclass(frozen=True, slots=True)
class FailureSeen:
    count: int
    generation: int  # of the newest failure with this signature
    event_id: str


@dataclass(frozen=True, slots=True)
class Watch:
    """What the rules look at beyond the folded state, for one run.

    Facts (StepCommitted, CheckpointStaged, CursorAdvanced, FailureClassified,
    alerts, and for ``recovery`` also commits, replicas and revocations) rebuild
    it on replay. StepTimesRecorded stays a report, never a
    fact, so a restarted controller starts with no per-rank times: stragglers
    are judged again once each rank has reported MIN_SAMPLES steps, and an open
    straggler alert waits for that evidence.
    """

    steps: tuple[StepSeen, ...] = ()
    ranks: Mapping[str, RankTimes] = field(default_factory=dict)
    staged: tuple[int, int | None] | None = None  # the last CheckpointStaged: step, durable_step
    commit_id: str | None = None  # the newest ManifestCommitted
    mixture: MixtureSeen | None = None
    failures: Mapping[str, FailureSeen] = field(default_factory=dict)
    raised: Mapping[str, int] = field(default_factory=dict)  # AlertRaised per key, for ids
    ended_by: str | None = None  # the RunFinished or RunCancelled
    # Progress and checkpoint copies, for RPO per failure domain (events.recovery).
    recovery: Recovery = NO_RECOVERY


EMPTY = Watch()

def observe(watch: Watch, event: Event, before: RunState | None) -> Watch:
    """The watch after an accepted event; ``before`` is the run's state before it."""
    if isinstance(event, RECOVERY_FACTS):
        rec = observe_recovery(watch.recovery, event)
        if rec is not watch.recovery:
            watch = replace(watch, recovery=rec)
    match event:
        case StepCommitted():
            seen = StepSeen(event.step, event.step_time_ms, event.input_wait_ms, event.loss,
                            event.header.occurred_at, event.header.event_id)
            return replace(watch, steps=(*watch.steps[-(MAX_WINDOW - 1):], seen))
        case StepTimesRecorded():
            old = watch.ranks.get(event.logical_id)
            times = ((old.times if old else ()) + event.step_time_ms)[-MAX_WINDOW:]
            rank = RankTimes(times, event.header.event_id)
            return replace(watch, ranks={**watch.ranks, event.logical_id: rank})
        case GenerationStarted():
            # A new worker group, maybe on other nodes: the old times say nothing of it.
            return replace(watch, steps=(), ranks={})
        case CheckpointStaged():
            return replace(watch, staged=(event.step, event.durable_step))
        case ManifestCommitted():
            return replace(watch, commit_id=event.header.event_id)
        case CursorAdvanced():
            mix = MixtureSeen(event.step, dict(event.source_counts),
                              None if event.mixture_targets is None else
                              dict(event.mixture_targets), event.header.event_id)
            return replace(watch, mixture=mix)
        case FailureClassified():
            old_f = watch.failures.get(event.signature)
            f = FailureSeen((old_f.count if old_f else 0) + 1, event.generation,
                            event.header.event_id)
            return replace(watch, failures={**watch.failures, event.signature: f})
        case AlertRaised():
            if before is not None and event.key in before.open_alerts:
                return watch  # the fold ignored this duplicate, so the count does too
            n = watch.raised.get(event.key, 0) + 1
            return replace(watch, raised={**watch.raised, event.key: n})
        case RunFinished() | RunCancelled():
            # Nothing is judged after the end but closing open alerts: drop the windows.
            return Watch(failures=watch.failures, raised=watch.raised,
                         ended_by=event.header.event_id)
    return watch
