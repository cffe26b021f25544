"""Checkpoint interval arithmetic: Young's interval, its expected waste, Daly's refinement.

Pure functions behind ``runledger interval`` (docs/architecture.md §7, "Checkpoint interval").

Young's first-order model (J. W. Young, "A first order approximation to the
optimum checkpoint interval", CACM 17(9), 1974): with checkpoint cost C (the
training stall per checkpoint, not the background write), mean time between
failures M, restore time R and failure detection time D, checkpointing every T
seconds of work wastes, as a fraction of the time,

    C/T          checkpoint overhead: one stall per interval
    T/(2M)       lost work: a failure lands, on average, half way through an interval
    (R+D)/M      recovery: noticing the failure and restoring, once per failure

The first two terms are minimised by ``T = sqrt(2·C·M)``; the third does not
depend on T. Assumptions: failures arrive as a Poisson process (exponential
inter-arrival times, no wear-out or bursts), C ≪ M and T ≪ M (at most one
failure per interval, so second-order terms are dropped), a failure during a
checkpoint or a restore is ignored, and C, R, D are constant. The waste is
then a first-order estimate too; it can exceed 1 where the assumptions fail.

Daly's higher-order estimate (J. T. Daly, "A higher order estimate of the
optimum checkpoint interval for restart dumps", FGCS 22(3), 2006) keeps more
terms of the same exponential model: for C < 2M,
``T = sqrt(2CM)·(1 + sqrt(C/(2M))/3 + C/(18M)) - C``. It is shown for
comparison only; the controller uses Young's first-order T.

Durations on the command line are plain seconds (``90``, ``1.5``) or numbers
with units (``500ms``, ``30s``, ``5m``, ``5min``, ``6h``, ``2d``, ``1h30m``):
:func:`parse_duration` reads them, :func:`format_duration` writes them back.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from controller.spec.parts import young_interval_s

SECONDS_PER_DAY = 86_400.0

UNITS: dict[str, float] = {
    "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": SECONDS_PER_DAY,
}
UNIT_NAMES = "ms, s, m/min, h, d"

# Multiples of Young's T shown in the table, and round intervals shown where they fall
# within the same range (T/4 .. 4T).
MULTIPLES: tuple[tuple[str, float], ...] = (
    ("T/4", 0.25),
    ("T/2", 0.5),
    ("T/sqrt2", 1.0 / math.sqrt(2.0)),
    ("T", 1.0),
    ("T*sqrt2", math.sqrt(2.0)),
    ("2T", 2.0),
    ("4T", 4.0),
)
ROUND_INTERVALS_S: tuple[float, ...] = (
    60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21_600.0, 43_200.0, SECONDS_PER_DAY,
)

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_PART = re.compile(rf"\s*({_NUMBER})\s*([A-Za-z]*)")


@dataclass(frozen=True, slots=True)
class Waste:
    """The expected waste fractions of one interval (first order; see the module docstring)."""

    checkpoint_overhead: float  # C/T
    lost_work: float  # T/(2M)
    recovery: float  # (R+D)/M

    @property
    def total(self) -> float:
        return self.checkpoint_overhead + self.lost_work + self.recovery

    @property
    def effective(self) -> float:
        """The fraction of time that trains: ``1 - total`` (negative where the model fails)."""
        return 1.0 - self.total

    def to_json(self) -> dict[str, float]:
        return {
            "checkpoint_overhead": self.checkpoint_overhead,
            "lost_work": self.lost_work,
            "recovery": self.recovery,
            "total": self.total,
            "effective": self.effective,
        }


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the waste table: an interval, how often it checkpoints, and its waste."""

    label: str
    interval_s: float
    waste: Waste
    optimal: bool

    @property
    def checkpoints_per_day(self) -> float:
        return SECONDS_PER_DAY / self.interval_s

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "interval_s": self.interval_s,
            "checkpoints_per_day": self.checkpoints_per_day,
            **self.waste.to_json(),
            "optimal": self.optimal,
        }


def expected_waste(interval_s: float, cost_s: float, mtbf_s: float, restore_s: float,
                   detect_s: float = 0.0) -> Waste:
    """``C/T``, ``T/(2M)`` and ``(R+D)/M`` for checkpoints every ``interval_s`` seconds."""
    if not interval_s > 0 or not mtbf_s > 0:
        raise ValueError("interval and MTBF must be positive")
    if cost_s < 0 or restore_s < 0 or detect_s < 0:
        raise ValueError("cost, restore and detection times must not be negative")
    return Waste(
        checkpoint_overhead=cost_s / interval_s,
        lost_work=interval_s / (2.0 * mtbf_s),
        recovery=(restore_s + detect_s) / mtbf_s,
    )


def daly_interval_s(cost_s: float, mtbf_s: float) -> float | None:
    """Daly's higher-order interval for ``C < 2M``; ``None`` otherwise.

    Daly's paper sets ``T = M`` when ``C ≥ 2M``; there no checkpointing interval
    helps much and the comparison is meaningless, so this returns ``None``.
    """
    if not cost_s > 0 or not mtbf_s > 0:
        raise ValueError("cost and MTBF must be positive")
    if cost_s >= 2.0 * mtbf_s:
        return None
    ratio = cost_s / (2.0 * mtbf_s)
    return young_interval_s(cost_s, mtbf_s) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - cost_s


def waste_table(cost_s: float, mtbf_s: float, restore_s: float,
                detect_s: float = 0.0) -> list[Row]:
    """The waste at multiples of Young's T and at round intervals near it, by interval.

    Young's T is the row with ``optimal=True``. A round interval that coincides
    with a multiple of T is not repeated.
    """
    best = young_interval_s(cost_s, mtbf_s)
    points = [(label, best * k) for label, k in MULTIPLES]
    low, high = best * MULTIPLES[0][1], best * MULTIPLES[-1][1]
    for r in ROUND_INTERVALS_S:
        if low <= r <= high and not any(math.isclose(r, t, rel_tol=1e-9) for _, t in points):
            points.append((format_duration(r), r))
    points.sort(key=lambda p: p[1])
    return [
        Row(label, t, expected_waste(t, cost_s, mtbf_s, restore_s, detect_s), label == "T")
        for label, t in points
    ]


def assumption_warnings(cost_s: float, mtbf_s: float, restore_s: float,
                        detect_s: float = 0.0) -> list[str]:
    """Where the inputs leave the model's assumptions, one sentence each."""
    notes: list[str] = []
    if cost_s >= 2.0 * mtbf_s:
        notes.append(f"checkpoint cost C is not below 2M (C/M = {cost_s / mtbf_s:.3g}):"
                     " Young's first-order model assumes C << M, so these numbers are not"
                     " meaningful, and Daly's estimate does not apply")
    elif cost_s > 0.1 * mtbf_s:
        notes.append(f"checkpoint cost C is not much smaller than M (C/M = {cost_s / mtbf_s:.3g}):"
                     " Young's first-order model assumes C << M; treat T as rough")
    at_best = expected_waste(young_interval_s(cost_s, mtbf_s), cost_s, mtbf_s, restore_s,
                             detect_s)
    if at_best.total >= 1.0:
        notes.append(f"expected waste at T is {at_best.total:.0%}: under this model the run"
                     " would make no progress")
    return notes


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``1.5``, ``500ms``, ``30s``, ``5m``/``5min``, ``6h``, ``2d``, ``1h30m``.

    A compound value gives each part a unit, largest first, each unit once.
    Raises :class:`ValueError` naming the problem for anything else: an empty
    or malformed value, an unknown unit, a negative, NaN or infinite value.
    """
    value = text.strip()
    if not value:
        raise ValueError("empty duration")
    if value.startswith("-"):
        raise ValueError(f"must not be negative, got {text!r}")
    if value.lower().lstrip("+") in ("nan", "inf", "infinity"):
        raise ValueError(f"must be a finite number, got {text!r}")
    parts: list[tuple[float, str]] = []
    pos = 0
    while pos < len(value):
        m = _PART.match(value, pos)
        if m is None:
            raise ValueError(f"not a duration: {text!r} (seconds, or a number with a unit:"
                             f" {UNIT_NAMES}; e.g. 90, 30m, 1h30m)")
        parts.append((float(m[1]), m[2]))
        pos = m.end()
    if len(parts) == 1 and not parts[0][1]:
        seconds = parts[0][0]
    else:
        seconds = 0.0
        previous = math.inf
        for number, unit in parts:
            if not unit:
                raise ValueError(f"{text!r}: every part of a compound duration needs a unit"
                                 f" ({UNIT_NAMES})")
            if unit not in UNITS:
                raise ValueError(f"unknown unit {unit!r} in {text!r} (use {UNIT_NAMES})")
            scale = UNITS[unit]
            if scale >= previous:
                raise ValueError(f"{text!r}: give each unit once, largest first (e.g. 1h30m)")
            previous = scale
            seconds += number * scale
    if not math.isfinite(seconds):
        raise ValueError(f"must be a finite number, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """A short form that :func:`parse_duration` reads back (whole seconds from a minute up)."""
    if not math.isfinite(seconds) or seconds < 0:
        return repr(seconds)
    if seconds == 0:
        return "0s"
    if seconds < 1.0:
        return f"{seconds * 1000.0:.3g}ms"
    if seconds < 60.0:
        return f"{seconds:.3g}s"
    rest = round(seconds)
    out = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)


__all__ = [
    "Row",
    "Waste",
    "assumption_warnings",
    "daly_interval_s",
    "expected_waste",
    "format_duration",
    "parse_duration",
    "waste_table",
    "young_interval_s",
]
