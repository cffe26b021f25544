"""Part of bench/controller.py: 2. the core's cost per event with many finished runs.

A model holding N finished runs (``RunSubmitted`` + ``RunFinished`` each, rebuilt
by ``replay``, as a restarted controller would) and ``LIVE_RUNS`` Running runs
of two members on one agent's node. Then, timed: rounds of one agent heartbeat
and, per live run, a heartbeat from each member and a ``StepCommitted``, each
through ``handle``, with a ``tick`` every ``TICK_EVERY`` events (the loop's
work, as in section 1c), timed per ``TICK_EVERY`` events, best chunk reported;
and, separately, ticks alone, median reported. A core whose cost grows with
finished runs shows it in both columns; N = 0 is the baseline. Times are this
process's CPU time: the core is single-threaded, and on a shared machine wall
time mostly measures the neighbours.

The entry points come in as a :class:`Core`, so the same measurement can be
pointed at another build of the controller core for a before/after.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from bench.common import print_table
from controller.model import replay
from controller.reconcile import handle, tick
from controller.runplan import RunPlan, plan_from_submission
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    Event,
    Header,
    HeartbeatRecorded,
    RunFinished,
    RunSubmitted,
    StepCommitted,
)

LIVE_RUNS = 16
NODE = "bench-node"
TICK_EVERY = 1_000
TICKS_TIMED = 20
FULL_FINISHED = (0, 10_000, 100_000)
QUICK_FINISHED = (0, 1_000, 10_000, 100_000)
FULL_EVENTS = 20_000
QUICK_EVENTS = 5_000


@dataclasses.dataclass(frozen=True)
class Core:
    """The core's entry points: a model holding finished runs, ``handle`` and ``tick``."""

    with_finished: Callable[[Sequence[Event], int, Callable[[RunSubmitted], Any]], Any]
    handle: Callable[[Any, Event, int, Callable[[RunSubmitted], Any]], tuple[Any, list[Any]]]
    tick: Callable[[Any, int, Callable[[RunSubmitted], Any]], tuple[Any, list[Any]]]
    plan_from_submission: Callable[[RunSubmitted], Any]


THIS = Core(replay, handle, tick, plan_from_submission)


def cached(plan_from: Callable[[RunSubmitted], Any]) -> Callable[[RunSubmitted], Any]:
    """Plans by spec: every bench run has one of a few specs, each parsed once."""
    plans: dict[str, RunPlan] = {}

    def plan_of(e: RunSubmitted) -> Any:
        if e.spec_json not in plans:
            plans[e.spec_json] = plan_from(e)
        return plans[e.spec_json]

    return plan_of


def finished_log(template: RunSubmitted, n: int, t0: int) -> list[Event]:
    out: list[Event] = []
    for i in range(n):
        run = f"done-{i:06d}"
        at = t0 + i
        out.append(dataclasses.replace(template, header=Header(f"{run}/submitted", run, 0, at,
                                                               "cli/alice")))
        out.append(RunFinished(header=Header(f"{run}/RunFinished", run, 0, at, "controller"),
                               outcome="failed", reason="bench"))
    return out


def _hdr(eid: str, run: str, gen: int, at: int, producer: str) -> Header:
    return Header(eid, run, gen, at, producer)


def _live(core: Core, model: Any, template: RunSubmitted, at: int,
          plan_of: Callable[[RunSubmitted], Any]) -> tuple[Any, int]:
    """``LIVE_RUNS`` runs submitted, admitted, and Running on one agent's node."""
    agent = AgentRegistered(header=_hdr("agent/0", f"node/{NODE}", 0, at, "agent"), node=NODE,
                            slots=2 * LIVE_RUNS, domain="rack-1")
    model, _ = core.handle(model, agent, at, plan_of)
    for i in range(LIVE_RUNS):
        run = f"live-{i:02d}"
        sub = dataclasses.replace(template, header=_hdr(f"{run}/submitted", run, 0, at, "cli"))
        model, _ = core.handle(model, sub, at, plan_of)
    model, _ = core.tick(model, at, plan_of)
    at += 100
    for i in range(LIVE_RUNS):
        run = f"live-{i:02d}"
        for m in model.runs[run].members:
            beat = HeartbeatRecorded(header=_hdr(f"{run}/{m.logical_id}/hb/0", run, 1, at, "w"),
                                     logical_id=m.logical_id, node=m.node, step=0)
            model, _ = core.handle(model, beat, at, plan_of)
    model, _ = core.tick(model, at, plan_of)
    if any(model.runs[f"live-{i:02d}"].status.value != "Running" for i in range(LIVE_RUNS)):
        raise RuntimeError("the live runs did not reach Running")
    return model, at


def _rounds(model: Any, at: int) -> Iterable[tuple[int, Event]]:
    """Reports like a live cluster's: per second an agent heartbeat, member heartbeats, steps."""
    members = {f"live-{i:02d}": model.runs[f"live-{i:02d}"].members for i in range(LIVE_RUNS)}
    step = 0
    while True:
        at += 1_000
        step += 1
        yield at, AgentHeartbeatRecorded(header=_hdr(f"agent/{step}", f"node/{NODE}", 0, at,
                                                     "agent"), node=NODE, slots=2 * LIVE_RUNS,
                                         domain="rack-1", busy_slots=2 * LIVE_RUNS)
        for run, ms in members.items():
            for m in ms:
                yield at, HeartbeatRecorded(
                    header=_hdr(f"{run}/{m.logical_id}/hb/{step}", run, 1, at, "w"),
                    logical_id=m.logical_id, node=m.node, step=step - 1)
            yield at, StepCommitted(header=_hdr(f"{run}/step/{step}", run, 1, at, "w"), step=step,
                                    tokens=65_536, loss_tokens=60_000, step_time_ms=950.0,
                                    input_wait_ms=1.0, loss=2.5)


def measure(core: Core, template: RunSubmitted, finished: int, events: int,
            t0: int) -> dict[str, Any]:
    clock = time.process_time
    plan_of = cached(core.plan_from_submission)
    log = finished_log(template, finished, t0)
    started = clock()
    model = core.with_finished(log, t0, plan_of)
    built_s = clock() - started
    model, at = _live(core, model, template, t0 + finished + 1_000, plan_of)
    feed = _rounds(model, at)
    gc.collect()
    outputs = 0
    chunks: list[float] = []  # seconds per TICK_EVERY events, each with its tick
    for _ in range(events // TICK_EVERY):
        started = clock()
        for _ in range(TICK_EVERY - 1):
            at, event = next(feed)
            model, out = core.handle(model, event, at, plan_of)
            outputs += len(out)
        model, out = core.tick(model, at, plan_of)
        outputs += len(out)
        chunks.append(clock() - started)
    ticks: list[float] = []
    for _ in range(TICKS_TIMED):
        at += 10
        started = clock()
        model, out = core.tick(model, at, plan_of)
        ticks.append(clock() - started)
        outputs += len(out)
    if sum(1 for s in model.runs.values() if s.status.value == "Running") != LIVE_RUNS:
        raise RuntimeError("a live run stopped running: the measurement is not of normal work")
    # The best chunk and the median tick: the machine is shared, and load only adds time.
    return {"finished_runs": finished, "events": events, "build_s": built_s,
            "us_per_event": min(chunks) / TICK_EVERY * 1e6, "chunks_s": chunks,
            "us_per_tick": statistics.median(ticks) * 1e6, "ticks_s": ticks,
            "outputs": outputs}


def finished_section(template: RunSubmitted, quick: bool, t0: int,
                     core: Core = THIS) -> dict[str, Any]:
    counts = QUICK_FINISHED if quick else FULL_FINISHED
    events = QUICK_EVENTS if quick else FULL_EVENTS
    rows_out = [measure(core, template, n, events, t0) for n in counts]
    base = rows_out[0]["us_per_event"]
    rows = [[f"{r['finished_runs']:,}", f"{r['build_s']:.2f}", f"{r['us_per_event']:.1f}",
             f"{r['us_per_event'] / base:.2f}", f"{r['us_per_tick']:.0f}"] for r in rows_out]
    print_table(
        ["finished runs", "build s", "us/event", "vs 0 finished", "us/tick"], rows,
        title=f"2. the core with many finished runs: {events:,} reports of {LIVE_RUNS} Running "
        f"runs through handle, a tick every {TICK_EVERY:,} (best {TICK_EVERY:,}); then "
        f"{TICKS_TIMED} ticks alone (median)")
    return {"live_runs": LIVE_RUNS, "tick_every_events": TICK_EVERY, "rows": rows_out}
