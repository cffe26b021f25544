"""Small helpers shared by the benchmarks: timing, tables, machine info, JSON results.

Benchmarks here measure; they never assert on timings. Each prints a table,
writes ``bench/results/<name>.json`` (gitignored) and compares against a
baseline measured in the same run, as a ratio.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
REPO_ROOT = BENCH_DIR.parent


@dataclass(frozen=True, slots=True)
class Timing:
    """Wall-clock seconds of repeated runs of one piece of work."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    def rate(self, items: int) -> float:
        """Items per second at the median."""
        return items / self.median if self.median > 0 else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {"median_s": self.median, "best_s": self.best, "samples_s": list(self.samples)}


def proc_cpu_s(pid: int) -> float:
    """Seconds of CPU (user + system) process ``pid`` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_hwm_mb(pid: int) -> float:
    """Process ``pid``'s peak resident memory (VmHWM), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def time_once(fn: Callable[[], object]) -> float:
    """Seconds one call takes (after a collection, so earlier garbage is not billed here)."""
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def time_repeated(fn: Callable[[], object], repeats: int, warmup: int = 1) -> Timing:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed."""
    for _ in range(warmup):
        fn()
    return Timing(tuple(time_once(fn) for _ in range(repeats)))


def time_interleaved(
    fns: Mapping[str, Callable[[], object]], repeats: int, warmup: int = 1
) -> dict[str, Timing]:
    """Like ``time_repeated`` for several contenders, taking turns every repeat.

    On a shared, noisy machine a burst of someone else's load then lands on all
    contenders alike instead of on whichever happened to run at that moment.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(time_once(fn))
    return {name: Timing(tuple(s)) for name, s in samples.items()}


def ratio(value: float, baseline: float) -> float:
    """``value / baseline``, NaN when the baseline is zero."""
    return value / baseline if baseline else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * min(max(q, 0.0), 100.0) / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def fmt_num(value: float, digits: int = 0) -> str:
    """A number with thousands separators; ``-`` for NaN."""
    if not math.isfinite(value):
        return "-"
    return f"{value:,.{digits}f}"


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], title: str | None = None
) -> str:
    """A fixed-width text table: the first column left-aligned, the others right-aligned."""
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = [
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = [] if title is None else [title]
    out += [line(cells[0]), rule, *(line(row) for row in cells[1:])]
    return "\n".join(out)


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], title: str | None = None
) -> None:
    print(format_table(headers, rows, title), flush=True)
    print(flush=True)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
            text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def machine_info(libraries: Sequence[str] = ()) -> dict[str, Any]:
    """What the numbers were measured on: cores, load, Python, platform, library versions."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 0
    try:
        load: list[float] | None = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable,
        "load_average_1_5_15": load,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "git_revision": _git_revision(),
        "libraries": {name: _version(name) for name in libraries},
    }


def _jsonable(value: Any) -> Any:
    """NaN and infinities become null, so the file is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def write_results(name: str, data: Mapping[str, Any]) -> Path:
    """Write ``bench/results/<name>.json`` and return its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    text = json.dumps(_jsonable(data), indent=2, allow_nan=False, default=str)
    tmp.write_text(text + "\n", "utf-8")
    tmp.replace(path)
    return path


def broker(explicit: str | None, tmp: Path, writer: str) -> tuple[str, str, str, Any]:
    """The broker a benchmark uses: ``explicit`` (an existing cluster, with the credentials
    ``RUNLEDGER_CREDENTIALS`` names), else a throwaway secure stack under ``tmp`` whose admin
    becomes this process's ``writer`` (the environment's credentials) and whose operator
    the commands run as. Returns (bootstrap, the commands' credentials, a description,
    the stack to stop or None)."""
    from events.kafka.broker import check_broker
    from events.kafka.connection import ENV_CREDENTIALS
    from runledger.stack import Stack

    if explicit:
        check_broker(explicit)
        return explicit, os.environ.get(ENV_CREDENTIALS, ""), f"existing cluster {explicit}", None
    stack = Stack(tmp / "stack")
    info = stack.up()
    os.environ[ENV_CREDENTIALS] = str(info.credentials or "")  # this process writes as the admin
    operator = tmp / "stack" / "credentials" / "operator.properties"
    creds = str(operator) if operator.is_file() else str(info.credentials or "")
    return info.bootstrap, creds, f"throwaway stack {info.bootstrap} ({writer})", stack
