"""The parts of a run spec the controller acts on, as plain values.

The reconcile core depends on this small shape rather than on the whole spec
model, so it stays a pure function of values and is cheap to test.
``plan_from_submission`` is the one place that reads a submitted spec.

Tested in tests/controller/test_model.py, tests/controller/test_reconcile.py and
tests/controller/test_elastic.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.alerts import AlertConfig
from controller.checkpoints import AutoInterval
from controller.elastic import Elastic
from controller.errors import SpecError
from controller.policy import RETRY_CLASSES
from controller.spec.parts import AutoCheckpoint, ElasticMembership, RetryPolicy
from controller.spec.runspec import FAULT_HOOKS, RunSpec, parse_spec_json
from controller.spec.sdc import sdc_env
from dataplane.documents import canonical_json
from events.model import RunSubmitted
from events.sdcenv import SdcEnv
from events.workerenv import CheckpointEnv, TierEnv

DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class RunPlan:
    world_size: int
    argv: tuple[str, ...]
    workdir: str = ""  # the spec's code.workdir; empty: the agent's work dir
    slots_per_node: int = 1 << 30
    domain: str | None = None
    ranks_per_replica: int = 1
    # membership: elastic (controller.elastic); None: a fixed world of world_size ranks.
    elastic: Elastic | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    heartbeat_interval_ms: int = 1_000
    heartbeat_timeout_ms: int = 10_000
    stall_timeout_ms: int = 60_000
    # A member that has not heartbeated yet in its generation is still starting
    # (process launch, imports, rendezvous): it gets this long, not the
    # heartbeat timeout, before it counts as hung.
    start_timeout_ms: int = 60_000
    cancel_authority: frozenset[str] = frozenset()
    retry: Mapping[str, RetryPolicy] = field(default_factory=dict)
    # What the worker session needs to checkpoint (passed in the start command's env).
    checkpoint: CheckpointEnv | None = None
    auto_interval: AutoInterval | None = None
    # The silent-data-corruption detectors (RUNLEDGER_SDC in every start command's env).
    sdc: SdcEnv | None = None  # None: the spec has no sdc section, no detector runs
    alerts: AlertConfig = field(default_factory=AlertConfig)
    # The gates that must have passed for the spec's digest before admission (controller.gates).
    gates: tuple[str, ...] = ()
    # Non-empty when the submitted spec could not be read: the run fails at once.
    invalid: str = ""

    @property
    def injects_faults(self) -> bool:
        """The spec sets a worker fault hook: a pilot's or drill's rehearsal."""
        return any(k in FAULT_HOOKS for k in self.env)

    def retry_for(self, failure_class: str) -> RetryPolicy:
        return self.retry.get(failure_class, DEFAULT_RETRY)


def plan_from_submission(event: RunSubmitted) -> RunPlan:
    """The plan of a submitted run; a spec that does not validate fails the run."""
    try:
        spec = parse_spec_json(event.spec_json, f"run {event.run_id}")
    except SpecError as exc:
        return RunPlan(world_size=max(1, event.world_size), argv=(), invalid=str(exc))
    hb = spec.heartbeat
    ckpt = checkpoint_env(spec)
    return RunPlan(
        world_size=spec.world_size,
        argv=tuple(spec.command),
        workdir=spec.workdir,
        slots_per_node=spec.topology.slots_per_node,
        domain=spec.topology.domain,
        ranks_per_replica=spec.topology.ranks_per_replica,
        elastic=_elastic(spec),
        env=dict(spec.env),
        heartbeat_interval_ms=int(hb.interval_s * 1000),
        heartbeat_timeout_ms=int(hb.timeout_s * 1000),
        stall_timeout_ms=int(hb.stall_timeout_s * 1000),
        start_timeout_ms=max(60_000, int(hb.timeout_s * 1000)),
        cancel_authority=frozenset(spec.cancel_authority),
        retry={c: spec.retry_for(c) for c in RETRY_CLASSES},
        checkpoint=ckpt,
        auto_interval=_auto(spec),
        alerts=_alerts(spec, ckpt.interval_steps),
        gates=tuple(spec.gates.require) if spec.gates is not None else (),
        sdc=sdc_env(spec.sdc),
    )


def checkpoint_env(spec: RunSpec) -> CheckpointEnv:
    c = spec.checkpoint
    interval = c.initial_interval_steps if isinstance(c, AutoCheckpoint) else c.interval_steps
    tiers = tuple(TierEnv(t.name, t.root, t.widest, t.keep_last) for t in c.tiers or ())
    return CheckpointEnv(
        root=tiers[0].root if tiers else c.root, tiers=tiers, mode=c.mode, backlog=c.backlog,
        backlog_policy=c.backlog_policy,
        interval_steps=interval, keep_last=c.keep_last, keep_every=c.keep_every,
        rollback_window=c.rollback_window, dataset_id=spec.dataset,
        code_version=spec.code_version, model_json=canonical_json(spec.model))


def _elastic(spec: RunSpec) -> Elastic | None:
    m = spec.membership
    if not isinstance(m, ElasticMembership):
        return None
    return Elastic(min=m.min, max=m.max, step=m.step,
                   ranks_per_replica=spec.topology.ranks_per_replica,
                   reference=spec.topology.replicas)


def _auto(spec: RunSpec) -> AutoInterval | None:
    c = spec.checkpoint
    if not isinstance(c, AutoCheckpoint):
        return None
    return AutoInterval(mtbf_prior_s=c.mtbf_prior_s, measured_cost_s=c.measured_cost_s,
                        initial_interval_steps=c.initial_interval_steps)


def _alerts(spec: RunSpec, interval_steps: int | None) -> AlertConfig:
    a = spec.alerts
    # The spec fills progress_stall_s in; the fallback only covers a model built by hand.
    stall_s = a.progress_stall_s or spec.heartbeat.stall_timeout_s / 2
    return AlertConfig(
        owner=a.owner, runbook_base=a.runbook_base, progress_stall_ms=int(stall_s * 1000),
        window_steps=a.window_steps, straggler_ratio=a.straggler_ratio,
        input_wait_share=a.input_wait_share, checkpoint_lag_steps=a.checkpoint_lag_steps,
        plan_interval_steps=interval_steps, mixture_drift=a.mixture_drift,
        repeated_failure=a.repeated_failure,
        rpo={str(d): n for d, n in spec.checkpoint.rpo.items()},
        first_protects=spec.checkpoint.storage_tiers()[0].widest,
        actions=dict(a.actions), escalate_to=a.escalate_to)
