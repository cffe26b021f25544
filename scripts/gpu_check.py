"""Exercise the SDC detectors (``worker.sdc``) and the bitflip injector (``worker.bitflip``)
on a GPU when there is one, on the CPU otherwise (docs/training.md, "The detectors on CUDA").

Usage: ``.venv/bin/python scripts/gpu_check.py [--device auto|cuda|cpu] [--flips N]
[--quick] [--json PATH]``

1. Flip campaign, one process, on the device: two replicas holding the same bits
   (the second a bit-exact clone of the first after two training steps, parameters,
   gradients and AdamW state); ``--flips`` times, flip one bit of replica two with
   the injector's own ``choose``/``flip_bit`` (kinds in turn: param, grad, optim),
   compare both replicas' ``fingerprints`` (and every tenth time the
   ``full_digest``), flip it back. Every flip must change the fingerprint vector.
2. Host syncs on CUDA: ``torch.cuda.set_sync_debug_mode("warn")`` counts the
   synchronizing calls in ``fingerprints``, ``grad_norm`` and ``full_digest``
   (the design allows one small device-to-host copy per step for the agreement).
   Fingerprint time on the device for the tiny model and a ~10M one.
3. Two ranks (OS processes, DDP; NCCL when there are two GPUs, gloo otherwise,
   both ranks on cuda:0 with one GPU): ``Detectors`` gathering on a gloo side
   group as the session does, and the ``Injector`` armed by a ``RUNLEDGER_FAULT``
   string (``bitflip@4:rank=1:target=T``) for each target; the agreement detector
   must fire at step 4 and not before; then the full digest alone, and a
   non-finite loss on rank 1.

4. A process group on the device (scripts/gpu_state.py): world size 1, NCCL on
   cuda:0 (gloo on the CPU), all_reduce, broadcast and all_gather of a tensor, in a
   child process with a 60 s group timeout (180 s for the whole child).
5. RNG: ``worker.rng`` capture, draw, restore, draw again (CUDA, torch CPU, NumPy,
   Python): identical draws.
6. Checkpoints (scripts/gpu_ckpt.py), through ``TrainState`` and the project's own
   ``worker.commit.write_checkpoint`` and ``worker.restore.verify``/``load`` to a
   local directory, no broker: a ``GradScaler`` (scale, growth tracker, an
   overflowing step skipped after restore); model + AdamW bitwise equal, back on the
   device, the RNG streams restored from the checkpoint; and the async path,
   ``worker.persist``'s pinned ``StagingPool`` and ``Persister`` on a ~1 GiB state
   (``--stage-mib``; 8 on the CPU): first and steady stage times, restored bitwise.

Prints the report and a summary (one line per check: passed, failed or skipped and
why), writes the report as JSON with ``--json``. Exit 0: every check that ran held
(on the CPU a check may be skipped, as NCCL is); 1: a check failed, or with
``--device cuda`` a check was skipped; 2: ``--device cuda`` without a device.
Tested on the CPU in tests/test_gpu_check.py.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "scripts"]
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "scripts"))  # last: the sibling checks, shadowing nothing
# cuBLAS is deterministic only with a fixed workspace; set before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import gpu_ckpt  # noqa: E402
import gpu_state  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from events.sdcenv import SdcEnv  # noqa: E402
from examples.train_tiny import TinyLM  # noqa: E402
from worker import sdc  # noqa: E402
from worker.bitflip import Injector, choose, flip_bit, kind_parts  # noqa: E402
from worker.comm import Comm  # noqa: E402
from worker.faults import Faults, parse  # noqa: E402

TARGETS = ("param", "grad", "optim")
SEQ = 128
FLIP_STEP = 4


def build(device: torch.device, vocab: int = 512, dim: int = 32,
          heads: int = 2) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = TinyLM(vocab, dim, heads, SEQ, dropout=0.0).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def step(model: nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor) -> float:
    opt.zero_grad(set_to_none=True)
    positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
    logits = model(tokens, positions)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                           tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    return float(loss.detach())


def tokens_for(seed: int, device: torch.device, vocab: int = 512) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (4, SEQ), generator=gen).to(device)


def clone(model: nn.Module, opt: torch.optim.Optimizer,
          device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A bit-exact second replica: parameters, gradients and optimizer state copied."""
    twin, twin_opt = build(device)
    with torch.no_grad():
        for (_, a), (_, b) in zip(model.named_parameters(), twin.named_parameters(),
                                  strict=True):
            b.copy_(a)
            b.grad = None if a.grad is None else a.grad.clone()
            twin_opt.state[b] = {k: v.clone() for k, v in opt.state[a].items()}
    return twin, twin_opt


def campaign(device: torch.device, flips: int) -> dict[str, Any]:
    """Section 1: every single-bit flip must change the fingerprints."""
    model, opt = build(device)
    for s in range(2):
        step(model, opt, tokens_for(s, device))
    twin, twin_opt = clone(model, opt, device)
    mine = sdc.state_parts(model, opt, grads=True, optimizer_state=True)
    theirs = sdc.state_parts(twin, twin_opt, grads=True, optimizer_state=True)
    base = sdc.fingerprints(mine)
    same_before = bool(torch.equal(base, sdc.fingerprints(theirs)))
    kinds = {t: {"flips": 0, "detected": 0, "digest_checked": 0, "digest_detected": 0}
             for t in TARGETS}
    for i in range(flips):
        target = TARGETS[i % len(TARGETS)]
        parts = kind_parts(twin, twin_opt, target)
        index, element, bit = choose(parts, seed=i, step=i, rank=1)
        flip_bit(parts[index][1], element, bit)
        seen = kinds[target]
        seen["flips"] += 1
        seen["detected"] += int(not torch.equal(base, sdc.fingerprints(theirs)))
        if i % 10 == 0:
            seen["digest_checked"] += 1
            seen["digest_detected"] += int(sdc.full_digest(mine) != sdc.full_digest(theirs))
        flip_bit(parts[index][1], element, bit)  # back: the next flip starts clean
    same_after = bool(torch.equal(base, sdc.fingerprints(theirs)))
    return {"replicas_equal_before": same_before, "replicas_equal_after": same_after,
            "parts": len(mine), "by_kind": kinds}


def syncs(device: torch.device) -> dict[str, Any]:
    """Section 2: synchronizing calls per detector function, and device timings."""
    if device.type != "cuda":
        return {"device": str(device), "note": "no CUDA device: sync counts not taken"}
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(device)}
    for name, vocab, dim, heads in (("tiny", 512, 32, 2), ("larger", 8192, 512, 8)):
        model, opt = build(device, vocab, dim, heads)
        step(model, opt, tokens_for(0, device, vocab))
        parts = sdc.state_parts(model, opt, grads=True, optimizer_state=True)
        counts = {}
        for what, fn in (("fingerprints", lambda p=parts: sdc.fingerprints(p)),
                         ("grad_norm", lambda m=model: sdc.grad_norm(m)),
                         ("full_digest", lambda p=parts: sdc.full_digest(p))):
            torch.cuda.synchronize(device)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    fn()
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            counts[what] = sum("synchroniz" in str(w.message) for w in caught)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sdc.fingerprints(parts)
        start.record()
        for _ in range(20):
            sdc.fingerprints(parts)
        end.record()
        torch.cuda.synchronize(device)
        out[name] = {"parameters": sum(p.numel() for p in model.parameters()),
                     "parts": len(parts), "sync_calls": counts,
                     "fingerprints_ms": start.elapsed_time(end) / 20}
    return out


PHASES: tuple[tuple[str, SdcEnv, str | None, str], ...] = (
    *((f"bitflip {t}", SdcEnv(agreement_every=1, grads=True, optimizer=True, nonfinite=False),
       f"bitflip@{FLIP_STEP}:rank=1:target={t}:seed=3", "agreement") for t in TARGETS),
    ("full digest alone, param flip", SdcEnv(full_every=1, nonfinite=False),
     f"bitflip@{FLIP_STEP}:rank=1:target=param", "digest"),
    ("non-finite loss on rank 1", SdcEnv(nonfinite=True), None, "nonfinite"),
)


def run_phase(env: SdcEnv, fault: str | None, rank: int, world: int, device: torch.device,
              comm: Comm) -> dict[str, Any]:
    """Steps 1..FLIP_STEP+1 of a fresh model; the first step a detector fired at."""
    model, opt = build(device)
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None)
    at = {"step": 0}
    injector = Injector(Faults(parse(fault or ""), rank, 1), lambda: at["step"])
    injector.install(model, opt)
    detectors = sdc.Detectors(env, None, rank=rank, world_size=world, node=f"node{rank}",
                              gather=comm.all_gather)
    try:
        for s in range(1, FLIP_STEP + 2):
            at["step"] = s
            loss = step(ddp, opt, tokens_for(100 * s + rank, device))
            if fault is None and rank == 1 and s == FLIP_STEP:
                loss = float("nan")  # what a non-finite loss looks like to the detector
            parts = sdc.state_parts(model, opt, grads=env.grads, optimizer_state=env.optimizer)
            norm = sdc.grad_norm(model) if detectors.wants_grad_norm else None
            found = detectors.check(s, loss, parts, norm).finding
            if found is not None:
                break
        # Every rank's flips (the injector flips on rank 1 only): a collective.
        flips = [f"r{f.rank}:{f.part}[{f.element}] bit {f.bit}"
                 for mine in comm.all_gather(injector.flips) for f in mine]
        if found is None:
            return {"step": None, "flips": flips}
        return {"step": s, "detector": found.detector, "ranks": list(found.ranks),
                "part": found.part, "flips": flips}
    finally:
        injector.remove()


def rank_main(rank: int, port: int, out: str) -> None:
    gpus = torch.cuda.device_count()
    backend = "nccl" if gpus >= 2 else "gloo"
    device = torch.device(f"cuda:{rank}" if gpus >= 2 else "cuda:0" if gpus else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.use_deterministic_algorithms(True, warn_only=True)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=60))
    try:
        comm = Comm.new_group()  # the session's control group: gloo, host objects
        results = {name: run_phase(env, fault, rank, 2, device, comm)
                   for name, env, fault, _ in PHASES}
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps({"backend": backend, "device": str(device),
                                         "phases": results}), "utf-8")


def two_ranks() -> dict[str, Any]:
    """Section 3, as two OS processes; rank 0's view."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        out = Path(tmp) / "rank0.json"
        cmd = [sys.executable, __file__, "--port", str(port), "--json", str(out)]
        procs = [subprocess.Popen([*cmd, "--rank-of-two", str(r)]) for r in range(2)]
        try:
            codes = [p.wait(timeout=300) for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
                p.wait()
            return {"error": "the two ranks did not finish within 300 s (a hang)"}
        if any(codes):
            return {"error": f"a rank failed: exit codes {codes} (traceback above)"}
        data: dict[str, Any] = json.loads(out.read_text("utf-8"))
        return data


def failures(report: dict[str, Any]) -> list[str]:
    """Every expectation that did not hold, each naming what."""
    bad: list[str] = []
    bad += [f"syncs: {report['syncs']['error']}"] if "error" in report["syncs"] else []
    flips = report["campaign"]
    if "error" in flips:
        bad.append(f"campaign: {flips['error']}")
        flips = {"replicas_equal_before": True, "replicas_equal_after": True, "by_kind": {}}
    if not flips["replicas_equal_before"] or not flips["replicas_equal_after"]:
        bad.append("campaign: the two replicas' fingerprints differ without a flip")
    for kind, seen in flips["by_kind"].items():
        if seen["detected"] != seen["flips"]:
            bad.append(f"campaign: {seen['flips'] - seen['detected']} of {seen['flips']} "
                       f"{kind} flips left the fingerprints unchanged")
        if seen["digest_detected"] != seen["digest_checked"]:
            bad.append(f"campaign: a {kind} flip left the full digest unchanged")
    ranks = report["two_ranks"]
    if "error" in ranks:
        return [*bad, f"two ranks: {ranks['error']}"]
    for name, _, fault, detector in PHASES:
        got = ranks["phases"][name]
        if got.get("step") != FLIP_STEP or got.get("detector") != detector:
            bad.append(f"two ranks, {name}: expected {detector} at step {FLIP_STEP}, got {got}")
        elif fault is not None and not got["flips"]:
            bad.append(f"two ranks, {name}: the injector flipped nothing")
    return bad


def state_checks(device: torch.device, stage_mib: int) -> dict[str, dict[str, Any]]:
    """Sections 4 to 6, each a named check (``gpu_state.run``)."""
    checks = {"process_group": gpu_state.run(gpu_state.process_group, device, __file__),
              "rng": gpu_state.run(gpu_state.rng_check, device)}
    with tempfile.TemporaryDirectory(prefix="gpu-check-ckpt-") as root:
        checks["grad_scaler"] = gpu_state.run(gpu_ckpt.scaler_check, device, root)
        checks["dcp"] = gpu_state.run(gpu_ckpt.dcp_check, device, root)
        checks["staging"] = gpu_state.run(gpu_ckpt.staging_check, device, root, stage_mib)
    return checks


def guarded(section: str, fn: Any, *args: Any) -> dict[str, Any]:
    """A section's report, or ``{"error": ...}`` when it raised (a failure, not a crash)."""
    try:
        result: dict[str, Any] = fn(*args)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # DCP's CheckpointException is a BaseException
        import traceback
        traceback.print_exc()
        return {"error": f"{section} raised {type(exc).__name__}: {exc}"}
    return result


def summary(report: dict[str, Any], bad: list[str], cuda: bool) -> list[str]:
    """One line per check: PASS, FAIL or SKIP, and why."""
    lines = []
    for name, prefix in (("sdc_campaign", "campaign"), ("sdc_syncs", "syncs"),
                         ("sdc_two_ranks", "two ranks")):
        mine = [b for b in bad if b.startswith(prefix)]
        lines.append(f"{'FAIL' if mine else 'PASS'} {name}" + (f": {mine[0]}" if mine else ""))
    for name, check in report["checks"].items():
        tag = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[check["status"]]
        if tag == "SKIP" and cuda:
            tag = "FAIL"  # on a GPU every check must run
        lines.append(f"{tag} {name} ({check['seconds']} s)"
                     + (f": {check['why']}" if check["why"] else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--flips", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="60 flips instead of 3,000")
    parser.add_argument("--stage-mib", type=int, default=None,
                        help="the staged state's size (default 1024 on CUDA, 8 on the CPU)")
    parser.add_argument("--json", default="")
    parser.add_argument("--rank-of-two", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--one-rank", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_of_two is not None:
        rank_main(int(args.rank_of_two), args.port, args.json)
        return 0
    if args.one_rank is not None:
        gpu_state.one_rank(args.one_rank, args.port)
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: --device cuda, but torch sees no CUDA device; run with --device "
              "auto or cpu, or on a GPU machine", file=sys.stderr)
        return 2
    cuda = args.device != "cpu" and torch.cuda.is_available()
    if not cuda:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the child processes too
    device = torch.device("cuda:0" if cuda else "cpu")
    flips = args.flips if args.flips is not None else (60 if args.quick else 3000)
    stage_mib = args.stage_mib if args.stage_mib is not None else (1024 if cuda else 8)
    report: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                              "device": torch.cuda.get_device_name(0) if cuda else "cpu",
                              "campaign": guarded("campaign", campaign, device, flips),
                              "syncs": guarded("syncs", syncs, device),
                              "two_ranks": two_ranks()}
    report["checks"] = state_checks(device, stage_mib)
    bad = failures(report)
    lines = summary(report, bad, cuda)
    bad += [line[5:] for line in lines if line.startswith("FAIL") and not line[5:].startswith(
        ("sdc_campaign", "sdc_two_ranks", "sdc_syncs"))]
    report["failures"] = bad
    report["summary"] = lines
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", "utf-8")
    print("gpu_check summary:\n  " + "\n  ".join(lines))
    for line in bad:
        print(f"gpu_check: FAILED: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
