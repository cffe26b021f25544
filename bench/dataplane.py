"""Benchmark: the data plane's order, resume, pipeline and mixing, each against a bare baseline.

Usage: ``.venv/bin/python bench/dataplane.py [--quick] [--only SECTION ...]``
(sections: permutation, resume, pipeline, mixing; ``--only pipeline`` is the loader alone)

1. Permutation at N = 10^8 (``--quick``: 10^7). ``Permutation(N, key).many`` over
   sequential chunks of 2^20 indices spread over [0, N), and scalar ``p(i)`` at
   random i, against ``numpy.random.default_rng(0).permutation(N)``: a lookup in
   the materialised array is free, but the first one waits for the whole array,
   so numpy's rate is N / materialisation time. Memory: tracemalloc peak and
   peak-RSS growth over the work.
2. Resume latency at positions 0, 10^6 and 10^9: a fresh ``DataLoader`` +
   ``load_state_dict(state)`` + the first batch, on the synthetic corpus (3
   sources, exact mixing counted in tokens, concat packing). The states at 10^6
   and 10^9 are *synthesized* (``dataplane_parts.synth_state``): the order cannot
   be replayed that far here, and need not be, since the state is the order's
   input. Baselines: resume at 0 (ratio = latency_p / latency_0), and replaying
   the planner from 0, measured to 10^4 sequences and extrapolated linearly.
3. Pipeline tokens/s, seq_len 2048, global batch 16, one replica, 2 and 4
   workers (the planner's loop compiled, ``runledger_native.OrderCore``), plus the
   input-wait share from ``stats()``; and with 2 workers and the pure-Python
   planner, on the loader's own thread (``compiled_planner=False,
   plan_process=False``: the before of this issue's work) and in a child process
   (``dataplane.planahead``: what an install without the crate gets). Each loader
   hands out 40 batches before the timed ones (the first is its start; a planning
   child starts after ``START_AFTER``); so does the baseline. Baseline: a bare
   ``torch.utils.data.DataLoader`` (2 worker processes, batch 16) over a
   map-style dataset that memory-maps the same shard files and cuts them, in
   file order, into 2048-token rows: the same bytes, no order/mixing/resume.
4. Mixing drift over 10^6 picks (``--quick``: 10^5): the max over every prefix of
   |c_i - w_i n| for ``exact_pick`` (integer EDF) and ``greedy_pick`` (the float
   largest-error blend), both measured exactly against the rational weights;
   picks/s; and the same from counts synthesized at n0 = 10^12 and 10^16.

Ratios are runledger / baseline from this run unless a table says otherwise.
Nothing asserts on a timing. Results go to ``bench/results/dataplane.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path, where this very file
    # would shadow the ``dataplane`` package; use the repository root instead.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import numpy as np
import torch.utils.data

from bench.common import fmt_num, machine_info, print_table, ratio, time_repeated, write_results
from bench.dataplane_parts import (
    PeakRss,
    ShardRows,
    make_manifest,
    mib,
    mixing_section,
    summary,
    synth_state,
)
from dataplane.loader import DataLoader, LoaderConfig
from dataplane.manifest import DatasetManifest
from dataplane.order import Planner
from dataplane.permute import ALGORITHM, Permutation, derive_key
from dataplane.store import ObjectStore

NAME = "dataplane"
SECTIONS = ("permutation", "resume", "pipeline", "mixing")
SEED = 7
BATCH = 16
SEQ_LEN = 2048
CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class Mode:
    perm_n: int
    perm_chunks: int
    scalar_calls: int
    numpy_repeats: int
    resume_repeats: int
    replay_seqs: int
    batches: int
    pipeline_repeats: int
    picks: int
    rate_picks: int
    offset_picks: int


FULL = Mode(10**8, 10, 100_000, 2, 5, 10_000, 200, 3, 10**6, 100_000, 100_000)
QUICK = Mode(10**7, 4, 10_000, 2, 3, 1_000, 50, 1, 10**5, 20_000, 20_000)


# --- 1. permutation --------------------------------------------------------------


def permutation_section(mode: Mode) -> dict[str, Any]:
    n = mode.perm_n
    key = derive_key("bench.dataplane", ALGORITHM, SEED, "perm")
    starts = [k * (n // mode.perm_chunks) for k in range(mode.perm_chunks)]
    lookups = CHUNK * len(starts)
    perm = Permutation(n, key)

    def feistel_pass() -> None:
        for s in starts:
            perm.many(np.arange(s, s + CHUNK, dtype=np.int64))

    vec = time_repeated(feistel_pass, repeats=3)
    picks = np.random.default_rng(SEED).integers(0, n, mode.scalar_calls).tolist()
    scalar = time_repeated(lambda: [perm(i) for i in picks], repeats=2)
    first = time_repeated(lambda: Permutation(n, key)(starts[-1]), repeats=7)
    gc.collect()
    tracemalloc.start()
    with PeakRss() as rss:
        feistel_pass()
    feistel_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    np_times, np_peaks, np_rss, gather_s = [], [], [], []
    for _ in range(mode.numpy_repeats):
        gc.collect()
        tracemalloc.start()  # one allocation: no measurable cost to the timing
        with PeakRss() as np_r:
            t0 = time.perf_counter()
            arr = np.random.default_rng(0).permutation(n)
            np_times.append(time.perf_counter() - t0)
            np_peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        np_rss.append(np_r.delta_bytes)
        t0 = time.perf_counter()
        for s in starts:  # the same lookups, as a gather from the materialised array
            arr[np.arange(s, s + CHUNK, dtype=np.int64)]
        gather_s.append(time.perf_counter() - t0)
        del arr
    np_time = float(np.median(np_times))
    np_rate = n / np_time
    rate = vec.rate(lookups)
    np_rss_max = max((x for x in np_rss if x is not None), default=None)
    out: dict[str, Any] = {
        "n": n, "chunk": CHUNK, "lookups": lookups, "rounds": perm.rounds,
        "feistel": {"many": vec.to_json(), "lookups_per_s": rate,
                    "scalar_calls": mode.scalar_calls, "scalar": scalar.to_json(),
                    "scalar_per_s": scalar.rate(mode.scalar_calls),
                    "first_lookup": first.to_json(), "tracemalloc_peak_bytes": feistel_peak,
                    "peak_rss_delta_bytes": rss.delta_bytes},
        "numpy": {"materialise_s": np_times, "materialise_median_s": np_time,
                  "effective_lookups_per_s": np_rate, "tracemalloc_peak_bytes": max(np_peaks),
                  "peak_rss_delta_bytes": np_rss, "gather_s": gather_s,
                  "gather_lookups_per_s": lookups / float(np.median(gather_s))},
        "ratio_lookups": ratio(rate, np_rate),
        "ratio_first_lookup": ratio(first.median, np_time),
        "ratio_memory": ratio(feistel_peak, max(np_peaks)),
    }
    rows: list[list[object]] = [
        ["lookups/s (many, chunks of 2^20)", fmt_num(rate), fmt_num(np_rate),
         f"{out['ratio_lookups']:.2f}"],
        ["lookups/s (scalar p(i), random i)", fmt_num(scalar.rate(mode.scalar_calls)), "", ""],
        ["lookups/s in the array (gather)", "", fmt_num(out["numpy"]["gather_lookups_per_s"]),
         ""],
        ["time to first lookup (s)", f"{first.median:.6f}", f"{np_time:.2f}",
         f"{out['ratio_first_lookup']:.1e}"],
        ["tracemalloc peak (MiB)", mib(feistel_peak), mib(max(np_peaks)),
         f"{out['ratio_memory']:.3f}"],
        ["peak RSS growth (MiB)", mib(rss.delta_bytes), mib(np_rss_max), ""],
    ]
    print_table(["permutation", "Feistel", "numpy", "ratio"], rows,
                title=f"1. permutation, N = {n:,}: {lookups:,} lookups; numpy lookups/s = "
                f"N / materialisation time")
    return out


# --- 2. resume -------------------------------------------------------------------


def _resume_once(manifest: DatasetManifest, cfg: LoaderConfig,
                 state: dict[str, Any]) -> tuple[float, float, float]:
    """(construct, load_state_dict, first batch) seconds for a fresh loader."""
    gc.collect()
    t0 = time.perf_counter()
    loader = DataLoader(manifest, cfg)
    t1 = time.perf_counter()
    loader.load_state_dict(state)
    t2 = time.perf_counter()
    batch = next(loader)
    t3 = time.perf_counter()
    loader.close()
    if batch.index != state["batch"]:
        raise RuntimeError(f"resumed at batch {batch.index}, expected {state['batch']}")
    return t1 - t0, t2 - t1, t3 - t2


def resume_section(mode: Mode, manifest: DatasetManifest) -> dict[str, Any]:
    cfg = LoaderConfig(seed=SEED, global_batch_size=BATCH, workers=2)
    with DataLoader(manifest, cfg) as fresh:
        states = {0: fresh.state_dict()}
    for pos in (10**6, 10**9):
        states[pos] = synth_state(manifest, SEED, BATCH, pos)
    samples: dict[int, list[tuple[float, float, float]]] = {p: [] for p in states}
    for r in range(mode.resume_repeats + 1):  # the first round is a warm-up
        for pos, state in states.items():
            split = _resume_once(manifest, cfg, state)
            if r:
                samples[pos].append(split)

    store = ObjectStore(manifest, verify="digest")
    planner = Planner(manifest, SEED, store.length, blocks=store.lengths_block)
    st = planner.initial()
    t0 = time.perf_counter()
    for _ in range(mode.replay_seqs // BATCH):
        planned = planner.plan_batch(st, BATCH)
        assert planned is not None
        st = planned[1]
    replay_s = time.perf_counter() - t0
    per_seq = replay_s / (mode.replay_seqs // BATCH * BATCH)
    check = synth_state(manifest, SEED, BATCH, st.position)
    real = {n: (d, u) for n, d, u in zip(planner.names, st.draws, st.units, strict=True)}
    synth_vs_real = {n: {"draws_real": real[n][0], "draws_synth": check["sources"][n]["draws"],
                         "units_real": real[n][1], "units_synth": check["sources"][n]["units"]}
                     for n in planner.names}

    total = {p: [sum(s) for s in v] for p, v in samples.items()}
    med = {p: float(np.median(v)) for p, v in total.items()}
    out: dict[str, Any] = {"states": {str(p): ("initial" if p == 0 else "synthesized")
                                      for p in states},
                           "replay": {"sequences": st.position, "seconds": replay_s,
                                      "per_sequence_s": per_seq,
                                      "synth_vs_replayed_state": synth_vs_real},
                           "positions": {}}
    rows: list[list[object]] = []
    for pos in states:
        extrapolated = pos * per_seq + med[0]
        splits = np.median(np.array(samples[pos]), axis=0).tolist()
        out["positions"][str(pos)] = {
            "state": out["states"][str(pos)], "batch": states[pos]["batch"],
            "latency_s": total[pos], "median_s": med[pos],
            "construct_load_first_median_s": splits,
            "ratio_vs_position_0": ratio(med[pos], med[0]),
            "replay_extrapolated_s": extrapolated,
            "ratio_vs_replay": ratio(med[pos], extrapolated)}
        rows.append([f"{pos:,} ({out['states'][str(pos)]})", f"{med[pos] * 1e3:.1f}",
                     " / ".join(f"{x * 1e3:.1f}" for x in splits),
                     f"{ratio(med[pos], med[0]):.2f}", f"{extrapolated:,.1f}",
                     f"{ratio(med[pos], extrapolated):.1e}"])
    print_table(["position", "resume ms", "ctor/load/first ms", "vs @0", "replay s (extrap.)",
                 "vs replay"], rows,
                title=f"2. resume latency: new DataLoader + load_state_dict + first batch "
                f"(batch {BATCH}, seq {SEQ_LEN}); replay measured over {st.position:,} "
                f"sequences ({replay_s:.1f} s), extrapolated linearly")
    gap = max(abs(v["draws_real"] - v["draws_synth"]) / max(v["draws_real"], 1)
              for v in synth_vs_real.values())
    out["replay"]["synth_vs_replayed_max_draws_gap"] = gap
    print(f"   a state synthesized at {st.position:,} vs the replayed one: per-source draws "
          f"differ by at most {gap:.2%}\n", flush=True)
    return out


# --- 3. pipeline -----------------------------------------------------------------


# Batches handed out before the timed ones: the steady state is what a run lives in.
WARM = 40


def _runledger_run(manifest: DatasetManifest, workers: int, batches: int,
                   compiled: bool = True, plan_process: bool = True) -> dict[str, float]:
    loader = DataLoader(manifest, LoaderConfig(seed=SEED, global_batch_size=BATCH,
                                               workers=workers, compiled_planner=compiled,
                                               plan_process=plan_process))
    try:
        t0 = time.perf_counter()
        next(loader)
        first = time.perf_counter() - t0
        for _ in range(WARM - 1):
            next(loader)
        wait0 = float(loader.stats()["input_wait_s"])
        t0 = time.perf_counter()
        tokens = 0
        for _ in range(batches):
            tokens += next(loader).tokens.size
        elapsed = time.perf_counter() - t0
        wait = float(loader.stats()["input_wait_s"]) - wait0
    finally:
        loader.close()
    return {"first_batch_s": first, "seconds": elapsed, "tokens": tokens,
            "tokens_per_s": tokens / elapsed, "input_wait_share": wait / elapsed}


def _torch_run(paths: Sequence[str], workers: int, batches: int) -> dict[str, float]:
    data = ShardRows(paths, SEQ_LEN, (batches + WARM) * BATCH)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, num_workers=workers,
                                         shuffle=False, drop_last=True)
    t0 = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter() - t0
    for _ in range(WARM - 1):
        next(it)
    t0 = time.perf_counter()
    tokens = 0
    for _ in range(batches):
        tokens += next(it)[0].numel()
    elapsed = time.perf_counter() - t0
    del it
    return {"first_batch_s": first, "seconds": elapsed, "tokens": tokens,
            "tokens_per_s": tokens / elapsed, "rows_per_pass": data.per_pass}


def _planning(manifest: DatasetManifest, compiled: bool, batches: int) -> float:
    """Tokens/s of planning alone: ``plan_batch`` from the start, no reads, no rows."""
    store = ObjectStore(manifest, verify="size")
    planner = Planner(manifest, SEED, store.length, compiled=compiled,
                      blocks=store.lengths_block)
    st = planner.initial()
    planner.plan_batch(st, BATCH)  # opens the objects' indexes: not planning
    t0 = time.perf_counter()
    for _ in range(batches):
        planned = planner.plan_batch(st, BATCH)
        assert planned is not None
        st = planned[1]
    return batches * BATCH * SEQ_LEN / (time.perf_counter() - t0)


def pipeline_section(mode: Mode, manifest: DatasetManifest, paths: Sequence[str]
                     ) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"runledger_w2": [], "runledger_w4": [],
                                                "runledger_w2_python_planner": [],
                                                "runledger_w2_python_planner_child": [],
                                                "torch_w2": []}
    for _ in range(mode.pipeline_repeats):  # interleaved, so load bursts hit all alike
        runs["runledger_w2"].append(_runledger_run(manifest, 2, mode.batches))
        runs["runledger_w4"].append(_runledger_run(manifest, 4, mode.batches))
        runs["runledger_w2_python_planner"].append(
            _runledger_run(manifest, 2, mode.batches, compiled=False, plan_process=False))
        runs["runledger_w2_python_planner_child"].append(
            _runledger_run(manifest, 2, mode.batches, compiled=False, plan_process=True))
        runs["torch_w2"].append(_torch_run(paths, 2, mode.batches))

    def med(name: str, key: str) -> float:
        return float(np.median([r[key] for r in runs[name]]))

    base = med("torch_w2", "tokens_per_s")
    out: dict[str, Any] = {"batches": mode.batches, "global_batch_size": BATCH,
                           "seq_len": SEQ_LEN, "replicas": 1, "runs": runs,
                           "baseline_tokens_per_s": base, "variants": {}}
    rows: list[list[object]] = []
    for name in runs:
        rate = med(name, "tokens_per_s")
        wait = med(name, "input_wait_share") if name.startswith("runledger") else float("nan")
        if name != "torch_w2":
            out["variants"][name] = {"tokens_per_s": rate, "input_wait_share": wait,
                                     "ratio": ratio(rate, base)}
        rows.append([name, fmt_num(rate), f"{med(name, 'first_batch_s') * 1e3:.0f}",
                     "-" if wait != wait else f"{wait:.1%}", f"{ratio(rate, base):.2f}"])
    planning = {name: float(np.median([_planning(manifest, name == "compiled", mode.batches)
                                       for _ in range(mode.pipeline_repeats)]))
                for name in ("compiled", "python")}
    out["planning_tokens_per_s"] = planning
    rows.append(["planning alone, compiled loop", fmt_num(planning["compiled"]), "-", "-",
                 f"{ratio(planning['compiled'], base):.2f}"])
    rows.append(["planning alone, Python planner", fmt_num(planning["python"]), "-", "-",
                 f"{ratio(planning['python'], base):.2f}"])
    print_table(["pipeline", "tokens/s", "first batch ms", "input wait", "ratio"], rows,
                title=f"3. pipeline: {mode.batches} batches of {BATCH} x {SEQ_LEN} after the "
                f"first {WARM}, median of {mode.pipeline_repeats}; baseline torch DataLoader, "
                f"2 worker processes, same shard bytes in file order")
    return out


# --- main ------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        help="run only these sections (default: all)")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    started = time.perf_counter()
    machine = machine_info(["numpy", "torch", "runledger"])
    print(f"bench/dataplane.py ({'quick' if args.quick else 'full'}) on "
          f"{machine['usable_cores']} cores, Python {machine['python']}, "
          f"load average {machine['load_average_1_5_15']}")
    print("ratio = runledger / baseline in this run unless a table says otherwise. Shared "
          "machine: numbers are noisy.\n", flush=True)
    results: dict[str, Any] = {
        "benchmark": NAME, "mode": "quick" if args.quick else "full", "machine": machine,
        "config": dataclasses.asdict(mode),
        "notes": [
            "ratio = runledger / baseline, both measured in this run",
            "permutation: numpy lookups/s = N / materialisation time (a lookup in the array is "
            "free once it exists, the first one waits for all of it); memory = tracemalloc "
            "peak and peak-RSS growth (VmHWM reset through /proc/self/clear_refs)",
            "resume: states at 1e6 and 1e9 are synthesized (units split by the exact weights, "
            "draws = units / mean record size, packer empty), not replayed; replay baseline = "
            "planner only (no token reads) over the measured prefix, extrapolated linearly, "
            "plus the resume-at-0 latency",
            "pipeline: runledger verifies digests, plans order and mixing, and returns tokens, "
            "segment ids, positions and loss masks; the torch baseline returns tokens and "
            "document ids of a file-order concat, nothing else",
            "mixing: drift measured exactly (integers against the rational weights) for both; "
            "greedy_pick gets the weights as floats, as its signature asks",
            "shared machine: other work runs at the same time; numbers are noisy",
        ],
    }
    with tempfile.TemporaryDirectory(prefix="bench-dataplane-") as root:
        manifest, paths = make_manifest(root, SEQ_LEN)
        results["corpus"] = {s.name: {"records": s.records, "tokens": s.tokens,
                                      "objects": len(s.objects)} for s in manifest.sources}
        sections: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            ("permutation", lambda: permutation_section(mode)),
            ("resume", lambda: resume_section(mode, manifest)),
            ("pipeline", lambda: pipeline_section(mode, manifest, paths)),
            ("mixing", lambda: mixing_section(mode.picks, mode.offset_picks, mode.rate_picks,
                                              SEED)),
        ]
        for name, fn in sections:
            if name not in args.only:
                continue
            t0 = time.perf_counter()
            results[name] = fn()
            results[name]["elapsed_s"] = time.perf_counter() - t0
    partial = [n for n in SECTIONS if n in args.only] != list(SECTIONS)
    if not partial:
        rows = summary(results)
        results["summary"] = [[str(c) for c in row] for row in rows]
        print_table(["metric", "runledger", "baseline", "ratio"], rows,
                    title="summary (ratio = runledger / baseline; for time, memory and drift "
                    "lower is better)")
    results["elapsed_s"] = time.perf_counter() - started
    # a partial run never overwrites the full results file
    path = write_results("-".join([NAME, *args.only]) if partial else NAME, results)
    print(f"wrote {path} in {results['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
