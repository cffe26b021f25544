"""Benchmark: background replication to a second storage tier vs a single tier (issue #15).

Usage: ``.venv/bin/python bench/replication.py [--quick] [--threads N]``

One training loop on CPU (an fp32 stack of Linear layers, AdamW, fixed random
batches), a checkpoint every ``k`` steps, run twice per round with the same
seed, data, model and checkpoint path:

- ``single`` (the baseline): one tier, ``local`` (a local directory).
- ``tiered``: the same first tier, plus ``remote`` (another local directory
  standing for remote storage) filled in the background by the worker's own
  :class:`worker.tiers.Replicator` (stream each file, read it back against the
  manifest's CRC32C, copy the manifest last and check its SHA-256).

Both do exactly the same training and checkpointing: ``worker.commit.write_checkpoint``
(DCP shards with fsync, CRC32C read-back, coverage, manifest) to the first tier,
then one GC pass in a background thread after each commit through
``worker.tiers.collect_tiers`` (per-tier ``keep_last``; ``single`` collects its one
tier), as ``worker.session.Session`` does. The session also needs a broker (its
proposal/verdict round trip and its reports); that round trip is left out, as in
``bench/checkpoint.py``, so "committed" here is the moment ``write_checkpoint``
returns, and the replicator's reports are kept in memory instead of sent. The
replicator's pending copies are pinned against GC on the first tier, and its
failures are checked on the step path, both as in the session. The variants
alternate order each round so neither always runs on a warmer machine.

Reported: step time (wall clock of one loop iteration, the checkpoint stall
included on checkpoint steps) as mean/p50/p99 over every step of every round,
the steps without a checkpoint and the checkpoint steps apart, the ratio
tiered / single, and the median over rounds of each round's ratio of means (the
pair of a round ran back to back, so a burst of other load on a shared machine
moves that figure least); per tier, the durability lag (the replicator's ``lag_ms``:
commit to verified copy) and the bytes copied; the tail (waiting for the last
copy after the loop). Nothing asserts on a timing. Results go to
``bench/results/replication.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path; use the repository root.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import torch
from torch.distributed.checkpoint.state_dict import get_model_state_dict

from bench.checkpoint_parts import build_model, make_state
from bench.common import machine_info, percentile, print_table, ratio, write_results
from events.base import Header
from events.model import CheckpointReplicated, Event, ManifestCommitted
from events.workerenv import TierEnv
from worker import storage
from worker.comm import Comm
from worker.commit import ManifestFields, write_checkpoint
from worker.faults import Faults
from worker.layout import CheckpointDir
from worker.manifest import FileEntry
from worker.tiers import Identity, Replicator, collect_tiers

NAME = "replication"
RUN = "bench-repl"
SEED = 13
COMM = Comm.single()
VARIANTS = ("single", "tiered")


@dataclasses.dataclass(frozen=True, slots=True)
class Mode:
    width: int
    layers: int
    batch: int
    steps: int
    every: int  # checkpoint every k steps
    rounds: int
    keep_local: int
    keep_remote: int


FULL = Mode(width=2048, layers=8, batch=64, steps=40, every=10, rounds=5, keep_local=2,
            keep_remote=4)
QUICK = Mode(width=512, layers=4, batch=32, steps=20, every=5, rounds=1, keep_local=2,
             keep_remote=3)


def tiers_for(variant: str, root: Path, mode: Mode) -> tuple[TierEnv, ...]:
    local = TierEnv("local", str(root / "local"), "process", mode.keep_local)
    remote = TierEnv("remote", str(root / "remote"), "cluster", mode.keep_remote)
    return (local,) if variant == "single" else (local, remote)


def _header(key: str) -> Header:
    return Header(event_id=f"{RUN}/g1/r0/{key}", run_id=RUN, generation=1,
                  occurred_at=int(time.time() * 1000), producer="bench")


@dataclasses.dataclass
class Loop:
    """One variant's training loop and what it measured."""

    variant: str
    mode: Mode
    tiers: tuple[TierEnv, ...]
    facts: list[Event] = dataclasses.field(default_factory=list)
    reports: list[CheckpointReplicated] = dataclasses.field(default_factory=list)
    step_s: list[float] = dataclasses.field(default_factory=list)
    ckpt_steps: list[int] = dataclasses.field(default_factory=list)
    stall_s: list[float] = dataclasses.field(default_factory=list)
    gc_passes: int = 0
    tail_s: float = 0.0
    checkpoint_bytes: int = 0
    held_after: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    def run(self) -> None:
        mode = self.mode
        for t in self.tiers:
            Path(t.root).mkdir(parents=True)
        model, opt = build_model(mode.width, mode.layers, SEED)
        required = [f"model.{k}" for k in get_model_state_dict(model)]
        gen = torch.Generator().manual_seed(SEED)
        batches = [torch.randn(mode.batch, mode.width, generator=gen) for _ in range(4)]
        replicator = Replicator(self.tiers[1:], Identity("r0", _header),
                                self.reports.append) if len(self.tiers) > 1 else None
        gc: threading.Thread | None = None
        try:
            for step in range(1, mode.steps + 1):
                t0 = time.perf_counter()
                if replicator is not None:
                    replicator.check()  # the session checks its background work every step
                loss = model(batches[step % len(batches)]).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if step % mode.every == 0:
                    t1 = time.perf_counter()
                    gc = self._checkpoint(step, model, opt, required, replicator, gc)
                    self.stall_s.append(time.perf_counter() - t1)
                    self.ckpt_steps.append(step)
                self.step_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            if replicator is not None:
                replicator.drain()
            self.tail_s = time.perf_counter() - t0
            if gc is not None:
                gc.join()
        finally:
            if replicator is not None:
                replicator.close()

    def _checkpoint(self, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer,
                    required: list[str], replicator: Replicator | None,
                    gc: threading.Thread | None) -> threading.Thread | None:
        state = make_state(model, opt)
        ckdir = CheckpointDir(self.tiers[0].root, RUN, 1, step)
        fields = ManifestFields(dataset_id=None, data=None, counters={"step": step},
                                code_version="bench", parent_digest=None)
        shards: list[FileEntry] = []
        written = write_checkpoint(ckdir, state, COMM, required_keys=required, fields=fields,
                                   faults=Faults(None, 0, 1), on_shard=shards.append)
        self.checkpoint_bytes = written.manifest.total_bytes
        self.facts.append(ManifestCommitted(header=_header(f"ckpt/{step}/committed"), step=step,
                                            manifest_path=written.manifest_url,
                                            manifest_digest=written.digest))
        if replicator is not None:
            replicator.submit(written, time.monotonic())
        if gc is not None and gc.is_alive():
            return gc  # as the session: one pass at a time, the next commit retries
        pinned = replicator.pinned() if replicator is not None else frozenset()
        facts = list(self.facts)
        mode = self.mode
        thread = threading.Thread(target=lambda: collect_tiers(
            self.tiers, RUN, facts, mode.keep_local, None, pinned), name="bench-gc", daemon=True)
        thread.start()
        self.gc_passes += 1
        return thread

    def held(self) -> dict[str, list[int]]:
        """The committed steps whose manifest each tier still holds after the last GC."""
        return {t.name: [s for s in self.ckpt_steps
                         if storage.read_bytes(CheckpointDir(t.root, RUN, 1, s).manifest_url)
                         is not None] for t in self.tiers}


def stats(values: Sequence[float]) -> dict[str, float]:
    ms = [v * 1000.0 for v in values]
    if not ms:
        return {"n": 0, "mean_ms": float("nan"), "p50_ms": float("nan"),
                "p99_ms": float("nan")}
    return {"n": len(ms), "mean_ms": statistics.fmean(ms), "p50_ms": percentile(ms, 50),
            "p99_ms": percentile(ms, 99)}


def rounds(mode: Mode, base: Path, verbose: bool = True) -> dict[str, list[Loop]]:
    out: dict[str, list[Loop]] = {v: [] for v in VARIANTS}
    for r in range(mode.rounds):
        order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
        for variant in order:
            root = base / f"r{r}-{variant}"
            loop = Loop(variant, mode, tiers_for(variant, root, mode))
            loop.run()
            loop.held_after = loop.held()
            out[variant].append(loop)
            storage.remove_tree(str(root))
            if verbose:
                s = stats(loop.step_s)
                print(f"   round {r + 1}/{mode.rounds} {variant}: mean step "
                      f"{s['mean_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms, tail "
                      f"{loop.tail_s:.2f} s", flush=True)
    return out


def _part(loop: Loop, part: str) -> list[float]:
    due = part == "checkpoint"
    return [s for i, s in enumerate(loop.step_s) if ((i + 1) % loop.mode.every == 0) == due]


def summarize(loops: dict[str, list[Loop]], mode: Mode) -> dict[str, Any]:
    per: dict[str, Any] = {}
    for variant, runs in loops.items():
        every = [s for loop in runs for s in loop.step_s]
        plain = [s for loop in runs for i, s in enumerate(loop.step_s)
                 if (i + 1) % mode.every != 0]
        ckpt = [s for loop in runs for i, s in enumerate(loop.step_s)
                if (i + 1) % mode.every == 0]
        per[variant] = {"all": stats(every), "no_checkpoint": stats(plain),
                        "checkpoint": stats(ckpt),
                        "stall": stats([s for loop in runs for s in loop.stall_s]),
                        "tail_s": [loop.tail_s for loop in runs],
                        "gc_passes": [loop.gc_passes for loop in runs],
                        "held_after_gc": [loop.held_after for loop in runs],
                        "samples_s": [loop.step_s for loop in runs]}
    tiered = loops["tiered"]
    reports = [r for loop in tiered for r in loop.reports]
    lags: dict[str, Any] = {}
    for tier in sorted({r.tier for r in reports}):
        mine = [r for r in reports if r.tier == tier]
        lag = [r.lag_ms for r in mine]
        lags[tier] = {"copies": len(mine), "expected": sum(len(lp.ckpt_steps) for lp in tiered),
                      "lag_mean_ms": statistics.fmean(lag), "lag_p50_ms": percentile(lag, 50),
                      "lag_max_ms": max(lag), "bytes": sum(r.bytes for r in mine),
                      "lag_ms": lag}
    # Each round's pair ran back to back: the median of the per-round ratios is the
    # figure least moved by a burst of someone else's load during one round.
    paired = {part: [ratio(stats(t.step_s if part == "all" else _part(t, part))["mean_ms"],
                           stats(s.step_s if part == "all" else _part(s, part))["mean_ms"])
                     for s, t in zip(loops["single"], tiered, strict=True)]
              for part in ("all", "no_checkpoint", "checkpoint")}
    return {"variants": per, "durability_lag": lags, "paired_mean_ratios": paired,
            "checkpoint_bytes": tiered[0].checkpoint_bytes if tiered else 0}


def show(res: dict[str, Any], mode: Mode) -> list[list[object]]:
    v = res["variants"]
    rows: list[list[object]] = []
    for part, label in (("all", "every step"), ("no_checkpoint", "steps without a checkpoint"),
                        ("checkpoint", "checkpoint steps (stall included)")):
        for key in ("mean_ms", "p50_ms", "p99_ms"):
            a, b = v["single"][part][key], v["tiered"][part][key]
            rows.append([f"{label}: {key[:-3]}", f"{a:,.1f}", f"{b:,.1f}", f"{ratio(b, a):.2f}"])
    for part, label in (("all", "every step"), ("no_checkpoint", "steps without a checkpoint"),
                        ("checkpoint", "checkpoint steps")):
        pairs = res["paired_mean_ratios"][part]
        rows.append([f"{label}: mean, median of per-round ratios", "", "",
                     f"{statistics.median(pairs):.2f}"])
    print_table(["step time (ms)", "single (baseline)", "tiered", "tiered / single"], rows,
                title=f"1. step time over {mode.rounds} round(s) of {mode.steps} steps, a "
                f"checkpoint every {mode.every} ({res['checkpoint_bytes'] / 1e6:,.0f} MB each)")
    lag_rows = [[tier, f"{d['copies']}/{d['expected']}", f"{d['lag_mean_ms']:,.0f}",
                 f"{d['lag_p50_ms']:,.0f}", f"{d['lag_max_ms']:,.0f}", f"{d['bytes'] / 1e6:,.0f}"]
                for tier, d in res["durability_lag"].items()]
    tail = statistics.fmean(v["tiered"]["tail_s"])
    print_table(["tier", "verified copies", "lag mean ms", "lag p50 ms", "lag max ms",
                 "MB copied"], lag_rows,
                title=f"2. durability lag per tier (commit -> verified copy, the replicator's "
                f"lag_ms); waiting for the last copy after the loop: {tail:.2f} s mean")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a small model, one round")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's own); the results file"
                        " is then replication-threads<N>.json")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    name = NAME if args.threads is None else f"{NAME}-threads{args.threads}"
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # no_dist=True
    started = time.perf_counter()
    machine = machine_info(["torch", "crc32c", "fsspec", "runledger"])
    print(f"bench/replication.py ({'quick' if args.quick else 'full'}) on "
          f"{machine['usable_cores']} cores, Python {machine['python']}, torch "
          f"{torch.__version__} ({torch.get_num_threads()} threads), load average "
          f"{machine['load_average_1_5_15']}\n", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-replication-", dir="/tmp") as tmp:
        warm = dataclasses.replace(QUICK, steps=QUICK.every * 2, rounds=1)
        rounds(warm, Path(tmp) / "warmup", verbose=False)  # first-call costs stay out
        loops = rounds(mode, Path(tmp))
    res = summarize(loops, mode)
    rows = show(res, mode)
    results: dict[str, Any] = {
        "benchmark": NAME, "mode": "quick" if args.quick else "full", "machine": machine,
        "config": dataclasses.asdict(mode), **res,
        "summary": [[str(c) for c in row] for row in rows],
        "notes": [
            "ratio = tiered / single (the baseline), both measured in this run, interleaved",
            "committed = write_checkpoint returned; the session's Kafka proposal/verdict round "
            "trip is excluded from both variants, so the lag is measured from there",
            "the 'remote' tier is a second local directory on the same disk",
            "shared machine: other work runs at the same time; numbers are noisy",
        ],
        "elapsed_s": time.perf_counter() - started,
    }
    path = write_results(name, results)
    print(f"wrote {path} in {results['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
