"""Campaign: random single-bit flips in a 2-replica gloo run, caught by ``worker.sdc``.

Usage: ``.venv/bin/python bench/sdc_campaign.py [--flips 1000] [--quick] [--no-grads]``

Two spawned processes on localhost (gloo, one torch thread each) train the same small
MLP with AdamW on deterministic data (each rank its own half of every batch, gradients
all-reduced), the state each step fingerprinted and agreed by ``worker.sdc.Detectors``
(``agreement_every`` 1), exactly as ``Session.step`` runs them.

1. Reference: a clean run records the sha256 full digest of every rank's state
   (parameters and optimizer state: what outlives the step) after every step.
2. Campaign: from a fresh start, ``--flips`` flips, each at a random step (one per step)
   on a random rank, into a random kind (parameter, gradient, optimizer state), tensor,
   element and bit (``worker.bitflip``'s injector hooks, seeded). On every finding both
   ranks roll back to their last in-memory checkpoint (taken every ``every`` steps, only
   at a step whose check passed) and replay without the flip (it was a one-off).

Reported: of the flips whose rank's full digest differed from the reference at the flip
step, the share detected at that very step, and the misses by kind; findings without a
flip (false alarms); checkpoints taken whose digest differs from the reference
(corrupted commits); whether the final parameters equal the reference bitwise; and the
controller's verdict (``controller.sdc_verdict.classify``) on each detected flip, from
the suspicion and the replay of its step after the rollback, with the state each step
consumed fingerprinted as the session does (``worker.sdcstep.watch_consumed``): the
share of detected flips judged ``transient`` on the flipped rank alone.
``--rest`` flips parameters and optimizer state at rest instead (``when=rest``: between
steps, before the step's first forward, from step 2 on, so AdamW has state to flip).
A gradient flip that the update rounds away changes no state; with gradients
fingerprinted (the default) it is still caught and costs a rollback (``unchanged_detected``);
``--no-grads`` leaves gradients out of the fingerprints. Results go to
``bench/results/sdc_campaign.json``. Nothing asserts on a timing.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import multiprocessing as mp
import os
import random
import socket
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path; use the repository root.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import torch
import torch.distributed as dist

from bench.common import machine_info, print_table, write_results
from controller.sdc_verdict import TRANSIENT, classify
from events.base import Header
from events.sdc import StepReplayed
from events.sdcenv import SdcEnv
from events.state import Suspicion
from worker.bitflip import Injector
from worker.comm import Comm
from worker.faults import TARGETS, Fault, Faults
from worker.sdc import Checked, Detectors, Finding, full_digest, grad_norm, state_parts
from worker.sdcstep import watch_consumed

NAME = "sdc_campaign"
WORLD = 2
REST_TARGETS = ("param", "optim")  # what lies at rest between steps (a gradient does not)


@dataclass(frozen=True, slots=True)
class Config:
    flips: int = 1000
    seed: int = 0
    every: int = 4  # in-memory checkpoint interval, steps
    dim: int = 16
    hidden: int = 32
    batch: int = 8  # per rank
    lr: float = 1e-2
    grads: bool = True  # gradients among the fingerprinted parts
    rest: bool = False  # flip at rest between steps (when=rest) instead of within them


@dataclass(frozen=True, slots=True)
class Planned:
    step: int
    rank: int
    target: str
    seed: int


def plan(cfg: Config) -> tuple[int, dict[int, Planned]]:
    """The run's length and its flips by step: random, one per step, a quarter of the
    steps left clean so rollbacks have clean checkpoints to go back to."""
    rng = random.Random(f"campaign/{cfg.seed}")
    steps = cfg.flips + cfg.flips // 4 + cfg.every
    targets = REST_TARGETS if cfg.rest else TARGETS
    chosen = sorted(rng.sample(range(2 if cfg.rest else 1, steps + 1), cfg.flips))
    return steps, {s: Planned(s, rng.randrange(WORLD), rng.choice(targets), rng.randrange(2**31))
                   for s in chosen}


def _model(cfg: Config) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(cfg.seed)  # identical replicas
    model = torch.nn.Sequential(torch.nn.Linear(cfg.dim, cfg.hidden), torch.nn.Tanh(),
                                torch.nn.Linear(cfg.hidden, cfg.dim))
    return model, torch.optim.AdamW(model.parameters(), lr=cfg.lr)


def _train_step(cfg: Config, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int,
                rank: int) -> float:
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step * WORLD + rank)
    x = torch.randn(cfg.batch, cfg.dim, generator=gen)
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), x.flip(1))
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)  # two addends: the same bits on both ranks
    flat /= WORLD
    for g, reduced in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
        g.copy_(reduced.view_as(g))
    opt.step()
    return float(loss.detach())


def _digest(model: torch.nn.Module, opt: torch.optim.Optimizer) -> str:
    """The state that outlives the step (and that a checkpoint holds): parameters and
    optimizer state. Gradients are recomputed by the next step; a gradient flip counts
    as a change only through what the update made of it."""
    return full_digest(state_parts(model, opt, grads=False, optimizer_state=True))


def _reference(cfg: Config, steps: int, rank: int) -> tuple[list[str], str]:
    model, opt = _model(cfg)
    digests = [""]
    for step in range(1, steps + 1):
        _train_step(cfg, model, opt, step, rank)
        digests.append(_digest(model, opt))
    return digests, full_digest(state_parts(model, None, grads=False, optimizer_state=False))


def _campaign(cfg: Config, rank: int, steps: int, flips: dict[int, Planned],
              ref: list[str]) -> dict[str, Any]:
    """One rank's campaign; both ranks take the same path (the finding is the same)."""
    model, opt = _model(cfg)
    current = [0]
    injector = Injector(Faults(None, rank, 1), lambda: current[0])
    injector.install(model, opt)
    detectors = Detectors(SdcEnv(agreement_every=1, grads=cfg.grads), None, rank=rank,
                          world_size=WORLD, node=f"node{rank}", gather=Comm.new_group().all_gather)
    watch_consumed(detectors, model, opt, lambda: current[0])
    # (step, what was checked there, the flipped rank's record): awaiting its replay
    suspected: tuple[int, Checked, dict[str, Any] | None] | None = None
    saved = (0, copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
    records: list[dict[str, Any]] = []
    alarms: list[dict[str, Any]] = []
    commits: list[tuple[int, bool]] = []
    pending, step, executed, rollbacks = dict(flips), 1, 0, 0
    limit = 4 * steps + 2 * cfg.every * len(flips)
    while step <= steps and executed < limit:
        planned = pending.pop(step, None)
        current[0] = step
        fault = None if planned is None else Fault("bitflip", step, rank=planned.rank,
                                                   target=planned.target, seed=planned.seed,
                                                   when="rest" if cfg.rest else "step")
        injector.faults = Faults(fault, rank, 1)
        before = len(injector.flips)
        loss = _train_step(cfg, model, opt, step, rank)
        executed += 1
        parts = state_parts(model, opt, grads=cfg.grads, optimizer_state=True)
        changed = _digest(model, opt) != ref[step]
        checked = detectors.check(step, loss, parts, grad_norm(model))
        found = checked.finding
        if suspected is not None and step == suspected[0]:  # the replay of a suspect step
            if suspected[2] is not None:  # this rank's flip: what the verdict says
                suspected[2].update(_verdict(step, suspected[1], checked))
            suspected = None
        if planned is not None and planned.rank == rank:
            (flip,) = injector.flips[before:]
            records.append({**dataclasses.asdict(flip), "changed": changed,
                            "detected": found is not None,
                            "detector": found.detector if found else None,
                            "ranks": list(found.ranks) if found else None})
        elif found is not None and planned is None:
            alarms.append({"step": step, "detector": found.detector, "detail": found.detail})
        if found is not None:
            mine = records[-1] if planned is not None and planned.rank == rank else None
            suspected = (step, checked, mine)
            model.load_state_dict(saved[1])
            opt.load_state_dict(copy.deepcopy(saved[2]))
            step, rollbacks = saved[0] + 1, rollbacks + 1
            continue
        if step % cfg.every == 0:
            saved = (step, copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
            commits.append((step, not changed))
        step += 1
    final = full_digest(state_parts(model, None, grads=False, optimizer_state=False))
    return {"rank": rank, "records": records, "alarms": alarms, "commits": commits,
            "executed": executed, "rollbacks": rollbacks, "finished": step > steps,
            "final": final}


def _verdict(step: int, held: Checked, again: Checked) -> dict[str, Any]:
    """The controller's verdict on the suspicion ``held`` raised, from the replay of its
    step (``again``), as ``controller.sdc_verdict`` gives it from the two reports."""
    f: Finding | None = held.finding
    assert f is not None
    s = Suspicion(step=step, generation=1, detector=f.detector, ranks=f.ranks,
                  fingerprints=f.fingerprints, nodes=f.nodes, part=f.part,
                  consumed=held.consumed if all(held.consumed) else ())
    r = StepReplayed(header=Header(event_id="campaign", run_id="campaign", generation=2,
                                   occurred_at=0, producer="bench"),
                     step=step, suspected_generation=1, fingerprints=again.fingerprints,
                     nodes=again.nodes, consumed=again.consumed if all(again.consumed) else ())
    v = classify(s, r)
    # The same reports without the consumed state: the verdict before issue #32.
    blind = classify(dataclasses.replace(s, consumed=()), dataclasses.replace(r, consumed=()))
    return {"verdict": v.verdict, "blamed": list(v.ranks), "blind_verdict": blind.verdict,
            "blind_blamed": list(blind.ranks)}


def rank_main(rank: int, port: int, cfg: Config, out: str) -> None:
    """A spawned rank: reference, then campaign; writes ``out/rank<r>.json``."""
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=WORLD, timeout=timedelta(seconds=120))
        steps, flips = plan(cfg)
        started = time.perf_counter()
        ref, final = _reference(cfg, steps, rank)
        reference_s = time.perf_counter() - started
        result = _campaign(cfg, rank, steps, flips, ref)
        result.update(reference_final=final, steps=steps, reference_s=reference_s,
                      campaign_s=time.perf_counter() - started - reference_s)
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
        dist.barrier()  # leave gloo together (bench/sdc_overhead.py says why)
        dist.destroy_process_group()
    except BaseException:
        Path(out, f"error.rank{rank}.txt").write_text(traceback.format_exc())
        os._exit(1)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_campaign(cfg: Config, out: Path, timeout_s: float = 900.0) -> dict[str, Any]:
    """Run both ranks and summarize; raises RuntimeError with a rank's traceback."""
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=rank_main, args=(r, port, cfg, str(out)), daemon=True)
             for r in range(WORLD)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout_s)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    errors = sorted(out.glob("error.rank*.txt"))
    if errors or any(p.exitcode != 0 for p in procs):
        text = "\n".join(e.read_text() for e in errors)
        raise RuntimeError(f"campaign ranks exited {[p.exitcode for p in procs]}:\n{text}")
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]
    return summarize(ranks)


def summarize(ranks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    records = [rec for r in ranks for rec in r["records"]]
    changed = [rec for rec in records if rec["changed"]]
    detected = [rec for rec in changed if rec["detected"] and rec["detector"] == "agreement"]
    misses = [rec for rec in changed if rec not in detected]
    by_kind = {t: {"flips": sum(rec["target"] == t for rec in records),
                   "changed": sum(rec["target"] == t for rec in changed),
                   "detected": sum(rec["target"] == t for rec in detected),
                   "missed": sum(rec["target"] == t for rec in misses)} for t in TARGETS}
    return {
        "flips": len(records), "changed": len(changed), "detected": len(detected),
        "share_detected": len(detected) / len(changed) if changed else 1.0,
        "misses": misses, "by_kind": by_kind,
        "unchanged_detected": sum(rec["detected"] for rec in records if not rec["changed"]),
        "detectors": dict(Counter(rec["detector"] for rec in records)),
        "verdicts": dict(Counter(rec.get("verdict") for rec in records if rec["detected"])),
        "blamed_flipped_rank": sum(rec.get("verdict") == TRANSIENT
                                   and rec.get("blamed") == [rec["rank"]]
                                   for rec in records if rec["detected"]),
        # what the verdict said from the same reports without the consumed state
        "blind_verdicts": dict(Counter(rec.get("blind_verdict") for rec in records
                                       if rec["detected"])),
        "blind_blamed_flipped_rank": sum(rec.get("blind_verdict") == TRANSIENT
                                         and rec.get("blind_blamed") == [rec["rank"]]
                                         for rec in records if rec["detected"]),
        "blind_verdicts_by_kind": {t: dict(Counter(rec.get("blind_verdict") for rec in records
                                                   if rec["detected"] and rec["target"] == t))
                                   for t in TARGETS},
        "false_alarms": ranks[0]["alarms"],
        "checkpoints": len(ranks[0]["commits"]),
        "corrupted_checkpoints": sum(not ok for r in ranks for _, ok in r["commits"]),
        "final_equal": all(r["final"] == r["reference_final"] for r in ranks),
        "finished": all(r["finished"] for r in ranks),
        "steps": ranks[0]["steps"], "executed": ranks[0]["executed"],
        "rollbacks": ranks[0]["rollbacks"],
        "bits": dict(Counter(rec["bit"] for rec in records)),
        "reference_s": ranks[0]["reference_s"], "campaign_s": ranks[0]["campaign_s"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--flips", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="100 flips")
    parser.add_argument("--no-grads", action="store_true",
                        help="leave gradients out of the fingerprints")
    parser.add_argument("--rest", action="store_true",
                        help="flip parameters and optimizer state at rest, between steps")
    args = parser.parse_args(argv)
    cfg = Config(flips=100 if args.quick else args.flips, seed=args.seed,
                 grads=not args.no_grads, rest=args.rest)
    machine = machine_info(["torch"])
    print(f"bench/sdc_campaign.py: {cfg.flips} flips, {WORLD} gloo ranks on "
          f"{machine['usable_cores']} cores, load {machine['load_average_1_5_15']}", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-sdc-", dir="/tmp") as tmp:
        res = run_campaign(cfg, Path(tmp))
    rows = [[t, k["flips"], k["changed"], k["detected"], k["missed"]]
            for t, k in res["by_kind"].items()]
    rows.append(["all", res["flips"], res["changed"], res["detected"], len(res["misses"])])
    print_table(["kind", "flips", "changed state", "detected at the step", "missed"], rows,
                title="flips by kind (detected = cross-replica agreement at the flip step)")
    print(f"share detected {res['share_detected']:.4f}; flips that changed no state but were "
          f"caught: {res['unchanged_detected']}; false alarms "
          f"{len(res['false_alarms'])}; checkpoints {res['checkpoints']}, corrupted "
          f"{res['corrupted_checkpoints']}; final parameters equal the reference: "
          f"{res['final_equal']}; {res['rollbacks']} rollbacks, {res['executed']} steps run for "
          f"{res['steps']}")
    print(f"verdicts on the detected flips {res['verdicts']}; transient on the flipped rank "
          f"alone: {res['blamed_flipped_rank']} of {sum(res['verdicts'].values())}; without "
          f"the consumed state {res['blind_verdicts']}, the flipped rank alone "
          f"{res['blind_blamed_flipped_rank']}")
    results = {"benchmark": NAME, "machine": machine, "config": dataclasses.asdict(cfg), **res,
               "elapsed_s": time.perf_counter() - started}
    name = NAME + ("-rest" if cfg.rest else "") + ("" if cfg.grads else "-nograds")
    print(f"wrote {write_results(name, results)} in "
          f"{results['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
