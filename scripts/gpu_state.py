"""The training-state checks of scripts/gpu_check.py (this module: the process group
and RNG, and shared helpers): what CI's CPUs can never show.

Each check is a function ``(rec, device, ...)`` that records named assertions and
figures in a :class:`Record`; :func:`run` turns it into ``{"status": "passed" |
"failed" | "skipped", "why", "asserts", "figures", "seconds"}``. A check that
cannot run (no CUDA device, a module that does not import) is ``skipped`` with the
reason; an exception is ``failed`` with its last line, never a crash.

- ``process_group``: a world-size-1 NCCL group on cuda:0 in a child process
  (``--one-rank``), all_reduce, broadcast and all_gather of a CUDA tensor (gloo on the
  CPU; two NCCL ranks cannot share one device, so the two-rank part stays on gloo).
- ``rng``: ``worker.rng`` capture, draw, restore, draw again: identical streams.

The checkpoint checks (grad scaler, DCP, async staging) are in scripts/gpu_ckpt.py and
use the helpers at the end of this module.

Tested in tests/test_gpu_check.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

TIMEOUT = timedelta(seconds=60)


class Skip(Exception):
    """The check cannot run here; the message says why."""


class Record:
    def __init__(self) -> None:
        self.asserts: dict[str, bool] = {}
        self.figures: dict[str, Any] = {}

    def expect(self, what: str, ok: Any) -> None:
        self.asserts[what] = bool(ok)


def run(fn: Callable[..., None], *args: Any) -> dict[str, Any]:
    rec = Record()
    start = time.monotonic()
    status, why = "passed", ""
    try:
        fn(rec, *args)
    except Skip as exc:
        status, why = "skipped", str(exc)
    except ImportError as exc:
        status, why = "skipped", f"cannot import: {exc} (a wheel missing?)"
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # DCP's CheckpointException is a BaseException
        traceback.print_exc()
        status, why = "failed", f"{type(exc).__name__}: {exc}"
    if status == "passed":
        bad = [k for k, ok in rec.asserts.items() if not ok]
        if not rec.asserts or bad:
            status, why = "failed", "did not hold: " + "; ".join(bad or ["nothing asserted"])
    return {"status": status, "why": why, "asserts": rec.asserts, "figures": rec.figures,
            "seconds": round(time.monotonic() - start, 2)}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- 1. a process group ---------------------------------------------------------------

def one_rank(out: str, port: int) -> None:
    """Child process: a world-size-1 group (NCCL on cuda:0, gloo on the CPU)."""
    import torch.distributed as dist
    cuda = torch.cuda.is_available()
    device = torch.device("cuda:0" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1, timeout=TIMEOUT)
    try:
        x = torch.arange(1, 1 << 20, dtype=torch.float32, device=device)
        summed = x.clone()
        dist.all_reduce(summed, op=dist.ReduceOp.SUM)
        top = x.clone()
        dist.all_reduce(top, op=dist.ReduceOp.MAX)
        cast = torch.full((1024,), 7, dtype=torch.int64, device=device)
        dist.broadcast(cast, src=0)
        gathered = torch.empty_like(x)
        dist.all_gather_into_tensor(gathered, x)
        sync(device)
        result = {
            "backend": dist.get_backend(), "device": str(summed.device),
            "all_reduce_sum": bool(torch.equal(summed, x)),
            "all_reduce_max": bool(torch.equal(top, x)),
            "broadcast": bool(torch.equal(cast, torch.full_like(cast, 7))),
            "all_gather": bool(torch.equal(gathered, x)),
            "nccl_version": str(torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
            if cuda else None,
        }
    finally:
        dist.destroy_process_group()
    Path(out).write_text(json.dumps(result), "utf-8")


def process_group(rec: Record, device: torch.device, script: str) -> None:
    import torch.distributed as dist
    if device.type == "cuda" and not dist.is_nccl_available():
        raise Skip("this torch build has no NCCL")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="gpu-check-pg-") as tmp:
        out = Path(tmp) / "pg.json"
        try:
            proc = subprocess.run([sys.executable, script, "--one-rank", str(out), "--port",
                                   str(port)], timeout=180, check=False)
        except subprocess.TimeoutExpired:
            rec.expect("the one-rank group finished within 180 s (it hung)", False)
            return
        rec.expect("the one-rank process exited 0", proc.returncode == 0)
        if proc.returncode != 0:
            return
        got = json.loads(out.read_text("utf-8"))
    want = "nccl" if device.type == "cuda" else "gloo"
    rec.figures.update(got)
    rec.figures["note"] = (
        "no CUDA device: the same group on gloo; NCCL not exercised" if want == "gloo" else
        "world size 1 on cuda:0; two NCCL ranks cannot share one GPU, so with one GPU the"
        " two-rank part runs gloo with both ranks on cuda:0" if torch.cuda.device_count() < 2
        else "world size 1 on cuda:0; the two-rank part runs NCCL on two GPUs")
    rec.expect(f"backend is {want}", got["backend"] == want)
    rec.expect(f"tensors on {device.type}", got["device"].startswith(device.type))
    for what in ("all_reduce_sum", "all_reduce_max", "broadcast", "all_gather"):
        rec.expect(f"{what} gives the right values", got[what])


# --- 2. RNG ------------------------------------------------------------------------------

def draws(device: torch.device) -> dict[str, Any]:
    import random

    import numpy as np
    out: dict[str, Any] = {"python": [random.random() for _ in range(8)],
                           "numpy": np.random.rand(8).tolist(),
                           "torch": torch.rand(1024)}
    if device.type == "cuda":
        out["cuda"] = torch.rand(1 << 16, device=device)
        out["cuda_normal"] = torch.randn(1 << 16, device=device)
    return out


def same_draws(a: dict[str, Any], b: dict[str, Any]) -> dict[str, bool]:
    return {k: bool(torch.equal(v, b[k])) if isinstance(v, torch.Tensor) else v == b[k]
            for k, v in a.items()}


def rng_check(rec: Record, device: torch.device) -> None:
    from worker import rng
    rng.seed_all(1234)
    state = rng.capture()
    rec.figures["streams"] = sorted(state)
    if device.type == "cuda":
        rec.expect("capture holds every CUDA device's generator",
                   len(state.get("cuda", [])) == torch.cuda.device_count())
    first = draws(device)
    later = draws(device)  # not restored: must differ, or the check proves nothing
    rng.restore(state)
    again = draws(device)
    for k, ok in same_draws(first, again).items():
        rec.expect(f"{k}: the draws after restore equal the first", ok)
    rec.expect("without a restore the streams move on",
               not any(same_draws(first, later).values()))


# --- helpers for scripts/gpu_ckpt.py -----------------------------------------------

def flat(value: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from flat(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from flat(v, f"{prefix}.{i}")


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.shape == b.shape and a.dtype == b.dtype
            and bool(torch.equal(bits(a), bits(b.to(a.device)))))


def compare(rec: Record, what: str, want: dict[str, torch.Tensor],
            got: dict[str, torch.Tensor]) -> None:
    """Every tensor of ``want`` bitwise in ``got`` (the RNG streams excepted)."""
    keys = [k for k in want if not k.startswith("rng.")]
    differ = [k for k in keys if k not in got or not same_bits(want[k], got[k])]
    rec.figures[f"{what}_tensors"] = len(keys)
    rec.figures[f"{what}_differing"] = differ[:5]
    rec.expect(f"{what}: {len(keys)} tensors bitwise equal", keys and not differ)
