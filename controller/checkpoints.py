"""The controller's checkpoint decisions, as pure functions of folded state and reports.

- Commit: a ``ManifestProposed`` is committed only if the fold accepts it
  (current generation, step forward) and every member of the generation has
  reported ``ShardWritten`` for that step; the data cursor it carries is
  committed at the same boundary (``CursorAdvanced`` in the same transaction).
- Revoke: a committed checkpoint that failed a worker's verification is
  revoked, so "latest" falls back to the one before it; so is every committed
  checkpoint at or after a silent-data-corruption suspicion's step (reason
  ``corruption_suspected``), newest first, so the restart resumes from the
  newest one before it.
- Resume: a new generation is told the run's checkpoint settings and its
  committed checkpoints, newest first, within the rollback window, and, while
  a suspicion is open, the step it must replay (``RUNLEDGER_SDC_REPLAY``).
- Interval: with the auto policy, Young's ``T = sqrt(2CM)`` from the measured
  stall C and the run's own MTBF (the spec's prior until it has failures),
  turned into steps with the observed step time; each change is a fact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from controller.spec.bounds import MAX_COST_S, MAX_STEPS
from controller.spec.parts import young_interval_s
from events.fold_sdc import CORRUPTION_SUSPECTED
from events.model import (
    CheckpointIntervalChanged,
    CheckpointRevoked,
    CheckpointStaged,
    CheckpointVerificationFailed,
    CorruptionSuspected,
    CursorAdvanced,
    Event,
    Header,
    ManifestCommitted,
    ManifestProposed,
    ShardWritten,
)
from events.sdcenv import SdcReplay
from events.state import RunState
from events.workerenv import CheckpointEnv

INCOMPLETE_SHARDS = "incomplete_shards"
# An interval change smaller than this fraction is not worth a fact.
INTERVAL_HYSTERESIS = 0.1

# Who reported ShardWritten, per (generation, step) of one run, not yet committed.
Shards = Mapping[tuple[int, int], frozenset[str]]
HeaderFor = Callable[[str, str | None], Header]  # (event id, causation id) -> header


@dataclass(frozen=True, slots=True)
class AutoInterval:
    mtbf_prior_s: float
    measured_cost_s: float | None
    initial_interval_steps: int


@dataclass(frozen=True, slots=True)
class Staged:
    """The previous ``CheckpointStaged`` of a run: where the step-time estimate starts."""

    step: int
    at: int  # ms
    stall_ms: float
    generation: int  # only a staging of the same generation times its steps


def track_shard(shards: Shards, e: ShardWritten) -> Shards:
    key = (e.generation, e.step)
    return {**shards, key: shards.get(key, frozenset()) | {e.logical_id}}


def prune_shards(shards: Shards, step: int) -> Shards:
    """Forget the run's shard reports at or before a committed step."""
    return {k: v for k, v in shards.items() if k[1] > step}


def missing_shards(state: RunState, shards: Shards, e: ManifestProposed) -> list[str]:
    reported = shards.get((e.generation, e.step), frozenset())
    return sorted(m.logical_id for m in state.members if m.logical_id not in reported)


def commit_events(e: ManifestProposed, header_for: HeaderFor) -> list[Event]:
    cause = e.header.event_id
    out: list[Event] = [ManifestCommitted(
        header=header_for(f"{cause}/ManifestCommitted", cause), step=e.step,
        manifest_path=e.manifest_path, manifest_digest=e.manifest_digest)]
    if (e.dataset_id is not None and e.epoch is not None and e.position is not None
            and e.source_counts is not None):
        out.append(CursorAdvanced(
            header=header_for(f"{cause}/CursorAdvanced", cause), step=e.step,
            dataset_id=e.dataset_id, epoch=e.epoch, position=e.position,
            source_counts=dict(e.source_counts),
            mixture_targets=None if e.mixture_targets is None else dict(e.mixture_targets)))
    return out


def revocation(state: RunState, e: CheckpointVerificationFailed,
               header_for: HeaderFor) -> CheckpointRevoked | None:
    if e.manifest_digest not in {c.manifest_digest for c in state.checkpoints}:
        return None  # already revoked, or never committed: nothing to undo
    cause = e.header.event_id
    return CheckpointRevoked(header=header_for(f"{cause}/CheckpointRevoked", cause),
                             step=e.step, manifest_path=e.manifest_path,
                             manifest_digest=e.manifest_digest, reason=e.reason)


def suspicion_revocations(state: RunState, e: CorruptionSuspected,
                          header_for: HeaderFor) -> list[CheckpointRevoked]:
    """Every committed checkpoint at or after the suspect step, newest first: its state
    was produced after the detector distrusted it (``state``: after the suspicion)."""
    cause = e.header.event_id
    return [CheckpointRevoked(header=header_for(f"{cause}/CheckpointRevoked/{c.step}", cause),
                              step=c.step, manifest_path=c.manifest_path,
                              manifest_digest=c.manifest_digest, reason=CORRUPTION_SUSPECTED)
            for c in reversed(state.checkpoints) if c.step >= e.step]


def resume_env(settings: CheckpointEnv | None, state: RunState,
               domain: str = "process") -> dict[str, str]:
    """The checkpoint part of a start command's env for the next generation;
    ``domain`` is the failure the restore must survive (``Start.domain``). While a
    suspicion is open it also names the step to replay (``events.sdcenv.SdcReplay``)."""
    s = state.suspicion
    replay = {} if s is None else SdcReplay(step=s.step, generation=s.generation,
                                            fingerprints=s.fingerprints,
                                            ranks=s.ranks).to_environ()
    if settings is None:
        return replay
    window = settings.rollback_window
    candidates = tuple((c.step, c.manifest_path, c.manifest_digest)
                       for c in reversed(state.checkpoints[-window:]))
    interval = state.checkpoint_interval_steps or settings.interval_steps
    return {**replace(settings, candidates=candidates, interval_steps=interval,
                      failure_domain=domain).to_environ(), **replay}


def interval_decision(
    auto: AutoInterval, state: RunState, previous: Staged | None, e: CheckpointStaged,
    header_for: HeaderFor,
) -> CheckpointIntervalChanged | None:
    """Young's interval in steps, when it differs enough from the current one."""
    if previous is None or previous.generation != e.generation or e.step <= previous.step:
        # The step time is unknown until two checkpoints of one generation: time across a
        # restart holds its downtime and the steps trained again, and an interval made
        # from it would checkpoint every step.
        return None
    cost_s = auto.measured_cost_s if auto.measured_cost_s is not None else e.stall_ms / 1000.0
    if not 0 < cost_s <= MAX_COST_S:
        return None  # nothing measured, or a stall no spec may declare: not a basis for T
    elapsed_s = (e.header.occurred_at - previous.at) / 1000.0 - previous.stall_ms / 1000.0
    step_s = elapsed_s / (e.step - previous.step)
    if not (math.isfinite(step_s) and step_s > 0):
        return None
    if state.failure_count > 0 and state.submitted_at < e.header.occurred_at:
        mtbf_s = (e.header.occurred_at - state.submitted_at) / 1000.0 / state.failure_count
        source = "observed"
    else:
        mtbf_s, source = auto.mtbf_prior_s, "prior"
    interval_s = young_interval_s(cost_s, mtbf_s)
    # Bounded like a spec's interval_steps, so the fact fits its Avro long however
    # short the observed step time.
    steps = min(MAX_STEPS, max(1, round(min(interval_s / step_s, MAX_STEPS))))
    current = state.checkpoint_interval_steps or auto.initial_interval_steps
    if abs(steps - current) < INTERVAL_HYSTERESIS * current:
        return None
    cause = e.header.event_id
    return CheckpointIntervalChanged(
        header=header_for(f"{cause}/CheckpointIntervalChanged", cause), interval_steps=steps,
        interval_s=interval_s, cost_s=cost_s, mtbf_s=mtbf_s, mtbf_source=source)
