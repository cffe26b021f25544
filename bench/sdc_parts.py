"""The parts of ``bench/sdc_overhead.py`` that run inside one rank: models, batches,
the detector configurations and the timed training loop.

A rank runs every configuration on the same model, optimizer and batches, taking
turns round by round (the order rotates), so a burst of someone else's load lands
on all of them alike. The detectors are the worker's own (``worker.sdc``), called
as ``worker.session.Session.step`` calls them: after ``optimizer.step``, before
the step would be reported.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from events.sdcenv import SdcEnv

VOCAB = 512  # the synthetic corpus' default tokenizer (dataplane.synth)
SEQ_LEN = 128  # its default packing
GLOBAL_BATCH = 8  # examples/tiny.yaml


class StackLM(nn.Module):
    """examples/train_tiny.py's TinyLM with ``layers`` blocks instead of one."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, ff: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(SEQ_LEN, dim)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, dim_feedforward=ff, dropout=0.0,
                                       batch_first=True) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.tok(tokens) + self.pos(positions)
        causal = torch.triu(torch.full((n, n), float("-inf"), device=tokens.device), diagonal=1)
        for block in self.blocks:
            x = block(x, src_mask=causal, is_causal=True)
        out: torch.Tensor = self.head(x)
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    vocab: int
    dim: int
    heads: int
    layers: int
    ff: int
    steps: int  # timed steps per configuration per round

    def build(self) -> nn.Module:
        if self.name == "tiny":
            from examples.train_tiny import TinyLM  # the example job's model, as it ships
            return TinyLM(self.vocab, self.dim, self.heads, SEQ_LEN, dropout=0.0)
        return StackLM(self.vocab, self.dim, self.heads, self.layers, self.ff)


# tiny: TinyLM at examples/train_tiny.py's defaults (dim 32, 2 heads, one block of
# ff 2*dim, vocab 512, seq_len 128); larger: four blocks of dim 256, vocab 12,288 (~10M).
TINY = ModelSpec("tiny", VOCAB, 32, 2, 1, 64, steps=20)
LARGER = ModelSpec("larger", 12288, 256, 4, 4, 1024, steps=6)


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    """One detector configuration; ``env`` None is the baseline (no detector runs)."""

    name: str
    what: str
    env: SdcEnv | None


CONFIGS = (
    Config("baseline", "no detectors", None),
    Config("agreement", "fingerprint of the parameters, every step", SdcEnv(
        agreement_every=1, grads=False, optimizer=False, nonfinite=False)),
    Config("agreement+grads+optim", "fingerprints of parameters, gradients and optimizer "
           "state, every step", SdcEnv(agreement_every=1, grads=True, optimizer=True,
                                       nonfinite=False)),
    Config("full_digest", "the same plus a sha256 of every byte, every step", SdcEnv(
        agreement_every=1, full_every=1, grads=True, optimizer=True, nonfinite=False)),
    Config("nonfinite", "non-finite loss or gradient norm", SdcEnv(
        agreement_every=0, grads=False, optimizer=False, nonfinite=True)),
    Config("spike", "loss and gradient-norm spikes (6 sigma, window 32, warm-up 8)",
           SdcEnv(agreement_every=0, grads=False, optimizer=False, nonfinite=False,
                  spike_sigma=6.0)),
    Config("all", "agreement on all state + nonfinite + spike, full digest every 100 steps",
           SdcEnv(agreement_every=1, full_every=100, grads=True, optimizer=True,
                  nonfinite=True, spike_sigma=6.0)),
)

Check = Callable[[int, float, nn.Module, torch.optim.Optimizer], None]


@dataclasses.dataclass
class Measured:
    """One configuration's per-step seconds (the whole step) and the detectors' share."""

    step_s: list[float] = dataclasses.field(default_factory=list)
    check_s: list[float] = dataclasses.field(default_factory=list)
    detections: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"step_s": self.step_s, "check_s": self.check_s, "detections": self.detections}


def batches(spec: ModelSpec, rank: int, world: int, count: int) -> list[torch.Tensor]:
    """This rank's share of ``count`` fixed global batches (random tokens)."""
    gen = torch.Generator().manual_seed(1000 + rank)
    share = GLOBAL_BATCH // world
    return [torch.randint(0, spec.vocab, (share, SEQ_LEN), generator=gen) for _ in range(count)]


def train_step(ddp: nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor) -> float:
    opt.zero_grad(set_to_none=True)
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)
    logits = ddp(tokens, positions)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                           tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    return float(loss.detach())


def run_model(spec: ModelSpec, rounds: int, rank: int, world: int,
              make_check: Callable[[SdcEnv, int, int], Check],
              is_detection: Callable[[BaseException], bool]) -> dict[str, Any]:
    """Every configuration on ``spec``, ``rounds`` times in rotating order."""
    torch.manual_seed(0)  # identical initial weights on every rank
    model = spec.build()
    ddp: nn.Module = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = batches(spec, rank, world, 8)
    measured = {c.name: Measured() for c in CONFIGS}
    step = 0
    for warm in range(3):  # untimed: allocator, DDP buckets, optimizer state
        step += 1
        train_step(ddp, opt, data[warm % len(data)])
    for r in range(rounds):
        order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
        for cfg in order:
            check = make_check(cfg.env, rank, world) if cfg.env is not None else None
            out = measured[cfg.name]
            for _ in range(spec.steps):
                step += 1
                if world > 1:
                    dist.barrier()  # every rank starts the step together
                t0 = time.perf_counter()
                loss = train_step(ddp, opt, data[step % len(data)])
                t1 = time.perf_counter()
                if check is not None:
                    try:
                        check(step, loss, model, opt)
                    except Exception as exc:
                        if not is_detection(exc):
                            raise
                        out.detections += 1  # a false alarm here: reported, not hidden
                        check = make_check(cfg.env, rank, world)  # type: ignore[arg-type]
                t2 = time.perf_counter()
                out.step_s.append(t2 - t0)
                out.check_s.append(t2 - t1)
    params = sum(p.numel() for p in model.parameters())
    return {"model": dataclasses.asdict(spec), "parameters": params,
            "state_bytes": params * 4 * 4,  # params, grads, exp_avg, exp_avg_sq (fp32)
            "configs": {name: m.to_json() for name, m in measured.items()}}


def component_costs(spec: ModelSpec, repeats: int) -> dict[str, float]:
    """Median ms of each detector's own work on one process (no collective): what the
    per-step figures are made of, apart from the all-gather and the wait in it."""
    from bench.common import time_repeated
    from worker import sdc

    torch.manual_seed(0)
    model = spec.build()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    train_step(model, opt, batches(spec, 0, 1, 1)[0])  # grads and optimizer state exist
    params = sdc.state_parts(model, opt, grads=False, optimizer_state=False)
    every = sdc.state_parts(model, opt, grads=True, optimizer_state=True)
    work = {
        "state_parts (all)": lambda: sdc.state_parts(model, opt, grads=True,
                                                     optimizer_state=True),
        "fingerprints (params)": lambda: sdc.fingerprints(params),
        "fingerprints (all)": lambda: sdc.fingerprints(every),
        "full_digest (all)": lambda: sdc.full_digest(every),
        "grad_norm": lambda: sdc.grad_norm(model),
    }
    return {name: time_repeated(fn, repeats).median * 1000.0 for name, fn in work.items()}
