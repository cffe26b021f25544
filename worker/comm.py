"""The few collectives the checkpoint protocol needs, on one process group.

``init_distributed`` joins the training group the environment describes.
The protocol runs its collectives on a group of its own (gloo), never on the
training group: an async save runs them from a background thread, and two
threads must never interleave collectives on one group. A single process
(world size 1, no ``torch.distributed``) gets the trivial versions.

Tested in tests/worker/test_commit.py and tests/e2e/test_checkpoint.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from events.workerenv import WorkerEnv

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Comm:
    rank: int
    world_size: int
    group: Any = None  # a ProcessGroup, or None for one process

    @classmethod
    def single(cls) -> Comm:
        return cls(rank=0, world_size=1, group=None)

    @classmethod
    def new_group(cls) -> Comm:
        """A dedicated gloo group over every rank of the initialised default group."""
        if not (dist.is_available() and dist.is_initialized()):
            return cls.single()
        group = dist.new_group(backend="gloo")
        return cls(rank=dist.get_rank(), world_size=dist.get_world_size(), group=group)

    @property
    def distributed(self) -> bool:
        return self.group is not None and self.world_size > 1

    def all_gather(self, obj: T) -> list[T]:
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast(self, obj: T, src: int = 0) -> T:
        if not self.distributed:
            return obj
        box: list[Any] = [obj if self.rank == src else None]
        dist.broadcast_object_list(box, src=src, group=self.group)
        result: T = box[0]
        return result

    def max(self, value: int) -> int:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return int(t.item())

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier(group=self.group)


def stage_of(what: str) -> str:
    """The ``CheckpointWriteFailed.stage`` a storage fault's description names."""
    if "coverage" in what:
        return "coverage"
    if "manifest" in what:
        return "manifest"
    return "shards"


def device_name(local_rank: int) -> str:
    """What this rank trains on, as its step times report it: ``cpu``, or ``cuda:``
    and the name of the device the process group gave it (NCCL with GPUs)."""
    if not torch.cuda.is_available():
        return "cpu"
    index = local_rank % max(torch.cuda.device_count(), 1)
    return f"cuda: {torch.cuda.get_device_name(index)}"


def init_distributed(env: WorkerEnv) -> None:
    """Join the training group the agent described (NCCL with GPUs, gloo otherwise)."""
    if env.world_size == 1 or dist.is_initialized():
        return
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(env.local_rank)
    dist.init_process_group(
        backend="nccl" if cuda else "gloo",
        init_method=f"tcp://{env.master_addr}:{env.master_port}",
        rank=env.rank, world_size=env.world_size, timeout=timedelta(minutes=10))
