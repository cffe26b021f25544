"""The parts of a run spec: topology, membership, budget, retry, heartbeat, checkpoint, alerts.

Small frozen pydantic models with ``extra="forbid"``, assembled by
:class:`controller.spec.runspec.RunSpec`; the policy arithmetic the controller needs
(backoff, escalation, Young's interval) sits next to the fields it reads, pure.

Tested in tests/controller/spec/test_runspec.py and tests/controller/test_run_decide.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, model_validator

from controller import alerts
from controller.spec import bounds as b
from events.names import host_problem, path_problem
from events.workerenv import FAILURE_DOMAINS, ROOT_TIER

RESUME_CONTRACTS = ("exact", "coverage_equivalent", "distribution_equivalent")
ResumeContract = Literal["exact", "coverage_equivalent", "distribution_equivalent"]

# Strict: YAML turns ``yes``/``on`` into booleans, which lax pydantic would take as 1.
# Every number has a range (controller.spec.bounds); the validator names it.
World = Annotated[int, Strict(), AfterValidator(b.WORLD)]
Slots = Annotated[int, Strict(), AfterValidator(b.SLOTS)]
Steps = Annotated[int, Strict(), AfterValidator(b.STEPS)]
Count = Annotated[int, Strict(), AfterValidator(b.COUNT)]
Duration = Annotated[float, Strict(), AfterValidator(b.DURATION)]
Timeout = Annotated[float, Strict(), AfterValidator(b.TIMEOUT)]
Backoff = Annotated[float, Strict(), AfterValidator(b.BACKOFF)]
Text = Annotated[str, Strict(), Field(min_length=1)]


def _host(v: str) -> str:
    problem = host_problem(v, "domain")
    if problem is not None:
        raise ValueError(problem)
    return v


def _path(v: str) -> str:
    problem = path_problem(v, "root")
    if problem is not None:
        raise ValueError(problem)
    return v


def _workdir(v: str) -> str:
    problem = path_problem(v, "workdir")
    if problem is None and not v.startswith("/"):
        problem = (f"{v!r} is relative and there is no spec file to resolve it against:"
                   " give an absolute path")
    if problem is not None:
        raise ValueError(problem)
    return v.rstrip("/") or "/"


Host = Annotated[str, Strict(), AfterValidator(_host)]
StoragePath = Annotated[str, Strict(), AfterValidator(_path)]


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False,
                              protected_namespaces=())


class Code(Part):
    """Where the job's code lives (``events.launch`` says how ``command`` resolves in it).

    ``workdir`` is the workers' working directory on every node: relative
    paths in ``command`` resolve there. Loaded from a file, a spec without one
    gets the file's directory, and a relative one is taken from there, so
    the recorded spec always holds an absolute path.
    """

    workdir: Annotated[str, Strict(), AfterValidator(_workdir)]


class Topology(Part):
    """Where the members go.

    Each data-parallel replica is ``ranks_per_replica`` ranks and every rank
    takes one slot; today every replica is a single rank, so ``world_size ==
    replicas``. ``ranks_per_replica`` keeps room for tensor/pipeline ranks
    without changing the spec format. A node holds at most ``slots_per_node``
    of this run's members; ``domain``, when given, puts every member in that
    one topology domain (a rack, a switch).
    """

    replicas: World
    slots_per_node: Slots
    domain: Host | None = None
    ranks_per_replica: World = 1

    @model_validator(mode="after")
    def _world(self) -> Topology:
        if self.world_size > b.MAX_WORLD_SIZE:
            raise ValueError(
                f"replicas {self.replicas} x ranks_per_replica {self.ranks_per_replica} ="
                f" {self.world_size} ranks, over the limit of {b.MAX_WORLD_SIZE}")
        return self

    @property
    def world_size(self) -> int:
        return self.replicas * self.ranks_per_replica

    @property
    def min_nodes(self) -> int:
        return math.ceil(self.world_size / self.slots_per_node)


class FixedMembership(Part):
    kind: Literal["fixed"]


class ElasticMembership(Part):
    """The run may continue with any replica count ``min, min+step, .. max``.

    ``controller.elastic`` decides the size of each generation: the largest
    allowed count the live nodes hold, shrinking on a loss with no
    replacement and growing at a checkpoint boundary, never outside the range.
    """

    kind: Literal["elastic"]
    min: World
    max: World
    step: World = 1

    @model_validator(mode="after")
    def _ordered(self) -> ElasticMembership:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is greater than max {self.max}")
        if (self.max - self.min) % self.step:
            raise ValueError(f"max {self.max} is not min {self.min} plus a multiple of step"
                             f" {self.step}: give a max the steps reach")
        return self


Membership = Annotated[FixedMembership | ElasticMembership, Field(discriminator="kind")]


class Budget(Part):
    """Limits; ``None`` means unlimited."""

    max_gpu_hours: Annotated[float, Strict(), AfterValidator(b.GPU_HOURS)] | None = None
    max_wall_s: Duration | None = None
    price_per_gpu_hour: Annotated[float, Strict(), AfterValidator(b.PRICE)] | None = None


class RetryPolicy(Part):
    """What to do about failures of one class.

    ``attempts``: retries (restart or requeue) allowed for this class over the
    run's life; the failure after the last one escalates. ``escalate_after``:
    the run fails at the K-th failure with the same signature even with
    attempts left, because a deterministic fault does not heal by repetition.
    """

    attempts: Annotated[int, Strict(), AfterValidator(b.ATTEMPTS)] = 3
    backoff_base_s: Backoff = 1.0
    backoff_cap_s: Backoff = 30.0
    escalate_after: Count = 3

    @model_validator(mode="after")
    def _cap_covers_base(self) -> RetryPolicy:
        if self.backoff_cap_s < self.backoff_base_s:
            raise ValueError(
                f"backoff_cap_s {self.backoff_cap_s} is below backoff_base_s {self.backoff_base_s}"
            )
        return self

    def backoff_ms(self, attempt: int) -> int:
        """Delay before retry number ``attempt`` (1-based): ``min(cap, base·2^(attempt-1))``."""
        if attempt < 1:
            raise ValueError(f"attempt is 1-based, got {attempt}")
        # Past 2**64 any base has long hit any cap; bounding the exponent keeps it a float.
        delay_s = min(self.backoff_cap_s, self.backoff_base_s * 2.0 ** min(attempt - 1, 64))
        return round(delay_s * 1000)

    def should_escalate(self, class_failures: int, signature_failures: int) -> bool:
        """Whether this failure ends the run; both counts include the failure itself."""
        return class_failures > self.attempts or signature_failures >= self.escalate_after


class HeartbeatPolicy(Part):
    # The defaults are part of every spec's digest. What each trades and when to raise
    # it (busy nodes, slow teardowns): docs/run-spec.md "Liveness"; the exit grace is run_decide's.
    interval_s: Annotated[float, Strict(), AfterValidator(b.HEARTBEAT)] = 1.0
    timeout_s: Timeout = 10.0
    stall_timeout_s: Timeout = 60.0

    @model_validator(mode="after")
    def _ordered(self) -> HeartbeatPolicy:
        problems = []
        if self.timeout_s <= self.interval_s:
            problems.append(
                f"timeout_s {self.timeout_s} must exceed interval_s {self.interval_s}, or one"
                " late heartbeat would count as a dead worker"
            )
        # A dead worker stops progressing too: a stall timeout at or below the
        # heartbeat timeout would classify crashes as hangs.
        if self.stall_timeout_s <= self.timeout_s:
            problems.append(
                f"stall_timeout_s {self.stall_timeout_s} must exceed timeout_s {self.timeout_s}"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self


FailureDomain = Literal["process", "host", "domain", "cluster"]
TierName = Annotated[str, Strict(), AfterValidator(_host)]


class StorageTier(Part):
    """One place checkpoints are kept: an fsspec root and the failure domains a copy
    there survives (listing a wide one, ``domain``, implies the narrower ones)."""

    name: TierName
    root: StoragePath
    protects: tuple[FailureDomain, ...] = Field(min_length=1)
    keep_last: Count | None = None

    @property
    def widest(self) -> str:
        return max(self.protects, key=FAILURE_DOMAINS.index)


def tier_problem(tiers: tuple[StorageTier, ...], keep_last: int,
                 rpo: Mapping[FailureDomain, int]) -> str | None:
    """Why a tier list cannot meet the spec, or None (pure; the nearest tier is first)."""
    for i, t in enumerate(tiers):
        if any(u.name == t.name or u.root == t.root for u in tiers[:i]):
            return f"tier {t.name} ({t.root}) repeats the name or root of an earlier tier"
    keeps = [t.keep_last or keep_last for t in tiers]
    for i in range(1, len(tiers)):
        if keeps[i] < keeps[i - 1]:
            return (f"tier {tiers[i].name} keeps {keeps[i]} checkpoints, fewer than tier"
                    f" {tiers[i - 1].name} before it ({keeps[i - 1]}): a farther tier keeps the"
                    " longest, raise its keep_last")
    widest = max((FAILURE_DOMAINS.index(t.widest) for t in tiers), default=0)
    for domain in sorted(rpo, key=FAILURE_DOMAINS.index):
        if FAILURE_DOMAINS.index(domain) > widest:
            return (f"rpo.{domain} is declared but no tier protects against a {domain} loss"
                    f" (the widest protected is {FAILURE_DOMAINS[widest]}): add a tier whose"
                    f" protects lists {domain}, or drop rpo.{domain}")
    return None


class CheckpointCommon(Part):
    """Where and how checkpoints are written, whatever decides the interval.

    ``root`` is an fsspec URL every member can reach (shared storage on more
    than one node), with no ``..`` segment (each agent also requires it inside
    its allowed roots); without it the worker uses ``$RUNLEDGER_CHECKPOINT_ROOT``.
    ``mode: async`` stages a host copy and persists it in the background with
    at most ``backlog`` staged copies waiting; when full, ``delay`` makes the
    step wait and ``skip`` drops that checkpoint (both recorded as events).
    Garbage collection keeps the newest ``keep_last`` committed checkpoints
    plus every ``keep_every``-th step; restore tries at most
    ``rollback_window`` committed checkpoints, newest first.

    ``tiers`` (instead of ``root``) lists storage tiers nearest first: the
    checkpoint stall is paid to the first, the others are filled in the
    background; each tier may keep more (``keep_last``), never fewer than the
    one before it. A lone ``root`` is one tier named ``root`` protecting
    ``process`` and ``host`` (shared storage outlives a host, not its rack).
    ``rpo`` is the most steps a loss of each domain may cost; a domain with an
    RPO that no tier protects against is refused.
    """

    root: StoragePath | None = None
    mode: Literal["sync", "async"] = "sync"
    backlog: Annotated[int, Strict(), AfterValidator(b.BACKLOG)] = 1
    backlog_policy: Literal["delay", "skip"] = "delay"
    keep_last: Count = 3
    keep_every: Steps | None = None
    rollback_window: Annotated[int, Strict(), AfterValidator(b.ROLLBACK)] = 3
    tiers: tuple[StorageTier, ...] | None = Field(default=None, min_length=1)
    rpo: dict[FailureDomain, Steps] = Field(default_factory=dict)

    def storage_tiers(self) -> tuple[StorageTier, ...]:
        """The tiers, nearest first; a lone ``root`` is one shared tier protecting ``host``."""
        if self.tiers is not None:
            return self.tiers
        return (StorageTier(name=ROOT_TIER, root=self.root or "/", protects=("process", "host")),)

    @model_validator(mode="after")
    def _tiers(self) -> CheckpointCommon:
        if self.tiers is not None and self.root is not None:
            raise ValueError("give checkpoint.root or checkpoint.tiers, not both: with tiers,"
                             " the first tier's root is where checkpoints are written")
        problem = tier_problem(self.storage_tiers(), self.keep_last, self.rpo)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _window(self) -> CheckpointCommon:
        if self.rollback_window > self.keep_last + (1 if self.keep_every else 0) + 64:
            raise ValueError("rollback_window cannot exceed what retention keeps")
        if self.rollback_window > self.keep_last and self.keep_every is None:
            raise ValueError(f"rollback_window {self.rollback_window} exceeds keep_last"
                             f" {self.keep_last}: the older checkpoints would be collected")
        return self


class FixedCheckpoint(CheckpointCommon):
    policy: Literal["fixed"]
    interval_steps: Steps


class AutoCheckpoint(CheckpointCommon):
    """Interval from Young's model, ``T = sqrt(2·C·M)`` (docs/architecture.md §7).

    ``mtbf_prior_s`` is M until the run has its own interruption history;
    ``measured_cost_s`` is C when already known (the stall, not the background
    write), else the controller measures it.
    """

    policy: Literal["auto"]
    mtbf_prior_s: Annotated[float, Strict(), AfterValidator(b.MTBF)]
    measured_cost_s: Annotated[float, Strict(), AfterValidator(b.COST)] | None = None
    # Used until the first checkpoint's stall is measured.
    initial_interval_steps: Steps = 100

    def interval_s(self, cost_s: float | None = None, mtbf_s: float | None = None) -> float | None:
        """Young's interval; ``None`` while no checkpoint cost is known."""
        cost = cost_s if cost_s is not None else self.measured_cost_s
        if cost is None:
            return None
        return young_interval_s(cost, mtbf_s if mtbf_s is not None else self.mtbf_prior_s)


def young_interval_s(cost_s: float, mtbf_s: float) -> float:
    return math.sqrt(2.0 * cost_s * mtbf_s)


CheckpointPolicy = Annotated[FixedCheckpoint | AutoCheckpoint, Field(discriminator="policy")]


Ratio = Annotated[float, Strict(), AfterValidator(b.RATIO)]
Share = Annotated[float, Strict(), AfterValidator(b.SHARE)]


def _alert_rule(v: str) -> str:
    if v not in alerts.ALERTS:
        raise ValueError(f"unknown alert rule {v!r}; known: {', '.join(alerts.ALERTS)}")
    return v


def _alert_action(v: str) -> str:
    if v not in alerts.ACTIONS:
        raise ValueError(f"unknown action {v!r}; known: {', '.join(alerts.ACTIONS)}")
    return v


AlertRule = Annotated[str, Strict(), AfterValidator(_alert_rule)]
AlertAction = Annotated[str, Strict(), AfterValidator(_alert_action)]


class AlertPolicy(Part):
    """Who gets the run's alerts, where their runbook is, and each rule's threshold.

    The rules live in :mod:`controller.alerts`. ``progress_stall_s`` defaults to
    half of ``heartbeat.stall_timeout_s`` (filled in by the run spec, so it warns
    before the controller fails the run as hung); ``checkpoint_lag_steps`` to
    three times the current checkpoint interval, which the controller may change.
    ``owner`` defaults to whoever submits the run.
    """

    owner: Text | None = None
    runbook_base: Text = alerts.DEFAULT_RUNBOOK_BASE
    progress_stall_s: Timeout | None = None
    window_steps: Annotated[int, Strict(), AfterValidator(b.WINDOW)] = alerts.DEFAULT_WINDOW_STEPS
    straggler_ratio: Ratio = alerts.DEFAULT_STRAGGLER_RATIO
    input_wait_share: Share = alerts.DEFAULT_INPUT_WAIT_SHARE
    checkpoint_lag_steps: Steps | None = None
    mixture_drift: Share = alerts.DEFAULT_MIXTURE_DRIFT
    # Twice is the least that is "repeated"; once is what FailureClassified already says.
    repeated_failure: Annotated[int, Strict(), AfterValidator(b.REPEATS)] = (
        alerts.DEFAULT_REPEATED_FAILURE)
    # Per rule, what a raise does beyond the fact (controller.alerts.ACTIONS); absent: notify.
    actions: dict[AlertRule, AlertAction] = Field(default_factory=dict)
    escalate_to: Text | None = None  # an escalation's owner; None: the owner
