"""The checkpoint checks of scripts/gpu_check.py, on the device: a grad scaler, model and
AdamW through the project's DCP commit and restore, and the async staging path.

- ``grad_scaler``: a ``torch.amp.GradScaler`` through ``TrainState`` and the
  project's commit and restore: scale and growth tracker equal, an overflowing
  step skipped on both, the next good step bitwise equal.
- ``dcp``: model + AdamW through ``worker.commit.write_checkpoint`` (shards
  checksummed as written, coverage, manifest last) and ``worker.restore.verify``
  then ``load``: every tensor bitwise equal and back on the device; the RNG streams
  restored from the checkpoint draw what the saved process drew next.
- ``staging``: ``worker.persist`` (``StagingPool`` with pinned host buffers on CUDA,
  the ``Persister`` thread) on a ~1 GiB state: first and steady stage times, the
  buffers reused, the staged copy unchanged by the next step, the background write
  restored bitwise. No broker: the Kafka proposal is the session's, not tested here.

Tested in tests/test_gpu_check.py.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch
from gpu_state import Record, compare, draws, flat, same_bits, same_draws, sync
from torch import nn

if TYPE_CHECKING:  # imported where used, so a missing wheel skips the check, not the script
    from worker.persist import Staged, StagingPool

RUN = "gpu-check"


def commit(root: str, step: int, state: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The project's write path: DCP shards checksummed as written, the coverage check,
    the manifest last (``worker.commit.write_checkpoint``); one process, no broker."""
    from worker.comm import Comm
    from worker.commit import ManifestFields, write_checkpoint
    from worker.faults import Faults
    from worker.layout import CheckpointDir
    from worker.restore import Candidate

    fields = ManifestFields(dataset_id=None, data=None, counters={"step": step},
                            code_version="gpu-check", parent_digest=None)
    start = time.monotonic()
    shards: list[Any] = []
    written = write_checkpoint(CheckpointDir(root, RUN, 1, step), state, Comm.single(),
                               required_keys=required, fields=fields,
                               faults=Faults(None, 0, 1), on_shard=shards.append)
    return {"candidate": Candidate(step, written.manifest_url, written.digest),
            "write_s": round(time.monotonic() - start, 3),
            "bytes": written.manifest.total_bytes, "files": len(written.manifest.files)}


def restore(candidate: Any, template: dict[str, Any]) -> float:
    """The project's restore path: every CRC verified, then DCP loads ``template``."""
    from worker.comm import Comm
    from worker.restore import load, verify

    start = time.monotonic()
    verify(candidate, Comm.single(), run_id=RUN, dataset_id=None)
    load(candidate, template, Comm.single())
    return round(time.monotonic() - start, 3)


def round_trip(rec: Record, root: str, step: int, state: dict[str, Any], required: list[str],
               template: dict[str, Any]) -> None:
    wrote = commit(root, step, state, required)
    rec.figures["restore_s"] = restore(wrote.pop("candidate"), template)
    rec.figures.update(wrote)


def mlp(device: torch.device, width: int, layers: int, seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*(nn.Linear(width, width, device=device) for _ in range(layers)))


def train_step(model: nn.Sequential, opt: torch.optim.Optimizer, seed: int,
               scaler: Any = None, poison: bool = False) -> None:
    first = model[0]
    assert isinstance(first, nn.Linear)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(8, first.in_features, generator=gen).to(first.weight.device)
    opt.zero_grad(set_to_none=True)
    loss = model(x).float().pow(2).mean()
    if poison:
        loss = loss * float("inf")  # every gradient inf or NaN: the scaler must skip
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def snapshot(ts: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in flat(ts.state_dict(0))}


def on_device(rec: Record, device: torch.device, model: nn.Module,
              opt: torch.optim.Optimizer) -> None:
    params = list(model.parameters())
    moments = [v for s in opt.state.values() for k, v in s.items() if k != "step"]
    rec.expect(f"restored parameters on {device.type}",
               all(p.device.type == device.type for p in params))
    rec.expect(f"restored AdamW moments on {device.type}",
               moments and all(v.device.type == device.type for v in moments))


# --- 3. a grad scaler through the checkpoint -----------------------------------------------

def scaler_check(rec: Record, device: torch.device, root: str) -> None:
    from worker.trainstate import TrainState

    def fresh(seed: int, init_scale: float) -> tuple[nn.Sequential, Any, Any]:
        model = mlp(device, 64, 2, seed)
        scaler = torch.amp.GradScaler(device.type, init_scale=init_scale, growth_interval=3)
        return model, adamw(model), scaler

    def params(model: nn.Module) -> list[torch.Tensor]:
        return [p.detach().clone() for p in model.parameters()]

    def unchanged(model: nn.Module, before: list[torch.Tensor]) -> bool:
        return all(same_bits(a, b) for a, b in zip(before, model.parameters(), strict=True))

    model, opt, scaler = fresh(0, 2.0**16)
    for s in range(4):  # three good steps grow the scale (interval 3), the fourth counts 1
        train_step(model, opt, s, scaler)
    grown = scaler.state_dict()
    rec.expect("three good steps doubled the scale to 2**17, tracker 1",
               (grown["scale"], grown["_growth_tracker"]) == (2.0**17, 1))
    before = params(model)
    train_step(model, opt, 10, scaler, poison=True)
    backed = scaler.state_dict()
    rec.expect("an overflowing step is skipped (parameters unchanged)", unchanged(model, before))
    rec.expect("an overflowing step halves the scale and resets the tracker",
               (backed["scale"], backed["_growth_tracker"]) == (2.0**16, 0))
    train_step(model, opt, 11, scaler)
    ts = TrainState(model, opt, scaler=scaler)
    saved = scaler.state_dict()
    want = snapshot(ts)
    model2, opt2, scaler2 = fresh(1, 1.0)
    ts2 = TrainState(model2, opt2, scaler=scaler2)
    template = ts2.state_dict(0)
    round_trip(rec, root, 1, ts.state_dict(0), ts.model_keys(), template)
    ts2.load_state_dict(template)
    got = scaler2.state_dict()
    rec.figures.update(saved=saved, restored=got)
    rec.expect("restored scale equals the saved one", got["scale"] == saved["scale"])
    rec.expect("restored growth tracker equals the saved one",
               got["_growth_tracker"] == saved["_growth_tracker"] == 1)
    rec.expect("the whole scaler state equals", got == saved)
    compare(rec, "model+AdamW+scaler", want, snapshot(ts2))
    before, before2 = params(model), params(model2)
    train_step(model, opt, 12, scaler, poison=True)
    train_step(model2, opt2, 12, scaler2, poison=True)
    scale = getattr(scaler2, "_scale", None)  # made lazily, at the first step after restore
    rec.expect(f"the restored scale lives on {device.type}",
               scale is not None and scale.device.type == device.type)
    rec.expect("after restore an overflowing step is skipped on both",
               unchanged(model, before) and unchanged(model2, before2))
    rec.expect("after restore both scales back off alike",
               scaler.state_dict() == scaler2.state_dict()
               and scaler2.get_scale() == saved["scale"] / 2)
    train_step(model, opt, 13, scaler)
    train_step(model2, opt2, 13, scaler2)
    compare(rec, "next good step", snapshot(ts), snapshot(ts2))


# --- 4. DCP through the project's commit and restore ---------------------------------------

def dcp_check(rec: Record, device: torch.device, root: str) -> None:
    from worker import rng
    from worker.trainstate import TrainState, rng_key

    model = mlp(device, 256, 3, 0)
    opt = adamw(model)
    for s in range(2):
        train_step(model, opt, s)
    ts = TrainState(model, opt)
    state = ts.state_dict(0)  # captures the RNG streams too
    after = draws(device)  # what a run resumed from this checkpoint must draw next
    want = {k: v.detach().clone() for k, v in flat(state)}
    model2 = mlp(device, 256, 3, 1)
    opt2 = adamw(model2)
    ts2 = TrainState(model2, opt2)
    template = ts2.state_dict(0)
    round_trip(rec, root, 2, state, ts.model_keys(), template)
    ts2.load_state_dict(template)
    compare(rec, "model+AdamW", want, snapshot(ts2))
    on_device(rec, device, model2, opt2)
    rng.restore(template[rng_key(0)])
    for k, ok in same_draws(after, draws(device)).items():
        rec.expect(f"RNG through the checkpoint: {k} draws equal", ok)


def timed_stage(pool: StagingPool, state: dict[str, Any],
                device: torch.device) -> tuple[Staged, float]:
    """The pool's staged copy of ``state`` and the seconds it took, the device idle first."""
    sync(device)
    start = time.monotonic()
    staged = pool.stage(state)
    return staged, time.monotonic() - start


def staging_check(rec: Record, device: torch.device, root: str, mib: int) -> None:
    from worker.persist import Persister, nbytes, stage
    from worker.trainstate import TrainState

    width = 4096 if mib >= 256 else 256
    layers = max(1, round(mib * (1 << 20) / (12 * width * width)))
    model = mlp(device, width, layers, 0)
    opt = adamw(model)
    train_step(model, opt, 0)
    ts = TrainState(model, opt)
    persister = Persister(backlog=1)
    pool = persister.staging
    try:
        state = ts.state_dict(0)
        size = nbytes(state)
        first, first_s = timed_stage(pool, state, device)
        assert first.slot is not None
        rec.expect("the first staged copy equals the state",
                   all(same_bits(a, b) for (_, a), (_, b)
                       in zip(flat(state), flat(first.value), strict=True)))
        if device.type == "cuda":
            rec.expect("host buffers of CUDA tensors are pinned",
                       all(b.is_pinned() for b, (_, _, cuda)
                           in zip(first.slot.buffers, first.slot.signature, strict=True) if cuda))
        pointers = [b.data_ptr() for b in first.slot.buffers]
        pool.release(first)
        train_step(model, opt, 1)
        state = ts.state_dict(0)
        staged, steady_s = timed_stage(pool, state, device)
        assert staged.slot is not None
        rec.expect("the steady stage reuses the first one's buffers",
                   [b.data_ptr() for b in staged.slot.buffers] == pointers)
        want = snapshot(ts)
        start = time.monotonic()
        stage(state)  # what the stall was before the pool: fresh, unpinned host memory
        fresh_s = time.monotonic() - start
        train_step(model, opt, 2)  # the live state moves on; the staged copy must not
        head = next(k for k in want if k.startswith("model."))
        rec.expect("the next step changed the live state",
                   not same_bits(want[head], dict(flat(ts.state_dict(0)))[head]))
        compare(rec, "staged copy after the next step", want, dict(flat(staged.value)))
        box: dict[str, Any] = {}
        keys, value = ts.model_keys(), staged.value

        def write() -> None:  # on the persister's thread, as the session's async save
            box.update(commit(root, 3, value, keys))

        persister.submit(write, staged)
        persister.drain()
        rec.expect("the buffers are back in the pool after the write", pool.free == 1)
        model2 = mlp(device, width, layers, 1)
        opt2 = adamw(model2)
        ts2 = TrainState(model2, opt2)
        template = ts2.state_dict(0)
        rec.figures["restore_s"] = restore(box.pop("candidate"), template)
        ts2.load_state_dict(template)
        compare(rec, "written in the background, restored", want, snapshot(ts2))
        on_device(rec, device, model2, opt2)
        gib = size / (1 << 30)
        rec.figures.update(box, state_bytes=size, layers=layers, width=width,
                           first_stage_s=round(first_s, 4), steady_stage_s=round(steady_s, 4),
                           fresh_unpinned_stage_s=round(fresh_s, 4),
                           steady_gib_per_s=round(gib / steady_s, 2) if steady_s else None)
    finally:
        persister.close()
