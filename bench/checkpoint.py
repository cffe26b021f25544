"""Benchmark: the checkpoint commit protocol (docs/architecture.md §9) vs bare saves and raw I/O.

Usage: ``.venv/bin/python bench/checkpoint.py [--quick]``

The state is what ``worker.trainstate.TrainState.state_dict`` builds for one rank
(``get_state_dict(model, [opt])`` plus ``rng.rank0``): an fp32 stack of Linear
layers and AdamW after one step, ~1.13 GB (``--quick``: ~63 MB), on CPU,
written to a temporary directory on local disk; every checkpoint is removed
once measured.

1. Blocking stall, median of 3 rounds (``--quick``: 1), contenders interleaved
   per round: ``write_checkpoint`` (sync: DCP shards with fsync, CRC32C
   on the write path, coverage check, manifest; *not* the Kafka proposal/verdict round
   trip, which the session adds); async staging as the session does it
   (``Persister.staging.stage``: the immutable CPU copy, into the buffers of
   the previous checkpoint once its write is done; ``async_stage_first`` is a
   run's first checkpoint, into fresh buffers); the background write through
   the ``Persister`` is timed apart.
   Baselines: ``torch.save`` + fsync, and bare DCP ``save`` with
   ``FileSystemWriter(sync_files=True)``.
2. Commit overhead: (write_checkpoint - bare DCP) / bare DCP, and its parts
   timed by calling the pieces on a fresh bare DCP directory: the CRC32C the
   write path computes (here over the shard bytes already in memory: its CPU cost,
   an upper bound as write_checkpoint overlaps it with the write), the coverage
   check (reads the DCP metadata), the manifest write; apart, not in the sum, the
   opt-in read-back of every file (``worker.commit.READBACK``, off).
3. Persist bandwidth: checkpoint bytes / write time, vs one file of the same
   bytes written sequentially in 8 MiB chunks, then fsync.
4. Restore bandwidth: ``verify`` + ``load`` into a fresh state of the same
   shapes, and each alone (load alone: DCP reading the store, no verified bytes
   held), vs reading the raw file sequentially; the files are
   dropped from the page cache first (``posix_fadvise(DONTNEED)``, checked
   with ``mincore``); a warm pass is reported too.
5. Async host memory: VmRSS before the first stage, after it, after its
   background write (the copy stays in the pool for the next one), after the
   second checkpoint, after ``Persister.close()`` (the pool lets it go), and
   after ``malloc_trim(0)``.

Reference, not a baseline: the same copy as ``stage`` into buffers allocated
(and touched) beforehand, to show what first-touch allocation costs the stall.

MB = 10^6 bytes. Ratios are runledger / baseline from this run. Nothing asserts
on a timing. Results go to ``bench/results/checkpoint.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path; use the repository root.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import crc32c
import torch
from torch.distributed.checkpoint.state_dict import get_model_state_dict

from bench.checkpoint_parts import (
    bare_dcp,
    build_model,
    copy_into,
    drop_cache,
    files_under,
    make_state,
    malloc_trim,
    mib,
    raw_read,
    raw_write,
    report_writes,
    resident_share,
    rss_bytes,
    same_tensors,
    size_of,
    summary,
    timed,
    torch_save,
    zero_,
)
from bench.common import machine_info, print_table, ratio, write_results
from worker import restore, storage
from worker.comm import Comm
from worker.commit import ManifestFields, Written, _check_coverage, write_checkpoint
from worker.faults import Faults
from worker.layout import DCP_METADATA, CheckpointDir
from worker.manifest import CheckpointManifest, FileEntry, digest
from worker.persist import Persister, nbytes, stage
from worker.restore import Candidate, load, verify

NAME = "checkpoint"
RUN = "bench-ckpt"
SEED = 11
COMM = Comm.single()
CONTENDERS = ("torch_save", "bare_dcp", "sync", "async_stage", "async_stage_first",
              "async_write", "reuse_copy", "raw_write")


@dataclasses.dataclass(frozen=True, slots=True)
class Mode:
    width: int
    layers: int
    rounds: int


FULL = Mode(3072, 10, 3)
QUICK = Mode(1024, 5, 1)


@dataclasses.dataclass
class Ctx:
    root: Path
    state: dict[str, Any]
    required: list[str]
    step: int = 0

    def ckdir(self, run: str = RUN) -> CheckpointDir:
        self.step += 1
        return CheckpointDir(str(self.root), run, 1, self.step)


def _fields(step: int) -> ManifestFields:
    return ManifestFields(dataset_id=None, data=None, counters={"step": step, "tokens": 0},
                          code_version="bench", parent_digest=None)


def sync_write(ctx: Ctx, state: dict[str, Any], ckdir: CheckpointDir) -> Written:
    shards: list[FileEntry] = []
    return write_checkpoint(ckdir, state, COMM, required_keys=ctx.required,
                            fields=_fields(ckdir.step), faults=Faults(None, 0, 1),
                            on_shard=shards.append)


def _job(ctx: Ctx, staged: dict[str, Any], ckdir: CheckpointDir) -> Callable[[], None]:
    """The background job, holding the only reference to the staged copy (as the session's)."""
    def job() -> None:
        sync_write(ctx, staged, ckdir)
    return job


def commit_parts(ckdir: CheckpointDir, required: list[str]) -> dict[str, float]:
    """The pieces write_checkpoint adds over DCP, timed on a just-written bare DCP directory."""
    names = [n for n in storage.list_names(ckdir.url)
             if n.endswith(".distcp") or n == DCP_METADATA]
    entries: list[FileEntry] = []

    def readback() -> None:
        for n in names:
            size, crc = storage.checksum(ckdir.file(n))
            entries.append(FileEntry(path=n, bytes=size, crc32c=crc, rank=0))

    shards = [Path(ckdir.file(n)).read_bytes() for n in names]  # in memory, as DCP hands them

    def write_path_crc() -> None:
        for data in shards:
            crc32c.crc32c(data)

    def manifest() -> None:
        m = CheckpointManifest(run_id=ckdir.run_id, generation=1, step=ckdir.step, world_size=1,
                               files=tuple(entries), keys=tuple(sorted(required)),
                               counters={"step": ckdir.step}, code_version="bench")
        data = m.to_json()
        storage.write_once(ckdir.manifest_url, data)
        digest(data)

    t_crc = timed(write_path_crc)
    del shards[:]
    t_read = timed(readback)
    sizes = {e.path: e.bytes for e in entries}
    t_cov = timed(lambda: _check_coverage(ckdir, None, sizes, set(required)))
    return {"crc_on_write_path": t_crc, "coverage_check": t_cov,
            "manifest_write": timed(manifest), "opt_in_readback": t_read}


def async_round(ctx: Ctx) -> tuple[float, float, float, dict[str, int | None],
                                   dict[str, bool]]:
    """Two async checkpoints through one Persister, as a session takes them: the first
    stages into fresh buffers, the second into the first's, reused once its write is done.
    (first stall, steady stall, background write, RSS at each point, staged copy alive)."""
    persister = Persister(backlog=1)
    rss = {"before": rss_bytes()}
    stalls: list[float] = []
    writes: list[float] = []
    probe: weakref.ref[torch.Tensor] | None = None
    alive: dict[str, bool] = {}
    for i in range(2):
        t0 = time.perf_counter()
        staged = persister.staging.stage(ctx.state)
        stalls.append(time.perf_counter() - t0)
        if i == 0:
            rss["after_stage"] = rss_bytes()
            probe = weakref.ref(next(iter(staged.value["model"].values())))
        ckdir = ctx.ckdir()
        t0 = time.perf_counter()
        persister.submit(_job(ctx, staged.value, ckdir), staged)
        del staged
        persister.drain()
        writes.append(time.perf_counter() - t0)
        storage.remove_tree(ckdir.url)
        if i == 0:
            rss["after_drain"] = rss_bytes()
            alive["after_drain"] = probe is not None and probe() is not None
    rss["after_second"] = rss_bytes()
    persister.close()
    rss["after_close"] = rss_bytes()
    alive["after_close"] = probe is not None and probe() is not None
    malloc_trim()
    rss["after_trim"] = rss_bytes()
    return stalls[0], stalls[1], writes[1], rss, alive


def write_rounds(ctx: Ctx, rounds: int, verbose: bool = True
                 ) -> tuple[dict[str, Any], Written, Path]:
    """Every write contender once per round, the order rotated each round (so none always
    follows the same one); the last round's sync checkpoint and raw file stay for restore."""
    samples: dict[str, list[float]] = {k: [] for k in CONTENDERS}
    parts: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    memory: list[dict[str, Any]] = []
    kept: dict[str, Any] = {}
    last = False

    def torch_pt() -> None:
        path = ctx.root / "torch.pt"
        samples["torch_save"].append(timed(lambda: torch_save(ctx.state, path)))
        sizes["torch_save"] = size_of(path)
        path.unlink()

    def bare() -> None:
        d = ctx.ckdir("bench-bare")
        samples["bare_dcp"].append(timed(lambda: bare_dcp(ctx.state, Path(d.url))))
        sizes["bare_dcp"] = size_of(Path(d.url))
        for k, v in commit_parts(d, ctx.required).items():
            parts.setdefault(k, []).append(v)
        storage.remove_tree(d.url)

    def sync() -> None:
        d = ctx.ckdir()
        out: list[Written] = []
        samples["sync"].append(timed(lambda: out.append(sync_write(ctx, ctx.state, d))))
        sizes["sync"] = size_of(Path(d.url))
        if last:
            kept["written"] = out[0]
        else:
            storage.remove_tree(d.url)

    def asynchronous() -> None:
        first, stall, write, rss, alive = async_round(ctx)
        samples["async_stage_first"].append(first)
        samples["async_stage"].append(stall)
        samples["async_write"].append(write)
        memory.append({"rss_bytes": rss, "staged_copy_alive": alive})
        buf = stage(ctx.state)  # allocated and touched outside the timing
        samples["reuse_copy"].append(timed(lambda b=buf: copy_into(b, ctx.state)))
        del buf

    def raw() -> None:
        path = ctx.root / "raw.bin"
        n = sizes.get("sync") or sizes.get("bare_dcp") or nbytes(ctx.state)
        samples["raw_write"].append(timed(lambda: raw_write(path, n)))
        sizes["raw_write"] = n
        if last:
            kept["raw"] = path
        else:
            path.unlink()

    order: list[Callable[[], None]] = [torch_pt, bare, sync, asynchronous, raw]
    for r in range(rounds):
        last = r == rounds - 1
        turn = order[r % len(order):] + order[: r % len(order)]
        for fn in turn:
            fn()
        if verbose:
            print(f"   round {r + 1}/{rounds} ({' > '.join(f.__name__ for f in turn)}): "
                  + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in samples.items()), flush=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {"samples_s": samples, "median_s": med, "sizes_bytes": sizes, "parts_s": parts,
            "memory": memory}, kept["written"], kept["raw"]


def restore_section(ctx: Ctx, mode: Mode, written: Written, raw: Path,
                    rounds: int) -> dict[str, Any]:
    model, opt = build_model(mode.width, mode.layers, SEED + 1)
    template = make_state(model, opt)
    zero_(template)
    cand = Candidate(written.manifest.step, written.manifest_url, written.digest)
    files = files_under(Path(written.ckdir.url))
    nb = sum(p.stat().st_size for p in files)

    def check() -> None:
        verify(cand, COMM, run_id=RUN, dataset_id=None)

    def cold(paths: list[Path]) -> float | None:
        drop_cache(paths)
        return resident_share(paths)

    samples: dict[str, list[float]] = {k: [] for k in ("verify_load", "verify", "load",
                                                      "raw_read", "warm_verify_load",
                                                      "warm_raw_read")}
    resident: list[float | None] = []
    loaded_ok = None
    for _ in range(rounds):
        resident.append(cold(files))
        t_v = timed(check)
        t_l = timed(lambda: load(cand, template, COMM))
        samples["verify_load"].append(t_v + t_l)
        if loaded_ok is None:
            loaded_ok = same_tensors(ctx.state, template)
        resident.append(cold(files))
        samples["verify"].append(timed(check))
        restore._held.clear()  # its mappings would pin the page cache against the next drop
        resident.append(cold(files))
        samples["load"].append(timed(lambda: load(cand, template, COMM)))
        resident.append(cold([raw]))
        samples["raw_read"].append(timed(lambda: raw_read([raw])))
        samples["warm_raw_read"].append(timed(lambda: raw_read([raw])))
        raw_read(files)
        samples["warm_verify_load"].append(timed(check) + timed(
            lambda: load(cand, template, COMM)))
    raw_bytes = raw.stat().st_size
    storage.remove_tree(written.ckdir.url)
    raw.unlink()
    med = {k: statistics.median(v) for k, v in samples.items()}
    known = [x for x in resident if x is not None]
    worst = max(known) if known else None
    cache = "cold" if worst is not None and worst < 0.01 else "warm?"
    out: dict[str, Any] = {
        "bytes": nb, "raw_bytes": raw_bytes,
        "samples_s": samples, "median_s": med, "cache": cache,
        "resident_share_before_cold_reads": resident, "loaded_state_matches": loaded_ok,
        "mb_s": {k: nb / med[k] / 1e6 for k in ("verify_load", "verify", "load", "raw_read")},
        "warm_mb_s": {"verify_load": nb / med["warm_verify_load"] / 1e6,
                      "raw_read": nb / med["warm_raw_read"] / 1e6}}
    base = out["mb_s"]["raw_read"]
    rows = [[f"{k.replace('_', ' ')} ({cache})", f"{med[k]:.3f}", f"{v:,.0f}",
             f"{ratio(v, base):.2f}"] for k, v in out["mb_s"].items()]
    wbase = out["warm_mb_s"]["raw_read"]
    rows += [[f"{k.replace('_', ' ')} (warm)", f"{med['warm_' + k]:.3f}", f"{v:,.0f}",
              f"{ratio(v, wbase):.2f}"] for k, v in out["warm_mb_s"].items()]
    shown = "-" if worst is None else f"{worst:.1%}"
    print_table(["restore", "median s", "MB/s", "/ raw read"], rows,
                title=f"4. restore {mib(nb)} MiB into a fresh state of the same shapes; "
                f"page cache dropped with posix_fadvise before each cold read (at most {shown} "
                f"resident by mincore; the hypervisor may still cache); loaded state equal to "
                f"the saved one: {loaded_ok}")
    return out


def warm_up(root: Path) -> None:
    """Every contender once on a tiny state, so first-call costs stay out of the figures."""
    model, opt = build_model(64, 2, SEED)
    ctx = Ctx(root / "warmup", make_state(model, opt),
              [f"model.{k}" for k in get_model_state_dict(model)])
    ctx.root.mkdir()
    _, written, _ = write_rounds(ctx, 1, verbose=False)
    cand = Candidate(written.manifest.step, written.manifest_url, written.digest)
    verify(cand, COMM, run_id=RUN, dataset_id=None)
    load(cand, make_state(model, opt), COMM)
    shutil.rmtree(ctx.root)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="~63 MB state, one round")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # no_dist=True
    started = time.perf_counter()
    machine = machine_info(["torch", "crc32c", "fsspec", "runledger"])
    model, opt = build_model(mode.width, mode.layers, SEED)
    state_s = [timed(lambda: make_state(model, opt)) for _ in range(3)]
    state = make_state(model, opt)
    params = sum(p.numel() for p in model.parameters())
    size = nbytes(state)
    print(f"bench/checkpoint.py ({'quick' if args.quick else 'full'}) on "
          f"{machine['usable_cores']} cores, Python {machine['python']}, torch "
          f"{torch.__version__}, load average {machine['load_average_1_5_15']}")
    print(f"state: {params:,} fp32 params + AdamW moments = {size:,} bytes "
          f"({size / (1 << 30):.3f} GiB); building it (get_state_dict + rng.capture) takes "
          f"{statistics.median(state_s) * 1e3:.1f} ms, common to every contender, not counted\n",
          flush=True)
    results: dict[str, Any] = {
        "benchmark": NAME, "mode": "quick" if args.quick else "full", "machine": machine,
        "config": dataclasses.asdict(mode),
        "state": {"params": params, "bytes": size, "build_s": state_s},
        "notes": [
            "ratio = runledger / baseline, both measured in this run; MB = 1e6 bytes",
            "sync stall = write_checkpoint (DCP shards with fsync and CRC32C on the write "
            "path, coverage check, manifest); the session's Kafka proposal/verdict round trip "
            "is excluded",
            "async stall = stage(state) only; its write runs on a Persister thread (timed from "
            "submit to drain)",
            "storage.write_once does not fsync the manifest or the directory",
            "cold reads: posix_fadvise(DONTNEED) per file, residency checked with mincore; "
            "the hypervisor's cache below this VM is out of reach",
            "shared machine: other work runs at the same time; numbers are noisy",
        ],
    }
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-", dir="/tmp") as tmp:
        root = Path(tmp)
        warm_up(root)
        ctx = Ctx(root, state, [f"model.{k}" for k in get_model_state_dict(model)])
        t0 = time.perf_counter()
        writes, written, raw = write_rounds(ctx, mode.rounds)
        results.update(report_writes(writes, size))
        results["stall"]["elapsed_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        results["restore"] = restore_section(ctx, mode, written, raw, mode.rounds)
        results["restore"]["elapsed_s"] = time.perf_counter() - t0
    rows = summary(results)
    results["summary"] = [[str(c) for c in row] for row in rows]
    print_table(["metric", "runledger", "baseline", "ratio"], rows,
                title="summary (ratio = runledger / baseline; for time and memory lower is "
                "better, for MB/s higher is better)")
    results["elapsed_s"] = time.perf_counter() - started
    path = write_results(NAME, results)
    print(f"wrote {path} in {results['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
