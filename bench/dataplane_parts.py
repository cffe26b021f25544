"""Helpers for ``bench/dataplane.py``: memory probes, the corpus, synthesized loader states,
the bare torch baseline dataset, the mixing section, and the summary rows.

Kept apart so the benchmark script stays readable, and so torch's worker
processes can import the baseline dataset by its module name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset

from bench.common import fmt_num, print_table, ratio, time_repeated
from dataplane.catalog import build_manifest
from dataplane.manifest import DatasetManifest
from dataplane.mixing import exact_pick, greedy_pick, integer_weights
from dataplane.permute import ALGORITHM
from dataplane.shards import DTYPES, HEADER_BYTES, parse_header
from dataplane.state import STATE_VERSION
from dataplane.synth import template, write_corpus

MIB = float(1 << 20)


def mib(n: int | None) -> str:
    """Bytes as MiB with one decimal; ``-`` for unknown."""
    return "-" if n is None else f"{n / MIB:,.1f}"


# --- memory --------------------------------------------------------------------


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class PeakRss:
    """Peak resident set size growth over a block (Linux: VmHWM, reset via clear_refs).

    ``delta_bytes`` is None where the peak cannot be reset or read.
    """

    def __init__(self) -> None:
        self.delta_bytes: int | None = None
        self._before: int | None = None

    def __enter__(self) -> PeakRss:
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")  # resets VmHWM to the current RSS
            self._before = _status_kib("VmRSS")
        except OSError:
            self._before = None
        return self

    def __exit__(self, *exc: object) -> None:
        peak = _status_kib("VmHWM")
        if self._before is not None and peak is not None:
            self.delta_bytes = max(peak - self._before, 0) * 1024


# --- corpus and states -----------------------------------------------------------


def make_manifest(root: str, seq_len: int) -> tuple[DatasetManifest, list[str]]:
    """The synthetic 3-source corpus under ``root``, exact mixing counted in tokens, concat
    packing at ``seq_len``; also every shard's path, sources in manifest order."""
    written = write_corpus(root, seed=0)
    doc = template(root, seed=0, seq_len=seq_len)
    doc["mixture"]["unit"] = "tokens"
    manifest = build_manifest(doc, root)
    paths = [os.path.join(root, p) for s in manifest.sources for p in written[s.name]]
    return manifest, paths


def _largest_remainder(a: Sequence[int], big_a: int, total: int) -> list[int]:
    """Integers summing to ``total`` with ``|c_i - a_i/A * total| < 1`` (ties: lower index)."""
    parts = [divmod(ai * total, big_a) for ai in a]
    out = [q for q, _ in parts]
    left = total - sum(out)
    for i in sorted(range(len(a)), key=lambda j: (-parts[j][1], j))[:left]:
        out[i] += 1
    return out


def synth_state(manifest: DatasetManifest, seed: int, batch_size: int,
                position: int) -> dict[str, Any]:
    """A valid loader state at ``position`` sequences, without replaying the order there.

    Packer empty, so exactly ``position * seq_len`` tokens were consumed; per-source
    units are that total split by the exact weights (largest remainder), draws are
    units over the mean record size, epochs follow from the draws.
    """
    if position % batch_size:
        raise ValueError(f"position {position} is not a multiple of {batch_size}")
    names = [s.name for s in manifest.sources]
    fr = manifest.mixture.fractions()
    a, big_a = integer_weights([fr[n] for n in names])
    units = _largest_remainder(a, big_a, position * manifest.packing.seq_len)
    draws = [(2 * u * s.records + s.tokens) // (2 * s.tokens)
             for u, s in zip(units, manifest.sources, strict=True)]
    epochs = [d // s.records for d, s in zip(draws, manifest.sources, strict=True)]
    sources = {n: {"draws": d, "units": u, "base_units": 0, "active": True, "epoch": e}
               for n, d, u, e in zip(names, draws, units, epochs, strict=True)}
    return {"version": STATE_VERSION, "algorithm": ALGORITHM,
            "dataset_id": manifest.dataset_id, "seed": seed, "global_batch_size": batch_size,
            "batch": position // batch_size, "epoch": min(epochs), "position": position,
            "draws_total": sum(draws), "sources": sources, "packer": None, "finished": False}


# --- the bare torch baseline -----------------------------------------------------


class ShardRows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """The same rltok-v1 files, memory-mapped, read as one token stream in file order and
    cut into ``seq_len`` rows (row ``i`` wraps around past the end). Returns tokens
    (int64) and document ids from the offsets index. No ordering, mixing, digest
    check or resume: the bytes only."""

    def __init__(self, paths: Sequence[str], seq_len: int, rows: int) -> None:
        self.paths = list(paths)
        self.seq_len = seq_len
        self.rows = rows
        counts = []
        for path in self.paths:
            with open(path, "rb") as f:
                counts.append(parse_header(f.read(HEADER_BYTES)).tokens)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.per_pass = int(self.starts[-1]) // seq_len
        self._maps: list[tuple[npt.NDArray[Any], npt.NDArray[Any]]] | None = None

    def _open(self) -> list[tuple[npt.NDArray[Any], npt.NDArray[Any]]]:
        maps: list[tuple[npt.NDArray[Any], npt.NDArray[Any]]] = []
        for path in self.paths:
            with open(path, "rb") as f:
                h = parse_header(f.read(HEADER_BYTES))
            dtype = np.dtype(DTYPES[h.itemsize]).newbyteorder("<")
            tokens = np.memmap(path, dtype=dtype, mode="r", offset=h.tokens_at,
                               shape=(h.tokens,))
            offsets = np.memmap(path, dtype="<u8", mode="r", offset=h.offsets_at,
                                shape=(h.records + 1,))
            maps.append((tokens, offsets))
        return maps

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._maps is None:  # opened lazily, in each worker process
            self._maps = self._open()
        lo = (i % self.per_pass) * self.seq_len
        hi = lo + self.seq_len
        tokens = np.empty(self.seq_len, dtype=np.int64)
        docs = np.empty(self.seq_len, dtype=np.int32)
        k = int(np.searchsorted(self.starts, lo, side="right")) - 1
        at = lo
        while at < hi:
            base = int(self.starts[k])
            end = min(hi, int(self.starts[k + 1]))
            toks, offs = self._maps[k]
            tokens[at - lo:end - lo] = toks[at - base:end - base]
            docs[at - lo:end - lo] = np.searchsorted(
                offs, np.arange(at - base, end - base, dtype=np.uint64), side="right")
            at = end
            k += 1
        return torch.from_numpy(tokens), torch.from_numpy(docs)


# --- mixing ------------------------------------------------------------------------


def weight_sets(seed: int) -> dict[str, list[Fraction]]:
    """The weight sets, as exact rationals (a float literal is the decimal it reads as)."""
    rng = np.random.default_rng(seed)
    random7 = [Fraction(f"{x:.4f}") for x in rng.uniform(0.01, 1.0, size=7)]
    sets = {"0.5/0.3/0.2": ["0.5", "0.3", "0.2"], "0.61/0.3/0.09": ["0.61", "0.3", "0.09"],
            "0.699/0.3/0.001 (tiny)": ["0.699", "0.3", "0.001"]}
    out = {k: [Fraction(w) for w in v] for k, v in sets.items()}
    out["7 random"] = random7
    return {k: [w / sum(v) for w in v] for k, v in out.items()}


def start_counts(weights: Sequence[Fraction], n0: int) -> list[int]:
    """Counts at ``n0`` picks, each within 1 of ``w_i * n0`` and summing to ``n0``."""
    a, big_a = integer_weights(weights)
    return _largest_remainder(a, big_a, n0)


def drift(method: str, weights: Sequence[Fraction], n0: int, picks: int
          ) -> tuple[Fraction, float, list[int]]:
    """Run ``picks`` picks from ``start_counts(n0)``; return the max over every prefix
    ``n0..n0+picks`` of ``|c_i - w_i * n|`` (exact, integer arithmetic against the rational
    weights), the seconds taken (bookkeeping included), and the final counts.

    Only O(1) per pick: ``c_i*A - a_i*n`` only rises when ``i`` is picked (so its maximum
    is right after a pick of ``i``) and only falls otherwise (so its minimum is right
    before one, or at the end).
    """
    a, big_a = integer_weights(weights)
    floats = [float(w) for w in weights]
    counts = start_counts(weights, n0)
    k = len(a)
    ones, active = [1] * k, [True] * k
    worst = max(abs(c * big_a - ai * n0) for c, ai in zip(counts, a, strict=True))
    n = n0
    start = time.perf_counter()
    for _ in range(picks):
        if method == "exact":
            i = exact_pick(counts, ones, a, big_a, n, active)
        else:
            i = greedy_pick(counts, floats, n)
        c, ai = counts[i], a[i]
        below = ai * n - c * big_a  # before the pick
        n += 1
        c += 1
        counts[i] = c
        above = c * big_a - ai * n  # after it
        if below > worst:
            worst = below
        if above > worst:
            worst = above
    elapsed = time.perf_counter() - start
    worst = max(worst, *(abs(c * big_a - ai * n) for c, ai in zip(counts, a, strict=True)))
    return Fraction(worst, big_a), elapsed, counts


def pick_loop(method: str, weights: Sequence[Fraction], picks: int) -> None:
    """Bare picks from zero (no drift bookkeeping), for picks/s."""
    a, big_a = integer_weights(weights)
    floats = [float(w) for w in weights]
    k = len(a)
    counts, ones, active = [0] * k, [1] * k, [True] * k
    if method == "exact":
        for n in range(picks):
            counts[exact_pick(counts, ones, a, big_a, n, active)] += 1
    else:
        for n in range(picks):
            counts[greedy_pick(counts, floats, n)] += 1


# --- the mixing section and the summary ---------------------------------------------


def mixing_section(n: int, offset_picks: int, rate_picks: int, seed: int) -> dict[str, Any]:
    """Section 4 of the benchmark: drift and picks/s per weight set; prints its tables."""
    out: dict[str, Any] = {"picks": n, "offset_picks": offset_picks, "sets": {}}
    rows: list[list[object]] = []
    for label, weights in weight_sets(seed).items():
        entry: dict[str, Any] = {"weights": [str(w) for w in weights]}
        for n0, picks in ((0, n), (10**12, offset_picks), (10**16, offset_picks)):
            d = {m: drift(m, weights, n0, picks) for m in ("exact", "greedy")}
            key = "from_0" if n0 == 0 else f"from_1e{len(str(n0)) - 1}"
            entry[key] = {"n0": n0, "picks": picks,
                          **{m: {"max_drift": float(v[0]), "max_drift_exact": str(v[0]),
                                 "seconds": v[1]} for m, v in d.items()},
                          "ratio_greedy_over_exact": ratio(float(d["greedy"][0]),
                                                           float(d["exact"][0]))}
            rows.append([label if n0 == 0 else "", f"{n0:.0e}" if n0 else "0", f"{picks:,}",
                         f"{float(d['exact'][0]):.3f}", f"{float(d['greedy'][0]):,.3f}",
                         f"{entry[key]['ratio_greedy_over_exact']:,.2f}"])
        rates = {m: time_repeated(partial(pick_loop, m, weights, rate_picks), repeats=3,
                                  warmup=0) for m in ("exact", "greedy")}
        entry["picks_per_s"] = {m: t.rate(rate_picks) for m, t in rates.items()}
        entry["pick_timings"] = {m: t.to_json() for m, t in rates.items()}
        out["sets"][label] = entry
    print_table(["weights", "from n0", "picks", "exact drift", "greedy drift", "greedy/exact"],
                rows, title="4. mixing: max over prefixes of |c_i - w_i n| (items), exact "
                "rational weights; counts at n0 > 0 synthesized within 1 of w_i n0")
    print_table(["weights", "exact picks/s", "greedy picks/s", "ratio"],
                [[k, fmt_num(v["picks_per_s"]["exact"]), fmt_num(v["picks_per_s"]["greedy"]),
                  f"{ratio(v['picks_per_s']['exact'], v['picks_per_s']['greedy']):.2f}"]
                 for k, v in out["sets"].items()],
                title=f"   picks/s over {rate_picks:,} picks from 0, median of 3")
    return out


def summary(res: dict[str, Any]) -> list[list[object]]:
    """The final table's rows: metric, runledger, baseline, ratio."""
    p, r, pl, mx = res["permutation"], res["resume"], res["pipeline"], res["mixing"]
    rows: list[list[object]] = [
        [f"permutation lookups/s, N={p['n']:.0e} (numpy: N / materialise)",
         fmt_num(p["feistel"]["lookups_per_s"]), fmt_num(p["numpy"]["effective_lookups_per_s"]),
         f"{p['ratio_lookups']:.2f}"],
        ["permutation time to first lookup (s)", f"{p['feistel']['first_lookup']['median_s']:.6f}",
         f"{p['numpy']['materialise_median_s']:.2f}", f"{p['ratio_first_lookup']:.1e}"],
        ["permutation tracemalloc peak (MiB)", mib(p["feistel"]["tracemalloc_peak_bytes"]),
         mib(p["numpy"]["tracemalloc_peak_bytes"]), f"{p['ratio_memory']:.3f}"],
    ]
    at0 = r["positions"]["0"]["median_s"]
    for pos in ("1000000", "1000000000"):
        d = r["positions"][pos]
        rows.append([f"resume ms @{int(pos):.0e} (synth.) vs @0", f"{d['median_s'] * 1e3:.1f}",
                     f"{at0 * 1e3:.1f}", f"{d['ratio_vs_position_0']:.2f}"])
        rows.append([f"resume s @{int(pos):.0e} vs replay (extrapolated)", f"{d['median_s']:.3f}",
                     f"{d['replay_extrapolated_s']:,.0f}", f"{d['ratio_vs_replay']:.1e}"])
    for name, v in pl["variants"].items():
        label = name.removeprefix("runledger_").replace("_", " ")
        rows.append([f"pipeline tokens/s, {label} (torch w2)", fmt_num(v["tokens_per_s"]),
                     fmt_num(pl["baseline_tokens_per_s"]), f"{v['ratio']:.2f}"])
    for label, e in mx["sets"].items():
        for key in ("from_0", "from_1e12"):
            d = e[key]
            rows.append([f"mixing drift {label}, n0={d['n0']:.0e}".replace("=0e+00", "=0"),
                         f"{d['exact']['max_drift']:.3f}", f"{d['greedy']['max_drift']:,.3f}",
                         f"{ratio(d['exact']['max_drift'], d['greedy']['max_drift']):.2f}"])
    e = mx["sets"]["0.5/0.3/0.2"]
    rows.append(["mixing picks/s, 0.5/0.3/0.2", fmt_num(e["picks_per_s"]["exact"]),
                 fmt_num(e["picks_per_s"]["greedy"]),
                 f"{ratio(e['picks_per_s']['exact'], e['picks_per_s']['greedy']):.2f}"])
    return rows
