"""Fault injection at the checkpoint protocol's points, for tests and the demo.

``RUNLEDGER_FAULT=<point>@<step>[:rank=<r>][:gen=<g>][:run=<prefix>]`` kills
this process with SIGKILL when it reaches ``point`` while checkpointing
``step`` (on every rank unless ``rank`` is given, in every generation unless
``gen`` is, in every run unless the run id starts with ``run``): a real
crash, not an exception, so nothing after it runs. Points, in protocol order:
``staging`` (the state is staged, nothing written), ``mid_shard`` (this rank's
shard file is half written), ``after_shards`` (every shard is written and
checksummed, no manifest), ``after_manifest`` (the manifest is written, not
proposed), ``after_commit`` (the controller committed it), and ``step`` (a
crash after an optimizer step, outside any checkpoint).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass

from worker.errors import WorkerError

ENV = "RUNLEDGER_FAULT"
# Seconds every checkpoint write sleeps before its shards: slow storage, on demand.
DELAY_ENV = "RUNLEDGER_STORAGE_DELAY_S"
POINTS = ("staging", "mid_shard", "after_shards", "after_manifest", "after_commit", "step")


@dataclass(frozen=True, slots=True)
class Fault:
    point: str
    step: int
    rank: int | None = None
    generation: int | None = None
    run: str | None = None


class Faults:
    def __init__(self, fault: Fault | None, rank: int, generation: int,
                 run_id: str = "", storage_delay_s: float = 0.0) -> None:
        self.fault = fault
        self.rank = rank
        self.generation = generation
        self.run_id = run_id
        self.storage_delay_s = storage_delay_s

    @classmethod
    def from_env(cls, env: Mapping[str, str], rank: int, generation: int,
                 run_id: str = "") -> Faults:
        raw = env.get(DELAY_ENV, "") or "0"
        try:
            delay = float(raw)
        except ValueError:
            raise WorkerError(f"{DELAY_ENV}={raw!r} is not a number of seconds") from None
        return cls(parse(env.get(ENV, "")), rank, generation, run_id, max(0.0, delay))

    def slow_storage(self) -> None:
        if self.storage_delay_s:
            time.sleep(self.storage_delay_s)

    def armed(self, point: str, step: int) -> bool:
        f = self.fault
        return (f is not None and f.point == point and f.step == step
                and (f.rank is None or f.rank == self.rank)
                and (f.generation is None or f.generation == self.generation)
                and (f.run is None or self.run_id.startswith(f.run)))

    def hit(self, point: str, step: int) -> None:
        if self.armed(point, step):
            os.kill(os.getpid(), signal.SIGKILL)


def parse(text: str) -> Fault | None:
    if not text:
        return None
    head, *opts = text.split(":")
    point, sep, step = head.partition("@")
    if not sep or point not in POINTS or not _decimal(step):
        raise WorkerError(f"{ENV}={text!r}: expected <point>@<step>[:rank=R][:gen=G] with a"
                          f" point in {', '.join(POINTS)}")
    rank = gen = None
    run = None
    for opt in opts:
        key, _, value = opt.partition("=")
        if key == "run" and value:
            run = value
        elif key in ("rank", "gen") and _decimal(value):
            if key == "rank":
                rank = int(value)
            else:
                gen = int(value)
        else:
            raise WorkerError(f"{ENV}={text!r}: unknown option {opt!r}")
    return Fault(point, int(step), rank, gen, run)


def _decimal(text: str) -> bool:
    # str.isdigit() accepts superscripts that int() refuses
    return text.isascii() and text.isdigit()
