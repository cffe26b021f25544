"""The automatic checkpoint interval as the facts measure it: property I of ``proof.truth``.

A run whose spec asks for the automatic interval has the controller set it
from Young's first-order model (docs/architecture.md §7): ``T = sqrt(2CM)``
seconds, where C is the stall the coordinator reported staging the
checkpoint (or the spec's measured cost, when it declares one) and M the
mean time between the run's failures so far (from its submission, over the
failures the log classified), or the spec's prior before the first one. In
steps, T is divided by the step time measured between two stagings of one
generation, less the earlier one's stall: a restart's downtime and the steps
it trains again are not step time, so the first staging of a generation
sets nothing. The interval is bounded like a spec's (at least one step, at
most ``MAX_STEPS``), and it changes only when it differs from the current one
by a tenth of it or more.

:func:`expected` is that rule, from the facts alone. ``proof.truth`` holds each
``CheckpointIntervalChanged`` (and its absence) to it (:func:`judge_staging`),
and each start command to the interval the log holds (:func:`judge_start`).

Tested in tests/proof/test_cadence.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from controller.checkpoints import AutoInterval
from controller.emitter import Out
from controller.runplan import RunPlan
from controller.spec.bounds import MAX_COST_S, MAX_STEPS
from events.model import CheckpointIntervalChanged, CheckpointStaged, GroupStartCommanded
from events.state import RunState
from events.workerenv import CHECKPOINT_INTERVAL_STEPS
from proof.props import Violation

HYSTERESIS = 0.1  # a change smaller than this share of the current interval is none


@dataclass(frozen=True, slots=True)
class Change:
    """What a ``CheckpointIntervalChanged`` must say: the steps, and from what."""

    interval_steps: int
    cost_s: float | None  # optional in the fact; the rule always says it
    mtbf_s: float | None
    mtbf_source: str  # "observed" or "prior"


def expected(auto: AutoInterval, state: RunState, before: CheckpointStaged | None,
             staged: CheckpointStaged) -> Change | None:
    """The change ``staged`` calls for, given the same generation's staging ``before`` it
    (None: the first of its generation) and the run's state; None when none is due."""
    if before is None or before.generation != staged.generation or staged.step <= before.step:
        return None
    cost_s = staged.stall_ms / 1000.0 if auto.measured_cost_s is None else auto.measured_cost_s
    if cost_s <= 0 or cost_s > MAX_COST_S:
        return None
    at, then = staged.header.occurred_at, before.header.occurred_at
    step_s = ((at - then) / 1000.0 - before.stall_ms / 1000.0) / (staged.step - before.step)
    if not step_s > 0 or math.isinf(step_s):
        return None
    if state.failure_count and at > state.submitted_at:
        mtbf_s, source = (at - state.submitted_at) / 1000.0 / state.failure_count, "observed"
    else:
        mtbf_s, source = auto.mtbf_prior_s, "prior"
    seconds = math.sqrt(2.0 * cost_s * mtbf_s)
    steps = max(1, min(MAX_STEPS, round(min(seconds / step_s, MAX_STEPS))))
    current = state.checkpoint_interval_steps or auto.initial_interval_steps
    if abs(steps - current) < HYSTERESIS * current:
        return None
    return Change(steps, cost_s, mtbf_s, source)


def judge_staging(plan: RunPlan, state: RunState | None, before: CheckpointStaged | None,
                  staged: CheckpointStaged, outs: Sequence[Out]) -> None:
    """I: the transaction that appended ``staged`` changed the interval as the rule says."""
    auto = plan.auto_interval
    want = None if auto is None or state is None else expected(auto, state, before, staged)
    made = [x for _, x in outs if isinstance(x, CheckpointIntervalChanged)
            and x.header.causation_id == staged.header.event_id]
    got = Change(made[0].interval_steps, made[0].cost_s, made[0].mtbf_s,
                 made[0].mtbf_source) if made else None
    if len(made) > 1 or got != want:
        raise Violation("I", f"staging step {staged.step} of generation {staged.generation} "
                             f"changed the interval to {got}, where the rule says {want}")


def judge_start(plan: RunPlan, state: RunState | None, e: GroupStartCommanded) -> None:
    """I: a start command carries the interval the log holds (the plan's, until changed)."""
    assert plan.checkpoint is not None
    held = (state.checkpoint_interval_steps if state is not None else None) or \
        plan.checkpoint.interval_steps
    said = e.env.get(CHECKPOINT_INTERVAL_STEPS)
    if said != str(held):
        raise Violation("I", f"generation {e.generation} starts on {e.node} with interval "
                             f"{said}, and the log holds {held}")
