"""Run every benchmark and print one table of their ratios (issue #18's acceptance check).

Usage: ``.venv/bin/python bench/run_all.py [--quick] [--only NAME ...] [--timeout S]``

Each ``bench/<name>.py`` (not the helpers ``common``, ``reportkeys`` and
``*_parts``, nor ``run_all``) runs as its own subprocess, as ``make
bench-smoke`` runs it: ``--quick`` when asked, and ``--bootstrap
$RUNLEDGER_BOOTSTRAP`` for those that take one, except ``controller.py``, which
starts a stack of its own (its controller would act on every run of a shared
broker's log). Without ``RUNLEDGER_BOOTSTRAP`` the script re-runs itself under
``scripts/with-broker.sh`` (a throwaway secure broker, stopped on every exit
path); ``--no-broker`` skips that and the broker parts skip themselves.

Every benchmark writes ``bench/results/<name>[-variant].json``; the files a
benchmark wrote while it ran are read back. Where one has a ``summary`` table
(metric, runledger, baseline, ratio) its rows are taken as they are; otherwise
every number under a key starting with ``ratio``, ``share`` or ``speedup`` (``ratio_p99``,
``share_detected``) becomes a row with its key path as the measure. Each row
gets the goal from issue #18's (or #34's) table where one applies (:data:`GOALS`). Nothing
asserts on a timing; the exit status is 1 when a benchmark failed or timed out,
so CI still catches a benchmark that no longer runs. The table and the rows go
to ``bench/results/run_all.json`` too.

Tested in tests/test_run_all.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS_DIR, format_table, write_results  # noqa: E402

NAME = "run_all"
SKIP = {"common", "reportkeys", "run_all", "__init__"}
OWN_STACK = {"controller"}  # starts its own stack: never handed the shared broker
# Issue #18's goals, by (benchmark, regular expression on the measure's key path).
GOALS: list[tuple[str, str, str]] = [
    ("dataplane", r"^permutation lookups/s", ">= 1.0"),
    # The loader as shipped (the compiled planner), not the Python planner's variants.
    ("dataplane", r"^pipeline tokens/s, w[24] \(", ">= 0.95"),
    ("events", r"produce.*ratio$", ">= 0.5"),
    ("events", r"consume.*ratio$", ">= 0.5"),
    ("controller", r"core.*ratio_to_decode$", ">= 0.5"),
    ("controller", r"latency.*ratio_p99$", "p99 < 50 ms"),
    ("projector", r"^projection\.ratio$", ">= 0.5"),
    ("checkpoint", r"^commit: write_checkpoint", "<= 1.05"),
    ("checkpoint", r"^stall s, async stage\(\) vs bare DCP", "<= 0.1"),
    ("checkpoint", r"^restore MB/s cold, verify \+ load", ">= 0.7"),
    # Issue #34's, as a user waits (whole processes, quiet machine).
    ("cli", r"^runledger --help p50", "< 150 ms"),
    ("cli", r"^runledger (status RUN|runs) p50", "< 300 ms"),
    # The live view's (runledger ui), from a warm server, in headless Chromium.
    ("ui", r"^run(s)? page first render p50", "< 500 ms"),
    ("ui", r"^run(s)? page first load \(KB\)", "< 200 KB"),
]


@dataclass
class Outcome:
    """One benchmark's run: its exit status, time, and the result files it wrote."""

    name: str
    status: str
    elapsed_s: float
    files: list[Path] = field(default_factory=list)


def benchmarks(only: Sequence[str]) -> list[Path]:
    found = [p for p in sorted(BENCH_DIR.glob("*.py"))
             if p.stem not in SKIP and not p.stem.endswith("_parts")]
    if only:
        unknown = sorted(set(only) - {p.stem for p in found})
        if unknown:
            raise SystemExit(f"unknown benchmark(s) {', '.join(unknown)}; "
                             f"choose from {', '.join(p.stem for p in found)}")
        found = [p for p in found if p.stem in only]
    return found


def command(script: Path, quick: bool, bootstrap: str | None) -> list[str]:
    args = [sys.executable, str(script)] + (["--quick"] if quick else [])
    text = script.read_text("utf-8")
    if bootstrap and '"--bootstrap"' in text and script.stem not in OWN_STACK:
        args += ["--bootstrap", bootstrap]
        admin = stack_admin_key()
        if admin is not None and '"--admin-key"' in text:
            args += ["--admin-key", str(admin)]
    return args


def stack_admin_key() -> Path | None:
    """The admin key of the stack whose credentials ``RUNLEDGER_CREDENTIALS`` names
    (``<data dir>/credentials/<role>.properties`` beside ``<data dir>/keys/admin.key``,
    as scripts/with-broker.sh's throwaway stack has them), if there is one: benchmarks
    that write reports enroll their nodes with it (bench/reportkeys.py)."""
    credentials = os.environ.get("RUNLEDGER_CREDENTIALS")
    if not credentials:
        return None
    key = Path(credentials).parent.parent / "keys" / "admin.key"
    return key if key.is_file() else None


def run_one(script: Path, quick: bool, bootstrap: str | None, timeout: float) -> Outcome:
    argv = command(script, quick, bootstrap)
    print(f"== {' '.join([Path(argv[1]).relative_to(ROOT).as_posix(), *argv[2:]])}",
          flush=True)
    started_wall = time.time()
    started = time.perf_counter()
    try:
        rc = subprocess.run(argv, cwd=ROOT, timeout=timeout, check=False).returncode
        status = "ok" if rc == 0 else f"FAILED (exit {rc})"
    except subprocess.TimeoutExpired:
        status = f"TIMED OUT after {timeout:.0f} s"
    elapsed = time.perf_counter() - started
    # The files this benchmark wrote (some write one per variant, e.g. -nograds).
    files = sorted(p for p in RESULTS_DIR.glob(f"{script.stem}*.json")
                   if p.stem == script.stem or p.stem.startswith(script.stem + "-")
                   if p.stat().st_mtime >= started_wall)
    print(f"== {script.name}: {status} in {elapsed:.0f} s", flush=True)
    return Outcome(script.stem, status, elapsed, files)


def ratios(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """Every number under a key starting with ``ratio``, ``share`` (a detection
    share has no baseline) or ``speedup`` (baseline / runledger), with its key path."""
    if isinstance(value, dict):
        for key, sub in value.items():
            if key in ("machine", "config"):
                continue
            sub_path = f"{path}.{key}" if path else str(key)
            if str(key).startswith(("ratio", "share", "speedup")) and isinstance(sub, int | float) \
                    and not isinstance(sub, bool):
                yield sub_path, float(sub)
            else:
                yield from ratios(sub, sub_path)
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from ratios(sub, f"{path}[{i}]")


def goal(bench: str, measure: str) -> str:
    for name, pattern, text in GOALS:
        if name == bench and re.search(pattern, measure):
            return text
    return ""


def rows_of(outcome: Outcome) -> list[list[str]]:
    rows: list[list[str]] = []
    for path in outcome.files:
        bench = outcome.name if path.stem == outcome.name else path.stem
        data = json.loads(path.read_text("utf-8"))
        summary = data.get("summary")
        if isinstance(summary, list) and summary:
            # The benchmark's own summary table (metric, runledger, baseline, ratio) says
            # what each ratio compares better than a key path does.
            rows += [[bench, str(row[0]).strip(), str(row[-1]), goal(outcome.name, str(row[0]))]
                     for row in summary if isinstance(row, list) and len(row) >= 2]
        else:
            rows += [[bench, measure, f"{value:.3g}", goal(outcome.name, measure)]
                     for measure, value in ratios(data)]
    if not rows:
        rows.append([outcome.name, f"(no ratio: {outcome.status})", "", ""])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="each benchmark's --quick form")
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME",
                        help="only these benchmarks (file stems, e.g. dataplane events)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one benchmark may run before it counts as failed")
    parser.add_argument("--no-broker", action="store_true",
                        help="do not start a throwaway broker when RUNLEDGER_BOOTSTRAP is unset")
    args = parser.parse_args(argv)
    scripts = benchmarks(args.only)
    bootstrap = os.environ.get("RUNLEDGER_BOOTSTRAP")
    if not bootstrap and not args.no_broker:
        # The same throwaway secure broker as `make test` and `make bench-smoke`.
        env = {**os.environ, "VENV": str(Path(sys.executable).parent.parent)}
        wrapper = [str(ROOT / "scripts" / "with-broker.sh"), sys.executable,
                   str(Path(__file__).resolve()), *(argv if argv is not None else sys.argv[1:])]
        return subprocess.run(wrapper, cwd=ROOT, env=env, check=False).returncode
    started = time.perf_counter()
    outcomes = [run_one(s, args.quick, bootstrap, args.timeout) for s in scripts]
    rows = [row for o in outcomes for row in rows_of(o)]
    total = time.perf_counter() - started
    title = (f"run_all ({'quick' if args.quick else 'full'}): {len(outcomes)} benchmarks in "
             f"{total:.0f} s, load average {os.getloadavg()[0]:.1f}; ratio = runledger / "
             f"baseline in the same run (see each benchmark's table for which way is better)")
    table = format_table(["benchmark", "measure", "ratio", "goal (#18, #34, #35)"], rows)
    print(f"\n{title}\n{table}")
    failed = [o for o in outcomes if o.status != "ok"]
    for o in failed:
        print(f"{o.name}: {o.status}", file=sys.stderr)
    write_results(NAME, {
        "mode": "quick" if args.quick else "full", "elapsed_s": total,
        "load_average": os.getloadavg(), "rows": rows,
        "benchmarks": [{"name": o.name, "status": o.status, "elapsed_s": o.elapsed_s,
                        "files": [p.name for p in o.files]} for o in outcomes],
    })
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
