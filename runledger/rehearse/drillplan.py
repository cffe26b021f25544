"""What ``runledger drill`` injects, where, and which faults a spec can show. Pure.

The catalog (:data:`FAULTS`) names each fault a drill can inject, in the order
a drill runs them; ``--faults`` and ``DrillCompleted.fault`` use these names.
For one spec the planner decides, by numbered rules:

1. a name outside the catalog is refused, naming the allowed ones;
2. ``topology_change`` needs an elastic membership with room to shrink
   (``min`` below ``max``); on any other spec it is skipped, saying so;
3. every fault that kills or pauses one member of a generation needs a
   checkpoint before the fault, so the drill run's checkpoint interval is the
   trial's (``runledger.rehearse.trialplan``: ``steps // 3``, at least 2 here as
   ``steps >= 6``) and each fault lands between two checkpoints or
   inside the second one; a drill shorter than :data:`MIN_STEPS` steps is
   refused (no room for two checkpoints and a restart);
4. faults that need two ranks (``straggler``: one rank slowed against the
   others) are skipped on a one-member topology;
5. the worker injects each fault itself through its environment
   (``worker.faults``: ``RUNLEDGER_FAULT``, ``RUNLEDGER_STORAGE_DELAY_S``), in the
   first generation only, so the restarted generation runs clean; the drill's
   shell does what a worker cannot do to itself (:class:`Action`): pause a
   worker and wake it after its generation was replaced, or run on a copy of
   the dataset with one object gone (never the user's dataset).

Tested in tests/runledger/rehearse/test_drill.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.spec.parts import ElasticMembership
from controller.spec.runspec import RunSpec
from runledger.errors import UsageError
from runledger.rehearse.trialplan import interval_for

MIN_STEPS = 6
DEFAULT_STEPS = 20
SLOW_MS = 400  # the straggler's extra sleep per step
STALE_STEP_MS = 1000  # every step of the stale-worker drill's first generation
STORAGE_DELAY_S = 3.0  # every checkpoint write of the first generation waits this long

# Shell actions (what the drill process does beside the worker's own injection).
NONE = "none"
PAUSE = "pause"  # SIGSTOP rank 0 after a commit; SIGCONT once the next generation started
HIDE_OBJECT = "hide_object"  # run on a copy of the dataset with one object removed


@dataclass(frozen=True, slots=True)
class FaultDef:
    name: str
    what: str  # one line for the report and --help
    expects: tuple[str, ...]  # the expectation kinds runledger.rehearse.drilljudge checks


FAULTS: tuple[FaultDef, ...] = (
    FaultDef("kill_compute", "SIGKILL a worker mid-training (between checkpoints)",
             ("restarted", "bounded_retries", "fallback", "cursor", "completed", "terminal")),
    FaultDef("kill_checkpoint", "SIGKILL a worker with its shard half written",
             ("restarted", "bounded_retries", "no_partial_commit", "fallback", "cursor",
              "completed", "terminal")),
    FaultDef("hang", "a worker that heartbeats but makes no progress",
             ("classified:hang", "restarted", "bounded_retries", "cursor", "completed",
              "terminal")),
    FaultDef("straggler", f"one rank slowed by {SLOW_MS} ms every step",
             ("straggler_alert", "completed", "terminal")),
    FaultDef("storage_timeout", f"every checkpoint write waits {STORAGE_DELAY_S:g} s",
             ("checkpoint_committed", "completed", "terminal")),
    FaultDef("truncated_shard", "a committed shard cut in half, then a restart",
             ("restarted", "verification_failed", "fallback", "cursor", "completed",
              "terminal")),
    FaultDef("stale_worker", "a paused worker woken after its generation was replaced",
             ("restarted", "fenced", "no_stale_writes", "completed", "terminal")),
    FaultDef("missing_object", "a dataset object unreachable (on a copy of the dataset)",
             ("classified:data", "not_node", "terminal")),
    FaultDef("topology_change", "an elastic run loses a member",
             ("shrunk", "cursor", "completed", "terminal")),
)
NAMES = tuple(f.name for f in FAULTS)


@dataclass(frozen=True, slots=True)
class Shape:
    """What the planner needs of a spec."""

    members: int  # the generation's world size (elastic: at max)
    elastic: bool
    can_shrink: bool
    rpo_s: float
    rto_s: float
    attempts: dict[str, int]  # retries allowed per failure class ("default": the rest)


@dataclass(frozen=True, slots=True)
class Planned:
    """One fault to inject: the drill run's size and the injection."""

    fault: str
    steps: int
    interval: int
    at_step: int  # where the fault lands
    env: tuple[tuple[str, str], ...]  # extra worker environment
    action: str  # NONE, PAUSE or HIDE_OBJECT
    rank: int  # the rank it targets (0 when any)


@dataclass(frozen=True, slots=True)
class Skipped:
    fault: str
    reason: str


def shape_of(spec: RunSpec) -> Shape:
    m = spec.membership
    t = spec.topology
    elastic = isinstance(m, ElasticMembership)
    replicas = m.max if isinstance(m, ElasticMembership) else t.replicas
    attempts = {k: p.attempts for k, p in spec.retry.items()}
    return Shape(members=replicas * t.ranks_per_replica, elastic=elastic,
                 can_shrink=isinstance(m, ElasticMembership) and m.min < m.max,
                 rpo_s=float(spec.rpo_s), rto_s=float(spec.rto_s), attempts=attempts)


def attempts_for(shape: Shape, failure_class: str) -> int:
    """The retries the spec allows for a class: its own rule, else ``default``, else 3."""
    return shape.attempts.get(failure_class, shape.attempts.get("default", 3))


def chosen(text: str | None) -> tuple[str, ...]:
    """Rule 1: ``--faults a,b`` in catalog order, or every fault; an unknown name refused."""
    if text is None or not text.strip():
        return NAMES
    asked = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in asked if n not in NAMES]
    if unknown:
        raise UsageError(f"--faults: unknown fault {', '.join(map(repr, unknown))}; the"
                         f" faults are {', '.join(NAMES)}")
    return tuple(n for n in NAMES if n in asked)


def interval_of(steps: int) -> int:
    """Rule 3: the drill run's checkpoint interval, as the trial spec sets it."""
    return interval_for(steps)


def plan(shape: Shape, faults: Sequence[str], steps: int) -> tuple[Planned | Skipped, ...]:
    """One entry per fault, in order: what to inject, or why it is skipped (rules 2-5)."""
    if steps < MIN_STEPS:
        raise UsageError(f"--steps {steps}: a drill needs at least {MIN_STEPS} steps (two"
                         " checkpoints and a restart after the fault)")
    return tuple(plan_one(shape, f, steps) for f in faults)


def plan_one(shape: Shape, fault: str, steps: int) -> Planned | Skipped:
    every = interval_of(steps)
    mid = every + every // 2  # between the first and the second checkpoint
    last = shape.members - 1  # a rank other than the coordinator when there is one

    def planned(env: dict[str, str], at: int, action: str = NONE, rank: int = 0) -> Planned:
        return Planned(fault, steps, every, at, tuple(sorted(env.items())), action, rank)

    def fault_env(point: str, at: int, rank: int | None = None, extra: str = "") -> dict[str, str]:
        where = f":rank={rank}" if rank is not None else ""
        return {"RUNLEDGER_FAULT": f"{point}@{at}:gen=1{where}{extra}"}

    match fault:
        case "kill_compute":
            return planned(fault_env("step", mid, last), mid, rank=last)
        case "kill_checkpoint":
            return planned(fault_env("mid_shard", 2 * every, last), 2 * every, rank=last)
        case "hang":
            return planned(fault_env("hang", mid, last), mid, rank=last)
        case "straggler":
            if shape.members < 2:
                return Skipped(fault, f"the spec runs {shape.members} member: a straggler is"
                                      " one rank slower than the others, so it needs two")
            return planned(fault_env("slow", 1, last, f":ms={SLOW_MS}"), 1, rank=last)
        case "storage_timeout":
            return planned({"RUNLEDGER_STORAGE_DELAY_S": f"{STORAGE_DELAY_S:g}"}, every)
        case "truncated_shard":
            return planned(fault_env("truncate", 2 * every, 0), 2 * every)
        case "stale_worker":
            # Slow steps in generation 1 give the woken worker's watcher time to read its
            # fence before the next checkpoint is due: a pass must not depend on a race.
            return planned({"RUNLEDGER_FAULT_NO_SIGTERM": "1",
                            **fault_env("slow", 1, extra=f":ms={STALE_STEP_MS}")}, every, PAUSE)
        case "missing_object":
            return planned({}, 1, HIDE_OBJECT)
        case "topology_change":
            if not shape.can_shrink:
                why = ("its membership is fixed" if not shape.elastic
                       else "its elastic min equals its max")
                return Skipped(fault, f"a topology change needs an elastic spec that can"
                                      f" shrink; {why}")
            return planned(fault_env("step", mid, last), mid, rank=last)
    raise UsageError(f"unknown fault {fault!r}; the faults are {', '.join(NAMES)}")
