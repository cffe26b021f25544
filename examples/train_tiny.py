"""A small real training job for runledger: a tiny causal transformer on the data plane.

Launched by a node agent (``examples/tiny.yaml``); everything it needs comes
from the environment the agent and controller set (``events.workerenv``):
its rank, the checkpoint settings, the dataset id, and the model config as
``RUNLEDGER_MODEL`` JSON. The manifest is read from the dataset catalog
(``$RUNLEDGER_DATASETS``). It uses torch.distributed DDP (gloo on CPU, NCCL on
GPUs), reports every step through the worker session, checkpoints by policy
and resumes from the latest committed checkpoint after a restart.

Model config keys (all optional): ``steps`` (40), ``dim`` (32), ``heads`` (2),
``lr`` (3e-3), ``global_batch`` (8), ``seed`` (0), ``dropout`` (0.1),
``step_sleep_s`` (0: pause per step, to make a run long enough to interrupt).

Elastic sizes: the data plane hands each replica its share of the same global
batch whatever the replica count, and each replica runs
``$RUNLEDGER_ACCUMULATION`` micro-batches per optimizer step (the controller
sets it when an elastic run shrinks). The loss is the mean over every loss
token of the global batch: each micro-batch's summed loss is divided by the
global token count (all-reduced first) and multiplied by the world size, which
DDP's gradient averaging divides back out. So one optimizer step sees the
gradient of the same global mean at any size; what differs between sizes is
only the order floats are summed in. With ``dropout`` 0 a run that shrinks and
grows follows the loss trace of a fixed-size run within float rounding
(tests/e2e/test_elastic.py checks 1e-3 relative).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO, cast

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from dataplane.catalog import Catalog, default_catalog_url
from dataplane.errors import DataPlaneError
from dataplane.loader import DataLoader, LoaderConfig
from events.workerenv import ACCUMULATION
from worker.errors import WorkerError
from worker.session import Session


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, seq_len: int, dropout: float) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.block = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim,
                                                dropout=dropout, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(positions.clamp(max=self.seq_len - 1))
        n = tokens.shape[1]
        causal = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return self.head(self.block(x, src_mask=causal, is_causal=True))


def config() -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads(os.environ.get("RUNLEDGER_MODEL") or "{}")
    defaults = {"steps": 40, "dim": 32, "heads": 2, "lr": 3e-3, "global_batch": 8, "seed": 0,
                "dropout": 0.1, "step_sleep_s": 0.0}
    return {**defaults, **cfg}


def _tracer(session: Session) -> TextIO | None:
    """``RUNLEDGER_TRACE_BATCHES=<dir>``: each rank appends, per step, to
    ``<dir>/<run id>/g<generation>-r<rank>.jsonl`` the global positions and the
    sample spans its batch came from, and the step's loss, so a test can compare
    what was served with the provenance the log records."""
    where = os.environ.get("RUNLEDGER_TRACE_BATCHES")
    if not where:
        return None
    folder = Path(where) / session.env.run_id
    folder.mkdir(parents=True, exist_ok=True)
    name = f"g{session.env.generation}-r{session.rank}.jsonl"
    return open(folder / name, "a", encoding="utf-8")


def _train_step(ddp: nn.Module, opt: torch.optim.Optimizer, world: int, micro: int,
                tokens: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
    """One optimizer step over this replica's share in ``micro`` micro-batches; the
    global (summed loss, loss tokens). See the module docstring for the scaling."""
    count = mask.sum().to(torch.float32).reshape(1)
    if world > 1:
        dist.all_reduce(count)
    scale = world / count.clamp(min=1)
    opt.zero_grad(set_to_none=True)
    summed = torch.zeros(())
    parts = [i for i in torch.tensor_split(torch.arange(tokens.shape[0]), micro) if len(i)]
    for n, rows in enumerate(parts):
        last = n == len(parts) - 1
        sync = cast(Any, ddp).no_sync() if world > 1 and not last else contextlib.nullcontext()
        with sync:
            logits = ddp(tokens[rows], positions[rows])
            losses = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                     tokens[rows][:, 1:].reshape(-1), reduction="none")
            part = (losses * mask[rows].reshape(-1)).sum()
            (part * scale).backward()
        summed = summed + part.detach()
    opt.step()
    totals = torch.stack([summed, count[0]])
    if world > 1:
        dist.all_reduce(totals)
        totals[1] = count[0]  # the count was already global
    return totals


def main() -> int:
    cfg = config()
    with Session.from_env() as session:
        manifest = Catalog(default_catalog_url()).get(session.ckpt.dataset_id or "")
        torch.manual_seed(cfg["seed"])  # identical initial weights on every rank
        model = TinyLM(manifest.tokenizer.vocab_size, cfg["dim"], cfg["heads"],
                       manifest.packing.seq_len, cfg["dropout"])
        ddp: nn.Module = model
        if session.world_size > 1:
            ddp = nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
        loader = DataLoader(manifest, LoaderConfig(seed=cfg["seed"],
                                                   global_batch_size=cfg["global_batch"]),
                            replica=session.rank, replicas=session.world_size)
        session.attach(model=model, optimizer=opt, scheduler=sched, loader=loader)
        start = session.restore()
        # Per-rank dropout streams differ, as they would on real hardware.
        if start == 0:
            torch.manual_seed(cfg["seed"] * 1000 + session.rank + 1)
        trace = _tracer(session)
        micro = max(1, int(os.environ.get(ACCUMULATION) or 1))
        for step in range(start + 1, cfg["steps"] + 1):
            t0 = time.monotonic()
            wait0 = loader.metrics.input_wait_s
            batch = next(loader)
            tokens = torch.from_numpy(batch.tokens)
            positions = torch.from_numpy(batch.positions.astype("int64"))
            mask = torch.from_numpy(batch.loss_mask[:, :-1])
            totals = _train_step(ddp, opt, session.world_size, micro, tokens, positions, mask)
            sched.step()
            loss = float(totals[0] / totals[1].clamp(min=1))
            if cfg["step_sleep_s"]:
                time.sleep(cfg["step_sleep_s"])
            # Traced before the step is reported: a checkpoint at this step may be
            # committed inside session.step, and a stop that follows the commit (an
            # elastic grow) could otherwise take the process before the line is written,
            # leaving a committed step that no generation traced. A step traced but
            # never committed is served again, and traced again, by the next generation.
            if trace is not None:
                size = cfg["global_batch"]
                trace.write(json.dumps({
                    "generation": session.env.generation, "rank": session.rank, "step": step,
                    "batch": batch.index, "start": batch.index * size,
                    "end": (batch.index + 1) * size, "cursor": batch.cursor.position,
                    "rows": len(batch.samples), "loss": loss,
                    "spans": [[[p.source, p.index, p.epoch, p.start, p.stop] for p in row]
                              for row in batch.samples]}) + "\n")
                trace.flush()
            session.step(step, loss=loss, tokens=tokens.numel() * session.world_size,
                         loss_tokens=int(totals[1]), step_time_s=time.monotonic() - t0,
                         input_wait_s=loader.metrics.input_wait_s - wait0, cursor=batch.cursor)
        loader.close()
        if trace is not None:
            trace.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except WorkerError as exc:
        print(f"train_tiny: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except DataPlaneError as exc:
        print(f"train_tiny: {exc}", file=sys.stderr)
        sys.exit(65)
