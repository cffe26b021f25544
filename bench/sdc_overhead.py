"""Benchmark: what the silent-data-corruption detectors cost per training step (issue #17).

Usage: ``.venv/bin/python bench/sdc_overhead.py [--quick] [--rounds N] [--threads N]``

Two ranks (two OS processes, a gloo group over loopback: the detectors'
all_gather is part of what is measured) train a model with DDP and AdamW on
fixed random batches. Each rank runs, on the same model and optimizer, a
baseline (no detector) and every detector configuration of
``bench/sdc_parts.py`` (``CONFIGS``), each for a number of steps, taking turns
round by round in a rotating order. The detectors are ``worker.sdc.Detectors``
called as the worker session calls them: after ``optimizer.step``, with the
state parts (``worker.sdc.state_parts``) the configuration asks for, plus the
fingerprint of what the step consumed that the session takes before it on agreement
steps (``worker.sdcstep.watch_consumed``; taken in the same call here, same bytes).

Two models: ``tiny`` (examples/train_tiny.py's ``TinyLM`` at its defaults:
dim 32, 2 heads, one block, vocab 512, seq_len 128, global batch 8) and
``larger`` (four blocks of dim 256, vocab 12,288, ~10M parameters, same
batches). A step is forward, backward (DDP's gradient all-reduce), the
optimizer step, and the detectors; it is timed on rank 0 from a barrier that
starts every rank's step together. Reported per configuration: the median step
time, its ratio to the baseline's median (measured in the same run, same
process) and the median over rounds of the per-round ratio, the median time
inside the detectors alone (the figure that carries
to other models: it scales with the state's bytes, not the step's FLOPs), and
1 + that time over the baseline's median step (the same ratio with the noise of
two separately timed medians taken out; on a shared machine the first ratio
moves by more than the detectors cost on the tiny model). A detection during
the benchmark would be a false alarm on healthy replicas: counted and reported.
A second table times the fixed part alone (the row's all-gather on the control
group, and a one-int all-reduce for comparison), a third each detector's own
work on one process (no collective).
Nothing asserts on a timing. Results go to ``bench/results/sdc_overhead.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path; use the repository root.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import torch
import torch.distributed as dist
from torch import nn

from bench.common import REPO_ROOT, fmt_num, machine_info, print_table, ratio, write_results
from bench.sdc_parts import CONFIGS, LARGER, TINY, Check, component_costs, run_model
from events.sdcenv import SdcEnv
from worker.comm import Comm

NAME = "sdc_overhead"
WORLD = 2


_COMM: list[Comm] = []  # the rank's side group, made once (a new group is a collective)


def make_check(env: SdcEnv, rank: int, world: int) -> Check:
    """The worker's detectors for one configuration, called as the session calls them:
    the row goes through ``Comm.all_gather`` on the session's own gloo group."""
    from worker import sdc

    if not _COMM:
        _COMM.append(Comm.new_group())
    comm = _COMM[0]
    detectors = sdc.Detectors(env, None, rank=rank, world_size=world, node=f"n{rank}",
                              gather=comm.all_gather)

    def check(step: int, loss: float, model: nn.Module, opt: torch.optim.Optimizer) -> None:
        # What the step consumed, which the session fingerprints in an optimizer pre-hook
        # (worker.sdcstep.watch_consumed): taken here, after the update, it is the same
        # read of the same bytes, and stays inside the timed detector call.
        detectors.before_update(step, sdc.consumed_parts(
            model, opt, optimizer_state=env.optimizer))
        parts = sdc.state_parts(model, opt, grads=env.grads, optimizer_state=env.optimizer)
        norm = sdc.grad_norm(model) if detectors.wants_grad_norm else None
        checked = detectors.check(step, loss, parts, norm)
        if checked.finding is not None:
            raise Detected(checked.finding.detail)

    return check


class Detected(Exception):
    """A finding on healthy replicas: a false alarm, counted by the benchmark."""


def is_detection(exc: BaseException) -> bool:
    return isinstance(exc, Detected)


def rank_main(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=WORLD)
    try:
        specs = [TINY] if args.quick else [TINY, LARGER]
        out: dict[str, Any] = {
            s.name: run_model(s, args.rounds, args.rank, WORLD, make_check, is_detection)
            for s in specs}
        out["gather"] = gather_costs(_COMM[0], 50 if args.quick else 300)
        # Both ranks leave the collectives together: a rank that tears gloo down while
        # its peer still has a side-group transfer in flight can abort the peer
        # ("terminate called without an active exception", exit -6; 1 run in 6 on CI).
        _COMM[0].barrier()
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if args.rank == 0:
        Path(args.out).write_text(json.dumps(out), "utf-8")


def gather_costs(comm: Comm, repeats: int) -> dict[str, float]:
    """Median ms of the step's fixed part alone, on the control group: the all-gather
    of a row as the detectors send it (80 fingerprints, tiny's parts with all state;
    320 for a model four times as deep), and for comparison an all-reduce of one
    int64, all that agreeing on a flag would need."""
    from worker.sdc import Row

    flag = torch.zeros(1, dtype=torch.int64)
    rows = {n: Row(tuple(range(-n, 0)), None, "", "", f"n{comm.rank}") for n in (80, 320)}
    work: dict[str, Callable[[], object]] = {
        "all_gather row of 80": lambda: comm.all_gather(rows[80]),
        "all_gather row of 320": lambda: comm.all_gather(rows[320]),
        "all_reduce one int64": lambda: dist.all_reduce(flag, group=comm.group)}
    samples: dict[str, list[float]] = {name: [] for name in work}
    for i in range(repeats + repeats // 5):  # taking turns; the first fifth untimed
        for name, fn in work.items():
            comm.barrier()
            t0 = time.perf_counter()
            fn()
            if i >= repeats // 5:
                samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) * 1000.0 for name, v in samples.items()}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def launch(args: argparse.Namespace) -> dict[str, Any]:
    """Both ranks as OS processes; rank 0's measurements."""
    with tempfile.TemporaryDirectory(prefix="bench-sdc-") as tmp:
        out = Path(tmp) / "rank0.json"
        port = _free_port()
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--port", str(port),
               "--out", str(out), "--rounds", str(args.rounds), "--threads", str(args.threads)]
        cmd += ["--quick"] if args.quick else []
        procs = [subprocess.Popen([*cmd, "--rank", str(r)], env=env) for r in range(WORLD)]
        codes = [p.wait() for p in procs]
        if any(codes):
            raise SystemExit(f"a rank failed: exit codes {codes}; its traceback is above")
        data: dict[str, Any] = json.loads(out.read_text("utf-8"))
        return data


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000.0 if values else float("nan")


def round_ratio(config: list[float], baseline: list[float], rounds: int) -> float:
    """The median over rounds of (this round's median step / the baseline's in the same
    round): the two ran minutes apart at most, so a change of the machine's load
    between rounds moves this least."""
    per = len(baseline) // rounds
    if per == 0 or len(config) != len(baseline):
        return float("nan")
    return statistics.median(
        ratio(statistics.median(config[r * per:(r + 1) * per]),
              statistics.median(baseline[r * per:(r + 1) * per])) for r in range(rounds))


def report(results: dict[str, Any], rounds: int) -> None:
    for name, res in results.items():
        if name == "gather":
            print_table(["on the gloo control group, 2 ranks", "ms (p50)"],
                        [[k, fmt_num(v, 3)] for k, v in res.items()],
                        "the detectors' fixed part per step")
            continue
        cfgs = res["configs"]
        base_s = cfgs["baseline"]["step_s"]
        base = _median_ms(base_s)
        rows = []
        for c in CONFIGS:
            m = cfgs[c.name]
            step = _median_ms(m["step_s"])
            check = _median_ms(m["check_s"])
            by_round = round_ratio(m["step_s"], base_s, rounds)
            rows.append([c.name, fmt_num(step, 2), f"{ratio(step, base):.3f}",
                         f"{by_round:.3f}", fmt_num(check, 3), f"{1 + ratio(check, base):.3f}",
                         m["detections"], c.what])
            m["median_step_ms"], m["ratio"], m["round_ratio"] = step, ratio(step, base), by_round
            m["median_check_ms"], m["added_ratio"] = check, 1 + ratio(check, base)
        title = (f"{name}: {res['parameters']:,} parameters, {WORLD} gloo ranks, "
                 f"{len(base_s)} steps per configuration in {rounds} rounds")
        print_table(["configuration", "step ms (p50)", "ratio", "ratio (rounds)",
                     "detectors ms (p50)", "1 + detectors/base", "false alarms", "what"],
                    rows, title)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny model only, one round")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.quick else 5
    if args.rank is not None:
        rank_main(args)
        return
    info = machine_info(["torch"])
    results = launch(args)
    report(results, args.rounds)
    torch.set_num_threads(args.threads)
    specs = [TINY] if args.quick else [TINY, LARGER]
    parts = {s.name: component_costs(s, 5 if args.quick else 20) for s in specs}
    names = list(next(iter(parts.values())))
    print_table(["one process, no collective (ms, p50)", *parts],
                [[n, *(fmt_num(parts[m][n], 3) for m in parts)] for n in names],
                "what the detectors' own work costs")
    for name, costs in parts.items():
        results[name]["components_ms"] = costs
    path = write_results(NAME, {"machine": info, "world_size": WORLD, "threads": args.threads,
                                "rounds": args.rounds, "models": results,
                                "configs": {c.name: {"what": c.what, "env": (
                                    None if c.env is None else c.env.to_environ())}
                                    for c in CONFIGS}})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
