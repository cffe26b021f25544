"""The range of every number in a run spec, and why each bound is where it is.

Every numeric field of a run spec has a lower and an upper bound, checked when
the spec is parsed (so ``submit`` refuses it before anything is written, and the
controller refuses a ``RunSubmitted`` that carries one, from an old log or a
forged request, instead of crashing on a number it derives from it). The upper
bounds are far above what a real run needs, and low enough that everything the
controller computes from an accepted spec fits the Avro type of the fact that
carries it: backoffs and timeouts as milliseconds in a ``long``, Young's
interval as a finite ``double`` and its step count in a ``long``, and the member
list of the largest run inside one Kafka record (docs/architecture.md §7).

A :class:`Range` is the validator itself (pydantic's ``AfterValidator``), so
the bound, its message and the documented table (:data:`FIELDS`, docs/run-spec.md's
"Run spec ranges") are one value.

Tested in tests/controller/spec/test_bounds.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from controller import alerts, watch

N = TypeVar("N", int, float)

DAY_S = 86_400
YEAR_S = 31_557_600  # a Julian year
# Every member of a generation is listed in one GenerationStarted record, as
# blocks of a node's consecutive slots (events.placement): 131,072 members on
# nodes of 8 with the names bench/scale.py uses are about 0.5 MB, inside Kafka's
# default 1 MB record limit. A placement that would not fit (one member per node,
# 63-character names) is refused at admission (controller.admission), not here:
# its size depends on the nodes, which a spec does not name. 2**17: above the
# 10^5 ranks bench/scale.py drives through one controller.
MAX_WORLD_SIZE = 131_072
MAX_SLOTS_PER_NODE = 1024
# Seconds become whole milliseconds; a 1 ms floor keeps every one of them >= 1.
MIN_SECONDS = 0.001
MAX_DURATION_S = 10 * YEAR_S  # budgets, RPO/RTO, MTBF: longer than any run
MAX_TIMEOUT_S = 7 * DAY_S  # heartbeat and stall timeouts
MAX_BACKOFF_S = DAY_S  # a restart delay of more than a day is an outage, not a backoff
MAX_COST_S = DAY_S  # a checkpoint stall
MAX_STEPS = 10**9  # step intervals and counts
MAX_COUNT = 10_000  # attempts, repetitions
MAX_BACKLOG = 64  # staged host copies of the whole model
MAX_ROLLBACK = 64  # the fold keeps the newest 64 committed checkpoints (events.state)
MAX_GPU_HOURS = 1e9
MAX_PRICE = 1e6  # per GPU hour, in whatever currency the report shows
MAX_RATIO = 1000.0
MAX_SIGMA = 1000.0  # a spike threshold in robust standard deviations
MAX_SPIKE_WINDOW = 4096  # losses and gradient norms each rank keeps for the baseline


@dataclass(frozen=True, slots=True)
class Range:
    """``low <= v <= high`` (``low < v`` when ``above``); the problem names the range."""

    low: float
    high: float
    above: bool = False
    below: bool = False
    unit: str = ""
    note: str = ""  # the upper bound in words, where digits alone do not say it

    def __call__(self, value: N) -> N:
        if not self.holds(value):
            raise ValueError(f"{value!r} is out of range: must be {self.describe()}")
        return value

    def holds(self, value: float) -> bool:
        low_ok = value > self.low if self.above else value >= self.low
        return low_ok and (value < self.high if self.below else value <= self.high)

    def describe(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        low = f"> {_num(self.low)}" if self.above else f">= {_num(self.low)}"
        high = f"< {_num(self.high)}" if self.below else f"<= {_num(self.high)}"
        note = f" ({self.note})" if self.note else ""
        return f"{low} and {high}{unit}{note}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


WORLD = Range(1, MAX_WORLD_SIZE)
SLOTS = Range(1, MAX_SLOTS_PER_NODE)
DURATION = Range(MIN_SECONDS, MAX_DURATION_S, unit="s", note="10 years")
MTBF = Range(1.0, MAX_DURATION_S, unit="s", note="10 years")
HEARTBEAT = Range(0.05, 3600.0, unit="s", note="1 hour")  # the agent's own floor is 0.05 s too
TIMEOUT = Range(MIN_SECONDS, MAX_TIMEOUT_S, unit="s", note="7 days")
BACKOFF = Range(0.0, MAX_BACKOFF_S, unit="s", note="1 day")
COST = Range(MIN_SECONDS, MAX_COST_S, unit="s", note="1 day")
STEPS = Range(1, MAX_STEPS)
ATTEMPTS = Range(0, MAX_COUNT)
COUNT = Range(1, MAX_COUNT)
REPEATS = Range(2, MAX_COUNT)  # twice is the least that is "repeated"
BACKLOG = Range(1, MAX_BACKLOG)
ROLLBACK = Range(1, MAX_ROLLBACK)
GPU_HOURS = Range(0.0, MAX_GPU_HOURS, above=True)
PRICE = Range(0.0, MAX_PRICE, above=True)
RATIO = Range(1.0, MAX_RATIO, above=True)
SHARE = Range(0.0, 1.0, above=True, below=True)
WINDOW = Range(alerts.MIN_SAMPLES, watch.MAX_WINDOW)
STEPS_OR_OFF = Range(0, MAX_STEPS)  # 0: never
SIGMA_OR_OFF = Range(0.0, MAX_SIGMA)  # 0: no spike detection
# A median and a MAD of fewer than 4 samples say nothing about a spike.
SPIKE_WINDOW = Range(4, MAX_SPIKE_WINDOW)

# The documented table: every numeric field of a run spec and its range. A test
# holds it equal to docs/run-spec.md's and to the models' fields.
FIELDS: tuple[tuple[str, Range], ...] = (
    ("topology.replicas", WORLD),
    ("topology.ranks_per_replica", WORLD),
    ("topology.slots_per_node", SLOTS),
    ("membership.min, membership.max, membership.step", WORLD),
    ("rpo_s, rto_s", DURATION),
    ("budget.max_gpu_hours", GPU_HOURS),
    ("budget.max_wall_s", DURATION),
    ("budget.price_per_gpu_hour", PRICE),
    ("retry.*.attempts", ATTEMPTS),
    ("retry.*.backoff_base_s, retry.*.backoff_cap_s", BACKOFF),
    ("retry.*.escalate_after", COUNT),
    ("heartbeat.interval_s", HEARTBEAT),
    ("heartbeat.timeout_s, heartbeat.stall_timeout_s", TIMEOUT),
    ("checkpoint.interval_steps, checkpoint.initial_interval_steps", STEPS),
    ("checkpoint.keep_every", STEPS),
    ("checkpoint.keep_last", COUNT),
    ("checkpoint.backlog", BACKLOG),
    ("checkpoint.rollback_window", ROLLBACK),
    ("checkpoint.mtbf_prior_s", MTBF),
    ("checkpoint.measured_cost_s", COST),
    ("alerts.progress_stall_s", TIMEOUT),
    ("alerts.window_steps", WINDOW),
    ("alerts.straggler_ratio", RATIO),
    ("alerts.input_wait_share, alerts.mixture_drift", SHARE),
    ("alerts.checkpoint_lag_steps", STEPS),
    ("alerts.repeated_failure", REPEATS),
    ("sdc.agreement.every", STEPS),
    ("sdc.agreement.full_every, sdc.invariants.warmup", STEPS_OR_OFF),
    ("sdc.invariants.spike_sigma", SIGMA_OR_OFF),
    ("sdc.invariants.window", SPIKE_WINDOW),
)
