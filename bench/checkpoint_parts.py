"""Helpers for bench/checkpoint.py: state, baselines, page-cache control, tables, summary."""

from __future__ import annotations

import ctypes
import gc
import os
import statistics
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from bench.common import print_table, ratio
from worker import rng

MIB = float(1 << 20)
CHUNK = 8 << 20  # raw baselines move 8 MiB at a time, like storage.checksum


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / MIB:,.1f}"


def rss_bytes() -> int | None:
    """VmRSS of this process, from /proc/self/status (after a collection)."""
    gc.collect()
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# --- the state ---------------------------------------------------------------------


def build_model(width: int, layers: int, seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """An fp32 stack of Linear layers and AdamW after one step (so both moments exist)."""
    torch.manual_seed(seed)
    model = nn.Sequential(*(nn.Linear(width, width) for _ in range(layers)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(4, width)).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt


def make_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """What ``worker.trainstate.TrainState.state_dict`` builds (one rank, no scheduler)."""
    msd, osd = get_state_dict(model, [opt])
    return {"model": msd, "optim": osd, "rng.rank0": rng.capture()}


def same_tensors(a: Any, b: Any) -> bool:
    """Whether two nested states hold equal tensors at the same places."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(
            same_tensors(a[k], b[k]) for k in a)
    return True


def copy_into(dst: Any, src: Any) -> None:
    """Copy every tensor of ``src`` into the same place in ``dst`` (same structure)."""
    if isinstance(src, torch.Tensor):
        dst.copy_(src)
    elif isinstance(src, dict):
        for k, v in src.items():
            copy_into(dst[k], v)


def zero_(value: Any) -> None:
    if isinstance(value, torch.Tensor):
        value.zero_()
    elif isinstance(value, dict):
        for v in value.values():
            zero_(v)


# --- baselines ---------------------------------------------------------------------


def torch_save(state: dict[str, Any], path: Path) -> None:
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


def bare_dcp(state: dict[str, Any], path: Path) -> None:
    dcp_save(state, storage_writer=FileSystemWriter(str(path), sync_files=True), no_dist=True)


def raw_write(path: Path, nbytes: int) -> None:
    """One file of ``nbytes``, written sequentially in 8 MiB chunks, then fsync."""
    block = memoryview(os.urandom(CHUNK))
    left = nbytes
    with open(path, "wb", buffering=0) as f:
        while left > 0:
            left -= f.write(block[: min(left, CHUNK)])
        os.fsync(f.fileno())


def raw_read(paths: Iterable[Path]) -> int:
    """Read files sequentially in 8 MiB chunks into one buffer; the bytes read."""
    buf = bytearray(CHUNK)
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in files_under(path))


# --- the page cache ------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_PAGE = os.sysconf("SC_PAGE_SIZE")


def malloc_trim() -> None:
    """Hand glibc's free heap memory back to the kernel (no-op where there is no glibc)."""
    trim = getattr(_libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


def drop_cache(paths: Iterable[Path]) -> None:
    """Ask the kernel to drop these (clean, fsynced) files from the page cache; no root needed."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_share(paths: Sequence[Path]) -> float | None:
    """Share of the files' pages in the page cache (mincore); None where it cannot be read."""
    resident = pages = 0
    for path in paths:
        size = path.stat().st_size
        if size == 0:
            continue
        n = (size + _PAGE - 1) // _PAGE
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = _libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                vec = (ctypes.c_ubyte * n)()
                if _libc.mincore(addr, size, vec) != 0:
                    return None
                resident += n - bytes(vec).count(0)
                pages += n
            finally:
                _libc.munmap(addr, size)
        finally:
            os.close(fd)
    return resident / pages if pages else None


def timed(fn: Any) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# --- the write sections' tables ----------------------------------------------------


def report_writes(w: dict[str, Any], state_bytes: int) -> dict[str, dict[str, Any]]:
    med, sizes = w["median_s"], w["sizes_bytes"]
    stall = {"samples_s": w["samples_s"], "median_s": med, "sizes_bytes": sizes,
             "ratios": {f"{a}_vs_{b}": ratio(med[a], med[b]) for a in ("sync", "async_stage")
                        for b in ("torch_save", "bare_dcp")}}
    rows = [[k, f"{med[k]:.3f}", " / ".join(f"{x:.2f}" for x in w["samples_s"][k]),
             mib(sizes.get(k if not k.startswith("async_stage") else "sync")),
             f"{ratio(med[k], med['torch_save']):.2f}", f"{ratio(med[k], med['bare_dcp']):.2f}"]
            for k in ("sync", "async_stage", "async_stage_first", "async_write", "torch_save",
                      "bare_dcp", "reuse_copy")]
    print_table(["contender", "median s", "samples s", "MiB on disk", "/ torch.save",
                 "/ bare DCP"], rows,
                title=f"1. blocking stall, state {mib(state_bytes)} MiB; sync excludes the "
                "Kafka proposal/verdict round trip; async_stage reuses the previous checkpoint's "
                "buffers, async_stage_first allocates them; async_write runs in the "
                "background; reuse_copy = stage's copy into buffers touched beforehand (reference)")

    parts_med = {k: statistics.median(v) for k, v in w["parts_s"].items()}
    readback = parts_med.pop("opt_in_readback")  # off by default: not part of the commit
    extra = med["sync"] - med["bare_dcp"]
    bare_s = med["bare_dcp"]
    paired = statistics.median(a - b for a, b in zip(w["samples_s"]["sync"],
                                                     w["samples_s"]["bare_dcp"], strict=True))
    parts_sum = sum(parts_med.values())
    commit = {"overhead_s": extra, "overhead_share": ratio(extra, bare_s),
              "paired_overhead_s": paired, "parts_s": w["parts_s"], "parts_median_s": parts_med,
              "parts_sum_s": parts_sum, "parts_sum_share": ratio(parts_sum, bare_s),
              "opt_in_readback_s": readback}
    rows = [["median(write_checkpoint) - median(bare DCP)", f"{extra:.3f}",
             f"{ratio(extra, bare_s):.1%}"],
            ["median per round of (write_checkpoint - bare DCP)", f"{paired:.3f}",
             f"{ratio(paired, bare_s):.1%}"],
            ["sum of the parts below", f"{parts_sum:.4f}", f"{commit['parts_sum_share']:.1%}"]]
    rows += [[f"  {k.replace('_', ' ')}", f"{v:.4f}", f"{ratio(v, bare_s):.1%}"]
             for k, v in parts_med.items()]
    rows.append(["apart: opt-in read-back (READBACK)", f"{readback:.4f}",
                 f"{ratio(readback, bare_s):.1%}"])
    print_table(["commit overhead", "s", "of bare DCP"], rows,
                title="2. commit overhead over bare DCP; the differences carry the disk's noise, "
                "the parts do not: timed alone on a just-written bare DCP directory (read-back "
                "from the page cache, as inside write_checkpoint)")

    nb = sizes["sync"]
    persist = {"bytes": nb, "sync_mb_s": nb / med["sync"] / 1e6,
               "async_mb_s": nb / med["async_write"] / 1e6,
               "raw_write_mb_s": sizes["raw_write"] / med["raw_write"] / 1e6,
               "bare_dcp_mb_s": sizes["bare_dcp"] / med["bare_dcp"] / 1e6}
    rows = [[k.removesuffix("_mb_s"), f"{v:,.0f}", f"{ratio(v, persist['raw_write_mb_s']):.2f}"]
            for k, v in persist.items() if k != "bytes"]
    print_table(["persist", "MB/s", "/ raw write"], rows,
                title=f"3. persist bandwidth: {mib(nb)} MiB (the checkpoint directory) / time; "
                "raw = one file, 8 MiB chunks, fsync")

    last = w["memory"][-1]
    rss = last["rss_bytes"]
    growth = {k: None if rss[k] is None or rss["before"] is None else rss[k] - rss["before"]
              for k in ("after_stage", "after_drain", "after_second", "after_close",
                        "after_trim")}
    memory = {"rounds": w["memory"], "growth_bytes": growth, "state_bytes": state_bytes,
              "staged_copy_alive": last["staged_copy_alive"]}
    rows = [[k.replace("_", " "), mib(g), "-" if g is None else f"{ratio(g, state_bytes):.2f}",
             str(last["staged_copy_alive"].get(k, "-"))] for k, g in growth.items()]
    print_table(["async RSS growth", "MiB", "/ state", "staged copy alive"], rows,
                title="5. async host memory (VmRSS after gc.collect(), last round; measured "
                "before section 4)")
    return {"stall": stall, "commit": commit, "persist": persist, "async_memory": memory}


# --- summary -------------------------------------------------------------------------


def summary(res: dict[str, Any]) -> list[list[object]]:
    """The final table's rows: metric, runledger, baseline, ratio."""
    s, c, p, r, m = (res["stall"], res["commit"], res["persist"], res["restore"],
                     res["async_memory"])
    med = s["median_s"]

    def row(label: str, a: float, b: float, fmt: str = "{:.3f}") -> list[object]:
        return [label, fmt.format(a), fmt.format(b), f"{ratio(a, b):.2f}"]

    rows = [
        row("stall s, sync write_checkpoint vs torch.save", med["sync"], med["torch_save"]),
        row("stall s, sync write_checkpoint vs bare DCP", med["sync"], med["bare_dcp"]),
        row("stall s, async stage() vs torch.save", med["async_stage"], med["torch_save"]),
        row("stall s, async stage() vs bare DCP", med["async_stage"], med["bare_dcp"]),
        row("async background write s vs bare DCP", med["async_write"], med["bare_dcp"]),
        row("stall s, async stage() vs copy into reused buffers", med["async_stage"],
            med["reuse_copy"]),
        row("stall s, async first stage() (fresh buffers) vs bare DCP",
            med["async_stage_first"], med["bare_dcp"]),
        row("commit: write_checkpoint s vs bare DCP s", med["sync"], med["bare_dcp"]),
        row("commit: bare DCP + measured parts s vs bare DCP s",
            med["bare_dcp"] + c["parts_sum_s"], med["bare_dcp"]),
    ]
    for part in ("crc_on_write_path", "coverage_check", "manifest_write"):
        rows.append(row(f"  part: {part.replace('_', ' ')} s / bare DCP s",
                        c["parts_median_s"][part], med["bare_dcp"], "{:.4f}"))
    mbs = "{:,.0f}"
    rows.append(row("persist MB/s, write_checkpoint vs raw write", p["sync_mb_s"],
                    p["raw_write_mb_s"], mbs))
    rows.append(row("persist MB/s, async background vs raw write", p["async_mb_s"],
                    p["raw_write_mb_s"], mbs))
    for key, label in (("verify_load", "verify + load"), ("verify", "verify alone"),
                       ("load", "load alone")):
        rows.append(row(f"restore MB/s {r['cache']}, {label} vs raw read",
                        r["mb_s"][key], r["mb_s"]["raw_read"], mbs))
    rows.append(row("restore MB/s warm, verify + load vs raw read", r["warm_mb_s"]["verify_load"],
                    r["warm_mb_s"]["raw_read"], mbs))
    state = res["state"]["bytes"]
    for key, label in (("after_stage", "after stage()"),
                       ("after_drain", "after the write (kept for reuse)"),
                       ("after_second", "after a second checkpoint"),
                       ("after_close", "after Persister.close"),
                       ("after_trim", "after malloc_trim")):
        grow = m["growth_bytes"][key]
        rows.append([f"async RSS growth MiB {label} (vs state)", mib(grow), mib(state),
                     "-" if grow is None else f"{ratio(grow, state):.2f}"])
    return rows
