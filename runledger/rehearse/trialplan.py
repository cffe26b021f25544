"""A trial run's spec, derived from the user's: small, short, labelled, maybe faulty. Pure.

``runledger pilot`` and ``runledger drill`` run the user's own spec on the live
stack, but not as written: at a few replicas, for a few steps, with a
checkpoint often enough to see two commits, and (for a drill) a fault named in
the workers' environment. :func:`derive` makes that spec from a loaded
:class:`controller.spec.runspec.RunSpec` (its dataset already pinned) and a
:class:`Trial`, by these rules:

1. name: ``<name>-<label>``, the name cut so the whole stays a valid spec name;
2. length: ``model.steps`` set to ``Trial.steps`` (never above the spec's own);
   a spec without an integer ``model.steps`` cannot be shortened, and is
   refused naming the field (a trial must not invent a key the job may ignore);
3. size: ``topology.replicas`` set to ``Trial.replicas``; an elastic spec gets
   ``membership.min``/``max`` from ``Trial.elastic`` (default: both the replicas,
   so the trial does not grow or shrink unless asked);
4. checkpoints: a fixed interval of ``steps // 3`` steps (at least 1), so the
   trial commits at least two checkpoints (three when ``steps >= 3``); the
   spec's storage (root or tiers, mode, retention) is kept;
5. environment: ``Trial.env`` added to the spec's ``env`` (faults:
   ``RUNLEDGER_FAULT``, ``worker/faults.py``);
6. heartbeat: ``timeout_s`` and ``stall_timeout_s`` replaced when given (the
   progress-stall alert then falls back to its default, half the stall timeout);
7. admission ``gates`` removed: a trial is how a spec earns its gates;
8. the result validates as a ``RunSpec``, or :class:`TrialPlanError` names why.

:func:`first_commit_fault` is the fault the pilot uses: every rank dies right
after the first checkpoint's commit in generation 1, so generation 2 must
restore that checkpoint.

Tested in tests/runledger/rehearse/test_trialplan.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.errors import SpecError
from controller.spec.runspec import NAME_MAX, RunSpec, parse_spec_json
from runledger.errors import RunledgerError

STEPS_FIELD = "model.steps"
FAULT_ENV = "RUNLEDGER_FAULT"  # worker/faults.py ENV
GATES = "gates"


class TrialPlanError(RunledgerError):
    """The spec cannot be made into a trial; the message names the field and what to do."""


@dataclass(frozen=True, slots=True)
class Trial:
    """How a trial differs from its spec.

    ``label``: the name's suffix (``pilot``, ``drill-kill``); ``steps``,
    ``replicas``: its length and size; ``elastic``: ``(min, max)`` for an
    elastic spec; ``env``: extra worker environment; ``timeout_s`` and
    ``stall_timeout_s``: shorter heartbeat limits, when given.
    """

    label: str
    steps: int
    replicas: int
    elastic: tuple[int, int] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    stall_timeout_s: float | None = None


def spec_steps(spec: RunSpec) -> int:
    """The job's length, ``model.steps``; refused naming the field when it has none."""
    return _steps(spec.model, spec.name)


def _steps(model: Mapping[str, Any], name: str) -> int:
    steps = model.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        got = "has none" if steps is None else f"has {steps!r}, not a positive integer"
        raise TrialPlanError(
            f"{STEPS_FIELD}: spec {name} {got}, so a trial cannot shorten the job: give"
            f" the job's length in optimizer steps as {STEPS_FIELD} (and have the job read it)")
    return steps


def default_replicas(spec: RunSpec) -> int:
    """The smallest size the spec allows: an elastic spec's ``min``, else at most 2."""
    if spec.membership.kind == "elastic":
        return spec.membership.min
    return min(spec.topology.replicas, 2)


def interval_for(steps: int) -> int:
    """Rule 4: a fixed interval that commits at least twice in ``steps`` steps."""
    return max(1, steps // 3)


def first_commit_fault(steps: int) -> str:
    """``RUNLEDGER_FAULT`` for a crash right after generation 1's first commit."""
    return f"after_commit@{interval_for(steps)}:gen=1"


def derive(spec: RunSpec, trial: Trial) -> RunSpec:
    """The trial's spec (rules 1-8 of the module docstring)."""
    return derive_json(spec.canonical_json(), trial)


def derive_json(spec_json: str, trial: Trial) -> RunSpec:
    """:func:`derive` from a spec's canonical JSON (which may carry keys, ``gates``,
    that only a newer ``RunSpec`` knows)."""
    doc: dict[str, Any] = json.loads(spec_json)
    name = str(doc["name"])
    own = _steps(doc["model"], name)
    steps = min(trial.steps, own)
    if steps < 2:
        what = f"--steps {trial.steps}" if trial.steps < 2 else f"{STEPS_FIELD} {own}"
        raise TrialPlanError(f"{what}: a trial needs at least 2 steps to commit two"
                             " checkpoints")
    doc.pop(GATES, None)
    doc["name"] = trial_name(name, trial.label)
    doc["model"] = {**doc["model"], "steps": steps}
    doc.pop("model_digest", None)  # recomputed from the new model
    doc["topology"] = {**doc["topology"], "replicas": trial.replicas}
    if doc["membership"]["kind"] == "elastic":
        low, high = trial.elastic or (trial.replicas, trial.replicas)
        doc["membership"] = {**doc["membership"], "min": low, "max": high}
    doc["checkpoint"] = _fixed(doc["checkpoint"], interval_for(steps))
    doc["env"] = {**doc["env"], **trial.env}
    if trial.timeout_s is not None or trial.stall_timeout_s is not None:
        beat = dict(doc["heartbeat"])
        if trial.timeout_s is not None:
            beat["timeout_s"] = trial.timeout_s
        if trial.stall_timeout_s is not None:
            beat["stall_timeout_s"] = trial.stall_timeout_s
        doc["heartbeat"] = beat
        doc["alerts"] = {**doc["alerts"], "progress_stall_s": None}
    try:
        return parse_spec_json(json.dumps(doc), f"the {trial.label} spec derived from {name}")
    except SpecError as exc:
        raise TrialPlanError(f"{exc}; change the trial's options (--steps, --replicas) or"
                             " the spec") from None


def trial_name(name: str, label: str) -> str:
    """Rule 1: ``<name>-<label>``, within the name limit, ending in a letter or digit."""
    suffix = f"-{label}"
    return name[: max(1, NAME_MAX - len(suffix))].rstrip("-._") + suffix


def _fixed(checkpoint: dict[str, Any], interval: int) -> dict[str, Any]:
    """The checkpoint policy made fixed at ``interval``; storage and retention kept."""
    auto_only = ("mtbf_prior_s", "measured_cost_s", "initial_interval_steps")
    kept = {k: v for k, v in checkpoint.items() if k not in auto_only}
    return {**kept, "policy": "fixed", "interval_steps": interval}


__all__ = ["FAULT_ENV", "GATES", "STEPS_FIELD", "Trial", "TrialPlanError", "default_replicas",
           "derive", "derive_json", "first_commit_fault", "interval_for", "spec_steps",
           "trial_name"]
