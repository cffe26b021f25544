"""``runledger interval``: Young's checkpoint interval and the expected-waste table.

Thin: the arithmetic is :mod:`controller.interval` (pure). This module reads
the durations, refuses a bad one with a :class:`~runledger.errors.RunledgerError`
naming the option (``runledger: --option: problem``, exit 1), and prints either
the human table or one JSON object.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from controller.interval import (
    assumption_warnings,
    daly_interval_s,
    expected_waste,
    format_duration,
    parse_duration,
    waste_table,
    young_interval_s,
)
from runledger.config import AsJson
from runledger.errors import RunledgerError

# Inputs outside this range are refused: they are no real checkpoint costs or failure
# rates, and the arithmetic would underflow or overflow on them.
MIN_POSITIVE_S = 1e-6
MAX_DURATION_S = 1e12  # about 31,700 years

DURATION_HELP = "seconds (90, 1.5) or with a unit: ms, s, m/min, h, d (30m, 6h, 1h30m)"

Cost = Annotated[
    str,
    typer.Option("--cost", metavar="S",
                 help=f"Checkpoint cost C, the training stall per checkpoint; {DURATION_HELP}."),
]
Mtbf = Annotated[
    str,
    typer.Option("--mtbf", metavar="DURATION",
                 help="Mean time between failures M; a duration like --cost's (e.g. 6h, 2d)."),
]
Restore = Annotated[
    str,
    typer.Option("--restore", metavar="S",
                 help="Restore time R after a failure; a duration like --cost's."),
]
Detect = Annotated[
    str,
    typer.Option("--detect", metavar="S", help="Failure detection time D; a duration like"
                                                 " --cost's."),
]


def register(app: typer.Typer) -> None:
    app.command()(interval)


def interval(cost: Cost, mtbf: Mtbf, restore: Restore, detect: Detect = "0",
             as_json: AsJson = False) -> None:
    """Young's checkpoint interval T = sqrt(2*C*M) and the expected waste around it.

    Waste is C/T (checkpoint overhead) + T/(2M) (expected lost work) + (R+D)/M
    (recovery), to first order, assuming exponentially distributed failures and
    C << M. Daly's higher-order estimate is shown for comparison; the
    controller uses Young's T.
    """
    cost_s = _duration("--cost", cost, positive=True)
    mtbf_s = _duration("--mtbf", mtbf, positive=True)
    restore_s = _duration("--restore", restore, positive=False)
    detect_s = _duration("--detect", detect, positive=False)
    doc = interval_document(cost_s, mtbf_s, restore_s, detect_s)
    for note in doc["warnings"]:
        typer.echo(f"runledger: warning: {note}", err=True)
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        for line in interval_lines(doc):
            typer.echo(line)


def interval_document(cost_s: float, mtbf_s: float, restore_s: float,
                      detect_s: float) -> dict[str, Any]:
    """The ``--json`` object: inputs in seconds, T, Daly's T, the waste at T, and the table."""
    best = young_interval_s(cost_s, mtbf_s)
    return {
        "cost_s": cost_s,
        "mtbf_s": mtbf_s,
        "restore_s": restore_s,
        "detect_s": detect_s,
        "model": "young_first_order",
        "interval_s": best,
        "daly_interval_s": daly_interval_s(cost_s, mtbf_s),
        "waste": expected_waste(best, cost_s, mtbf_s, restore_s, detect_s).to_json(),
        "table": [row.to_json() for row in waste_table(cost_s, mtbf_s, restore_s, detect_s)],
        "warnings": assumption_warnings(cost_s, mtbf_s, restore_s, detect_s),
    }


def interval_lines(doc: dict[str, Any]) -> list[str]:
    """The human form of :func:`interval_document`."""
    best, waste = doc["interval_s"], doc["waste"]
    lines = [
        f"Young's checkpoint interval T = sqrt(2*C*M) = {_both(best)}",
        f"  C  checkpoint cost (stall)     {_both(doc['cost_s'])}",
        f"  M  mean time between failures  {_both(doc['mtbf_s'])}",
        f"  R  restore                     {_both(doc['restore_s'])}",
        f"  D  detection                   {_both(doc['detect_s'])}",
        f"Expected waste at T: {waste['total']:.2%} (checkpoint overhead"
        f" {waste['checkpoint_overhead']:.2%} + lost work {waste['lost_work']:.2%}"
        f" + recovery {waste['recovery']:.2%})",
        f"Effective training time at T: {waste['effective']:.2%}",
    ]
    daly = doc["daly_interval_s"]
    if daly is not None:
        lines.append(f"Daly's higher-order estimate: {_both(daly)}, for comparison only;"
                     " the controller uses Young's first-order T.")
    else:
        lines.append("Daly's higher-order estimate does not apply (C >= 2M);"
                     " the controller uses Young's first-order T.")
    lines.append("")
    lines.append(f"  {'':<8} {'interval':>10} {'seconds':>12} {'ckpt/day':>10} {'C/T':>9}"
                 f" {'T/(2M)':>9} {'(R+D)/M':>9} {'waste':>9} {'effective':>10}")
    for row in doc["table"]:
        mark = "*" if row["optimal"] else " "
        lines.append(
            f"{mark} {row['label']:<8} {format_duration(row['interval_s']):>10}"
            f" {row['interval_s']:>12.1f} {_count(row['checkpoints_per_day']):>10}"
            f" {row['checkpoint_overhead']:>9.2%} {row['lost_work']:>9.2%}"
            f" {row['recovery']:>9.2%} {row['total']:>9.2%} {row['effective']:>10.2%}")
    lines.append("* Young's T. C/T checkpoint overhead, T/(2M) expected lost work,"
                 " (R+D)/M recovery; effective = 1 - waste.")
    return lines


def _count(per_day: float) -> str:
    return f"{per_day:.1f}" if per_day >= 0.1 else f"{per_day:.2g}"


def _both(seconds: float) -> str:
    short = format_duration(seconds)
    return short if short == f"{seconds:g}s" else f"{short} ({seconds:.6g} s)"


def _duration(option: str, text: str, *, positive: bool) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise RunledgerError(f"{option}: {exc}") from None
    if positive and seconds == 0:
        raise RunledgerError(f"{option}: must be positive, got {text!r}")
    if positive and seconds < MIN_POSITIVE_S:
        raise RunledgerError(
            f"{option}: {text!r} is below the smallest supported value, 1 microsecond")
    if seconds > MAX_DURATION_S:
        raise RunledgerError(f"{option}: {text!r} is above the largest supported value, 1e12 s")
    return seconds


__all__ = ["interval", "interval_document", "interval_lines", "register"]
