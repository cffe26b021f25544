"""Helpers for the worker checkpoint tests, including the functions that run in
spawned ranks (they must be importable by a ``spawn`` child, hence a module
of their own rather than the test files)."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import socket
import traceback
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from worker import rng
from worker.comm import Comm
from worker.commit import ManifestFields, Written, write_checkpoint
from worker.errors import VerificationFailed
from worker.faults import Faults
from worker.layout import CheckpointDir
from worker.manifest import FileEntry
from worker.restore import Candidate, choose, load, verify

RUN = "run-test"
DATASET = "ds-1"


def fields(step: int, dataset_id: str | None = DATASET) -> ManifestFields:
    return ManifestFields(dataset_id=dataset_id, data={"epoch": 0, "position": step},
                          counters={"step": step, "tokens": 10 * step}, code_version="test",
                          parent_digest=None)


def make_model(seed: int, dim: int = 8) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(dim, 16), nn.Tanh(), nn.Linear(16, 4))


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int, seed: int,
          dim: int = 8, sched: Any = None) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(5, dim, generator=gen)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()


def model_keys(model: nn.Module) -> list[str]:
    return [f"model.{k}" for k in model.state_dict()]


def write(ckdir: CheckpointDir, state: dict[str, Any], comm: Comm | None = None, *,
          required: Iterable[str] = (), faults: Faults | None = None,
          on_shard: Callable[[FileEntry], None] | None = None,
          dataset_id: str | None = DATASET, readback: bool | None = None) -> Written:
    comm = comm or Comm.single()
    return write_checkpoint(ckdir, state, comm, required_keys=list(required),
                            fields=fields(ckdir.step, dataset_id),
                            faults=faults or Faults(None, comm.rank, ckdir.generation),
                            on_shard=on_shard or (lambda _e: None), readback=readback)


def candidate(written: Written) -> Candidate:
    return Candidate(written.ckdir.step, written.manifest_url, written.digest)


def optim_tensors(opt: torch.optim.Optimizer) -> dict[tuple[int, str], torch.Tensor]:
    """Every per-parameter optimizer state tensor, keyed by (param index, name)."""
    sd = opt.state_dict()
    return {(i, name): t.detach().clone() for i, st in sd["state"].items()
            for name, t in st.items() if isinstance(t, torch.Tensor)}


def params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# -- real processes ----------------------------------------------------------------------

def small_state(seed: int = 0) -> tuple[torch.nn.Module, dict[str, Any]]:
    model = make_model(seed)
    return model, {"model": model.state_dict(), "extra": {"note": "x", "n": 3}}


def flip_bit(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_ranks(target: Callable[..., None], world: int, args: tuple[Any, ...],
              timeout: float = 120.0) -> None:
    """Run ``target(rank, world, port, *args)`` in ``world`` spawned processes; fail
    (never hang) when one of them errs or they outlive ``timeout``."""
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(target, rank, world, port, *args),
                         daemon=True) for rank in range(world)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout)
        hung = [i for i, p in enumerate(procs) if p.is_alive()]
        if hung:
            raise AssertionError(f"ranks {hung} still running after {timeout}s (a hang)")
        codes = [p.exitcode for p in procs]
        if codes != [0] * world:
            raise AssertionError(f"rank exit codes {codes}")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)


def _rank_main(target: Callable[..., None], rank: int, world: int, port: int,
               *args: Any) -> None:
    out = Path(args[0])
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=60))
        try:
            target(rank, world, port, *args)
            # Leave gloo together: a rank that tears its group down while a
            # peer still has a transfer in flight can abort that peer (seen
            # in bench/sdc_overhead.py, exit -6).
            dist.barrier()
        finally:
            dist.destroy_process_group()
    except BaseException:
        (out / f"error.rank{rank}.txt").write_text(traceback.format_exc())
        os._exit(1)


def reseed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def draws() -> tuple[torch.Tensor, float, float]:
    """A draw from torch's, Python's and NumPy's streams."""
    return torch.rand(4), random.random(), float(np.random.rand())


def save_ddp_rank(rank: int, world: int, port: int, out: str, root: str) -> None:
    """Train a DDP-wrapped model for a few steps at world size ``world`` and checkpoint it."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    comm = Comm.new_group()
    model = make_model(seed=100 + rank)  # different per rank: DDP broadcasts rank 0's
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=0.05)
    train(ddp, opt, steps=3, seed=7 + rank)  # different data per rank, averaged grads
    reseed(1000 + rank)  # every rank's streams differ
    captured = rng.capture()
    msd, osd = get_state_dict(ddp, [opt])
    state = {"model": msd, "optim": osd, f"rng.rank{rank}": captured}
    shards: list[FileEntry] = []
    written = write(CheckpointDir(root, RUN, 1, 10), state, comm,
                    required=[f"model.{k}" for k in msd], on_shard=shards.append)
    torch.save({"params": params(model), "optim": optim_tensors(opt), "rng": captured,
                "digest": written.digest, "manifest_url": written.manifest_url,
                "keys": list(written.manifest.keys), "shards": shards,
                "files": list(written.manifest.files)},
               Path(out) / f"rank{rank}.pt")


def restore_rank(rank: int, world: int, port: int, out: str, good: Candidate,
                 corrupt: Candidate) -> None:
    """Verify at world size ``world`` (a corrupt candidate, then choose), then load."""
    comm = Comm.new_group()
    result: dict[str, Any] = {}
    try:
        verify(corrupt, comm, run_id=RUN, dataset_id=DATASET)
        result["corrupt"] = None
    except VerificationFailed as exc:
        result["corrupt"] = exc.reason
    rejected: list[tuple[int, str]] = []
    chosen, manifest, fell_back = choose(
        [corrupt, good], comm, run_id=RUN, dataset_id=DATASET,
        on_rejected=lambda c, e: rejected.append((c.step, e.reason)))
    result.update(chosen=chosen, fell_back=fell_back, rejected=rejected)

    model = make_model(seed=500 + rank)  # fresh and different per rank
    opt = torch.optim.AdamW(model.parameters(), lr=0.5)
    msd, osd = get_state_dict(model, [opt])
    template: dict[str, Any] = {"model": msd, "optim": osd}
    own = f"rng.rank{rank}"
    if any(k.startswith(own + ".") for k in manifest.keys):
        template[own] = rng.capture()
    result["requested"] = sorted(template)
    load(chosen, template, comm)
    set_state_dict(model, [opt], model_state_dict=template["model"],
                   optim_state_dict=template["optim"])
    result.update(params=params(model), optim=optim_tensors(opt),
                  lr=[g["lr"] for g in opt.param_groups], rng=template.get(own))
    torch.save(result, Path(out) / f"rank{rank}.pt")
