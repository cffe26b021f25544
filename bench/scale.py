"""Benchmark: how the controller's core grows with the size of one run, 10^3 to 10^5 ranks.

Usage: ``.venv/bin/python bench/scale.py [--quick] [--sizes N,N,...] [--fleets N,N,...]
[--modes per-rank,aggregated] [--skip-core] [--skip-broker] [--growth]``

Section ``core`` (``bench/scale_parts.py`` says exactly what it does): for each
size, in a process of its own (so the peak memory is that size's), one run of
N ranks on N/8 nodes of 8 slots (and a spare node) through the real
controller core with a simulated clock: registration of the agents, admission
and start (seconds of CPU, the start commands, the ``GenerationStarted``
record's size against the one-record limit), a heartbeat from every rank
(decode alone, the baseline, against decode + the core: ``ratio_to_decode``
is the core's share of nothing but decoding, 1.00 = free), the steady tick
(every 0.25 s in the service), and a node lost with its agent: when the
controller names it against the heartbeat timeout, and when it commands the
next generation. ``--quick``: 10^3 and 10^4 ranks; the default adds 10^5.

Section ``broker`` (``bench/load_parts.py``): on a throwaway secure stack, a
fleet of simulated agents (their own enrolled keys, signed records, a real
spec) drives a real ``runledger controller`` process: per fleet size, once
with per-rank heartbeats (the baseline: a record per member, signed with its
run key) and once node-aggregated (``MembersHeartbeatRecorded``, one per node);
then one node dies. Printed: the records offered, the controller's CPU share
while steady (and the ratio aggregated / per-rank), its lag on ``reports``,
report -> fact latency, when the lost node was named against the heartbeat
timeout, when the next generation started, and the controller's peak memory.
``--quick``: 128 ranks; the default one run of 10^5 ranks on 12,500 nodes,
aggregated only (per-rank is not run above ``load_parts.LARGE`` ranks: it
would offer a record per rank); ``--fleets 1024,4096`` for the per-rank
comparison. A fleet over ``LARGE`` ranks speaks every 20 s, with a 60 s
heartbeat timeout and node silence (``load_parts.SLOW`` says why: the records
one controller absorbs beside the fleet and the broker on 2 cores). Each
fleet's rounds are logged to ``$TMPDIR/runledger-scale-<tag>.fleet.log``.

Each fleet also runs ``runledger project --metrics`` beside the controller, as
a deployment does: its lag on the log (sampled every second from its metrics
page), CPU and peak memory are in the table.

``--growth`` (the broker section only): one run of 10^3, 10^4 and 10^5 ranks,
node-aggregated, all at the pace of the largest (``load_parts.SLOW``: a 20 s
interval, 60 s heartbeat timeout and node silence), so that the only thing
that changes between the columns is the ranks; the growth of each figure from
the first to the last, and ``bench/results/scale-growth.svg``, a panel per
figure with its goal where issue #37 sets one.

The cost per heartbeat and per tick must not grow with the ranks: the tables
print each size side by side. Nothing asserts on a timing. Results go to
``bench/results/scale.json`` (``scale-growth.json`` with ``--growth``).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path, where bench/events.py
    # would shadow the ``events`` package; use the repository root instead.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

from bench.common import (
    REPO_ROOT,
    RESULTS_DIR,
    fmt_num,
    machine_info,
    print_table,
    write_results,
)

if TYPE_CHECKING:
    from bench.load_parts import Pace

QUICK_SIZES = (1_000, 10_000)
SIZES = (1_000, 10_000, 100_000)
QUICK_FLEETS = (128,)
FLEETS = (100_000,)  # --fleets 1024,4096: the per-rank comparison
GROWTH = (1_000, 10_000, 100_000)  # --growth: every fleet at load_parts.SLOW
MODES = ("per-rank", "aggregated")  # the baseline first
STEADY_S = {True: 5.0, False: 20.0}  # --quick: shorter steady windows
ROWS: tuple[tuple[str, str, int], ...] = (
    # (figure, what the table calls it, digits)
    ("nodes", "nodes of 8", 0),
    ("register_s", "register every agent, CPU s", 2),
    ("admit_start_s", "admit + start, CPU s", 2),
    ("start_commands", "start commands", 0),
    ("generation_started_bytes", "GenerationStarted bytes (limit 1,000,000)", 0),
    ("heartbeat_decode_us", "heartbeat decode, us (baseline)", 1),
    ("heartbeat_core_us", "heartbeat decode + core, us", 1),
    ("ratio_to_decode", "ratio_to_decode", 2),
    ("tick_ms", "steady tick, CPU ms (every 250 ms)", 1),
    ("detected_ms", "lost node named after, ms (timeout 10,000)", 0),
    ("detect_tick_ms", "that tick, CPU ms", 1),
    ("restart_command_ms", "next generation commanded after, ms", 0),
    ("peak_rss_mb", "peak RSS, MB", 0),
)


def one_size(ranks: int) -> dict[str, Any]:
    """Run the core section for one size in a fresh interpreter and read its figures."""
    done = subprocess.run(
        [sys.executable, __file__, "--one", str(ranks)], cwd=REPO_ROOT,
        capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench/scale.py --one {ranks} failed:\n{done.stderr}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def broker_section(fleets: tuple[int, ...], quick: bool, modes: tuple[str, ...] = MODES,
                   pace: Pace | None = None) -> list[dict[str, Any]]:
    """Every fleet size in each mode, each on a throwaway secure stack of its own, at
    ``pace`` (by default each size's own, ``load_parts.pace_for``)."""
    import gc
    import os
    import tempfile

    from bench.load_parts import LARGE, fleet
    from bench.reportkeys import ReportKeys
    from events.codec import default_codec
    from events.kafka.connection import ENV_CREDENTIALS
    from events.signed.signing import SigningKey
    from runledger.stack import Stack

    out = []
    codec = default_codec()
    for ranks in fleets:
        for mode in modes:
            if mode == "per-rank" and ranks > LARGE:
                # A record per rank per interval: 5,000 records/s at 10^5 ranks and a 20 s
                # interval, more than this controller absorbs (docs/performance.md).
                print(f"   fleet of {ranks:,} ranks, per-rank: not run above {LARGE:,} ranks")
                continue
            # A stack per fleet: a new controller group reads every report already on the
            # broker, and refusing an earlier fleet's would be billed to this one.
            print(f"   fleet of {ranks:,} ranks, {mode} ...", flush=True)
            tmp = tempfile.TemporaryDirectory(prefix="runledger-scale-")
            stack = Stack(Path(tmp.name) / "stack")
            info = stack.up()
            os.environ[ENV_CREDENTIALS] = str(info.credentials or "")
            env = {**os.environ, "RUNLEDGER_BOOTSTRAP": info.bootstrap}
            admin = SigningKey.load(info.keys / "admin.key") if info.keys else None
            controller_key = info.keys / "controller.key" if info.keys else None
            try:
                keys = ReportKeys(info.bootstrap, admin)
                out.append(fleet(info.bootstrap, keys, codec, ranks, mode, STEADY_S[quick],
                                 env, controller_key, pace))
            finally:
                gc.collect()
                stack.down(purge=True)
                tmp.cleanup()
    return out


def print_broker(results: list[dict[str, Any]]) -> dict[str, float]:
    """The broker table, one column per fleet and mode; the aggregated / per-rank ratios."""
    def cell(r: dict[str, Any], key: str, digits: int = 0, scale: float = 1.0) -> str:
        v = r.get(key)
        return "-" if v is None else fmt_num(float(v) * scale, digits)

    rows = [["heartbeat interval / timeout / node silence, s",
             *(f"{r['interval_s']:g} / {r['heartbeat_timeout_s']:g} / {r['node_silence_s']:g}"
               for r in results)]]
    for label, key, digits, scale in (
            ("records offered /s", "offered_per_s", 0, 1.0),
            ("fleet: one round spoken in, s (p50)", "fleet_round_s_p50", 2, 1.0),
            ("controller CPU share, steady (%)", "controller_cpu_share_steady", 0, 100.0),
            ("controller lag on reports p50", "lag_p50", 0, 1.0),
            ("controller lag on reports p99", "lag_p99", 0, 1.0),
            ("lag, max over the last half", "lag_last_half_max", 0, 1.0),
            ("lost node named, s after its last word", "detected_s", 1, 1.0),
            ("next generation started after, s", "next_generation_s", 2, 1.0),
            ("controller peak RSS, MB", "controller_peak_rss_mb", 0, 1.0),
            ("`runledger status RUN --json`, s", "status_s", 2, 1.0),
            ("  members it listed", "status_members", 0, 1.0),
            ("projector lag p50 (records)", "projector_lag_p50", 0, 1.0),
            ("projector lag p99 (records)", "projector_lag_p99", 0, 1.0),
            ("projector peak RSS, MB", "projector_peak_rss_mb", 0, 1.0)):
        rows.append([label, *(cell(r, key, digits, scale) for r in results)])
    rows.append(["report -> fact p50 ms",
                 *(fmt_num(r["report_to_fact"]["p50_ms"], 1) for r in results)])
    rows.append(["report -> fact p99 ms",
                 *(fmt_num(r["report_to_fact"]["p99_ms"], 1) for r in results)])
    rows.append(["named the node that died", *("yes" if r["named_lost"] == r["lost_node"]
                                               else "NO" for r in results)])
    print_table(["broker, one run of", *(f"{r['ranks']:,} {r['mode']}" for r in results)],
                rows)
    ratios: dict[str, float] = {}
    by = {(r["ranks"], r["mode"]): r for r in results}
    for (ranks, mode), agg in by.items():
        base = by.get((ranks, "per-rank"))
        if mode != "aggregated" or base is None:
            continue  # one mode only (--modes, or a fleet too large for per-rank)
        ratios[str(ranks)] = (agg["controller_cpu_share_steady"]
                              / base["controller_cpu_share_steady"])
        print(f"   {ranks:,} ranks: controller CPU aggregated / per-rank = "
              f"{ratios[str(ranks)]:.2f}")
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10^3 and 10^4 ranks only")
    parser.add_argument("--sizes", help="comma-separated rank counts (multiples of 8)")
    parser.add_argument("--fleets", help="comma-separated fleet sizes in ranks (broker)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="broker: which of per-rank,aggregated to run (default both)")
    parser.add_argument("--skip-core", action="store_true", help="the broker section only")
    parser.add_argument("--skip-broker", action="store_true", help="the core section only")
    parser.add_argument("--growth", action="store_true",
                        help="broker only: 10^3, 10^4, 10^5 ranks aggregated at one pace, "
                             "and the growth plot")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one size
    args = parser.parse_args(argv)
    if args.one:
        from bench.scale_parts import measure
        print(json.dumps(measure(args.one)))
        return 0
    out: dict[str, Any] = {"machine": machine_info(), "quick": args.quick}
    if args.growth:
        return growth(out)
    if not args.skip_core:
        out.update(core_section(args))
    if not args.skip_broker:
        logging.basicConfig(level=logging.WARNING, format="   %(name)s: %(message)s")
        fleets = (tuple(int(s) for s in args.fleets.split(",")) if args.fleets
                  else QUICK_FLEETS if args.quick else FLEETS)
        modes = tuple(m for m in MODES if m in args.modes.split(","))
        out["broker"] = broker_section(fleets, args.quick, modes)
        out["ratio_controller_cpu_aggregated_to_per_rank"] = print_broker(out["broker"])
    write_results("scale", out)
    return 0


def core_section(args: argparse.Namespace) -> dict[str, Any]:
    sizes = (tuple(int(s) for s in args.sizes.split(",")) if args.sizes
             else QUICK_SIZES if args.quick else SIZES)
    results = [one_size(n) for n in sizes]
    rows = []
    for key, label, digits in ROWS:
        cells = [r.get(key) for r in results]
        rows.append([label, *("-" if c is None else fmt_num(float(c), digits) for c in cells)])
    print_table(["core, one run of", *(f"{n:,} ranks" for n in sizes)], rows)
    first, last = results[0], results[-1]
    growth = {
        "heartbeat_core_us": last["heartbeat_core_us"] / first["heartbeat_core_us"],
        "tick_ms": last["tick_ms"] / max(first["tick_ms"], 1e-3),
    }
    print(f"growth from {sizes[0]:,} to {sizes[-1]:,} ranks: per heartbeat x"
          f"{growth['heartbeat_core_us']:.2f}, per tick x{growth['tick_ms']:.1f}")
    return {"core": results, "growth": growth}


def growth(out: dict[str, Any]) -> int:
    """``--growth``: the same fleet at 10^3, 10^4 and 10^5 ranks, at one pace; the table,
    each figure's growth from the first size to the last, and the plot."""
    from bench.load_parts import SLOW
    from bench.plot_parts import Panel, small_multiples

    logging.basicConfig(level=logging.WARNING, format="   %(name)s: %(message)s")
    results = out["broker"] = broker_section(GROWTH, False, ("aggregated",), SLOW)
    print_broker(results)
    panels = [Panel(title, tuple(None if (v := _figure(r, key)) is None else v * scale
                                 for r in results), goal, digits)
              for title, key, scale, goal, digits in GROWTH_PANELS]
    out["growth"] = {}
    for title, key, *_ in GROWTH_PANELS:
        ratio = out["growth"][key] = _ratio(results, key)
        print(f"   {title}: x{'-' if ratio is None else f'{ratio:.2f}'} from "
              f"{GROWTH[0]:,} to {GROWTH[-1]:,} ranks")
    svg = small_multiples(
        RESULTS_DIR / "scale-growth.svg", "One run of 10³ to 10⁵ ranks, one controller",
        GROWTH, panels, note=f"node-aggregated, every {SLOW.interval_s:g} s; heartbeat timeout "
        f"{SLOW.timeout_s:g} s; a projector beside it; 2 cores shared with the fleet and the "
        f"broker ({out['machine']['measured_at'][:10]})")
    print(f"   plot: {svg}")
    out["plot"] = str(svg)
    write_results("scale-growth", out)
    return 0


# (panel title, figure in a fleet's results, scale, goal (issue #37), digits)
GROWTH_PANELS: tuple[tuple[str, str, float, float | None, int], ...] = (
    ("records offered /s", "offered_per_s", 1.0, None, 0),
    ("controller CPU, steady (% of a core)", "controller_cpu_share_steady", 100.0, None, 0),
    ("controller lag p99 (records)", "lag_p99", 1.0, None, 0),
    ("report -> fact p99 (ms)", "report_to_fact.p99_ms", 1.0, 100.0, 0),
    ("lost node named after its last word (s)", "detected_s", 1.0, 2 * 60.0, 1),
    ("next generation, s after it was named", "next_generation_s", 1.0, 5.0, 2),
    ("runledger status RUN --json (s)", "status_s", 1.0, None, 2),
    ("projector lag p99 (records)", "projector_lag_p99", 1.0, None, 0),
    ("controller peak RSS (MB)", "controller_peak_rss_mb", 1.0, None, 0),
)


def _figure(result: dict[str, Any], key: str) -> float | None:
    value: Any = result
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return None if value is None else float(value)


def _ratio(results: list[dict[str, Any]], key: str) -> float | None:
    first, last = _figure(results[0], key), _figure(results[-1], key)
    return None if first is None or last is None or first == 0 else last / first


if __name__ == "__main__":
    raise SystemExit(main())
