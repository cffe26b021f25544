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

Points that are not a crash, for ``runledger drill``: ``truncate`` (right
after checkpoint ``step`` committed, cut this rank's first shard file to half
its size, then SIGKILL: a committed checkpoint that no longer verifies),
``hang`` (at ``step``, stop stepping for good while the reporter keeps
heartbeating), ``slow`` (from ``step`` on, sleep ``ms=<milliseconds>`` in
every step: a straggler).

``bitflip@<step>[:target=param|grad|optim][:when=step|rest][:seed=S][:node=N]`` is
silent data corruption, not a crash (``worker.bitflip``): at ``step`` flip one bit of one
element of one tensor of that kind (``param`` unless ``target`` says; a gradient
before ``optimizer.step``, a parameter or optimizer state right after it), chosen
from a generator seeded by (``seed``, step, rank): every replay of the step flips the
same bit, so without ``gen`` it is a bad node, with ``gen=1`` a one-off. ``when=rest``
flips a parameter or optimizer state at rest instead, between steps: before the first
forward of ``step``, so the step consumes the corrupted value (its gradient reaches
every replica through the all-reduce; not with ``target=grad``, which a step computes
afresh). ``node`` (any point) arms a fault only on the node of that name.

Two switches, honoured only for tests and drills: ``RUNLEDGER_FAULT_NO_SIGTERM=1``
ignores SIGTERM (a worker partitioned from its agent, which the agent's stop
never reaches; only SIGKILL ends it), and ``RUNLEDGER_IGNORE_FENCE=1`` turns off
the worker's own fence check (``worker.session``: a fenced generation stops
before its next step or checkpoint), the "broken build" the stale-worker drill
must catch.
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
NO_SIGTERM_ENV = "RUNLEDGER_FAULT_NO_SIGTERM"
IGNORE_FENCE_ENV = "RUNLEDGER_IGNORE_FENCE"
POINTS = ("staging", "mid_shard", "after_shards", "after_manifest", "after_commit", "step",
          "truncate", "hang", "slow", "bitflip")
TARGETS = ("param", "grad", "optim")
# ``bitflip`` timings: within the step (the default), or at rest before it.
WHEN = ("step", "rest")


@dataclass(frozen=True, slots=True)
class Fault:
    point: str
    step: int
    rank: int | None = None
    generation: int | None = None
    run: str | None = None
    ms: int = 0  # ``slow``: the sleep per step
    target: str = "param"  # ``bitflip``: which kind of tensor
    seed: int = 0  # ``bitflip``: seeds the choice of tensor, element and bit
    node: str | None = None
    when: str = "step"  # ``bitflip``: within the step, or at rest before it


class Faults:
    def __init__(self, fault: Fault | None, rank: int, generation: int,
                 run_id: str = "", storage_delay_s: float = 0.0,
                 ignore_fence: bool = False, node: str = "") -> None:
        self.fault = fault
        self.node = node
        self.rank = rank
        self.generation = generation
        self.run_id = run_id
        self.storage_delay_s = storage_delay_s
        self.ignore_fence = ignore_fence

    @classmethod
    def from_env(cls, env: Mapping[str, str], rank: int, generation: int,
                 run_id: str = "", node: str = "") -> Faults:
        raw = env.get(DELAY_ENV, "") or "0"
        try:
            delay = float(raw)
        except ValueError:
            raise WorkerError(f"{DELAY_ENV}={raw!r} is not a number of seconds") from None
        if env.get(NO_SIGTERM_ENV) == "1":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return cls(parse(env.get(ENV, "")), rank, generation, run_id, max(0.0, delay),
                   ignore_fence=env.get(IGNORE_FENCE_ENV) == "1", node=node)

    def slow_storage(self) -> None:
        if self.storage_delay_s:
            time.sleep(self.storage_delay_s)

    def armed(self, point: str, step: int, *, onwards: bool = False) -> bool:
        f = self.fault
        return (f is not None and f.point == point
                and (f.step == step or (onwards and step > f.step))
                and (f.rank is None or f.rank == self.rank)
                and (f.generation is None or f.generation == self.generation)
                and (f.run is None or self.run_id.startswith(f.run))
                and (f.node is None or f.node == self.node))

    def hit(self, point: str, step: int) -> None:
        if self.armed(point, step):
            os.kill(os.getpid(), signal.SIGKILL)

    def stepped(self, step: int) -> None:
        """The step path's points: ``step`` (crash), ``hang`` (stop stepping, forever:
        the reporter thread goes on heartbeating), ``slow`` (this and every later step)."""
        self.hit("step", step)
        if self.armed("hang", step):
            while True:
                time.sleep(3600)
        if self.fault is not None and self.armed("slow", step, onwards=True):
            time.sleep(self.fault.ms / 1000.0)

    def truncate(self, step: int, shard: str) -> None:
        """``truncate``: cut the committed ``shard`` (an fsspec URL) to half, then crash."""
        if not self.armed("truncate", step):
            return
        import fsspec  # only a drill pays for it

        fs, path = fsspec.core.url_to_fs(shard)
        data = fs.cat_file(path)
        fs.pipe_file(path, data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)


def parse(text: str) -> Fault | None:
    if not text:
        return None
    head, *opts = text.split(":")
    point, sep, step = head.partition("@")
    if not sep or point not in POINTS or not _decimal(step):
        raise WorkerError(f"{ENV}={text!r}: expected <point>@<step>[:rank=R][:gen=G][:run=P]"
                          f"[:node=N][:ms=M][:target=T][:when=W][:seed=S] with a point in "
                          f"{', '.join(POINTS)}")
    fields: dict[str, str | int] = {}
    for opt in opts:
        key = opt.partition("=")[0]
        if key in fields:
            raise WorkerError(f"{ENV}={text!r}: option {key!r} given twice")
        fields[key] = _option(text, point, opt)
    if fields.get("when") == "rest" and fields.get("target") == "grad":
        raise WorkerError(f"{ENV}={text!r}: when=rest flips state that lies at rest between "
                          "steps (param or optim); a gradient is computed afresh by each step")
    return Fault(point, int(step), rank=_int(fields.get("rank")),
                 generation=_int(fields.get("gen")), run=_str(fields.get("run")),
                 ms=_int(fields.get("ms")) or 0,
                 target=_str(fields.get("target")) or "param", seed=_int(fields.get("seed")) or 0,
                 node=_str(fields.get("node")), when=_str(fields.get("when")) or "step")


def _option(text: str, point: str, opt: str) -> str | int:
    """One ``key=value`` option, checked against the point it may go with."""
    key, _, value = opt.partition("=")
    if key in ("run", "node") and value:
        return value
    if key in ("rank", "gen") and _decimal(value):
        return int(value)
    if key == "ms" and point == "slow" and _decimal(value):
        return int(value)
    if key == "seed" and point == "bitflip" and _decimal(value):
        return int(value)
    if key == "target" and point == "bitflip":
        if value in TARGETS:
            return value
        raise WorkerError(f"{ENV}={text!r}: target={value!r} is not one of "
                          f"{', '.join(TARGETS)}")
    if key == "when" and point == "bitflip":
        if value in WHEN:
            return value
        raise WorkerError(f"{ENV}={text!r}: when={value!r} is not one of {', '.join(WHEN)}")
    raise WorkerError(f"{ENV}={text!r}: unknown option {opt!r}")


def _int(value: str | int | None) -> int | None:
    return value if isinstance(value, int) else None


def _str(value: str | int | None) -> str | None:
    return value if isinstance(value, str) else None


def _decimal(text: str) -> bool:
    # str.isdigit() accepts superscripts that int() refuses
    return text.isascii() and text.isdigit()
