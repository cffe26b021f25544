"""bench/scale.py's core section: one run of N ranks through the controller's real core.

One process per size (``bench/scale.py`` starts it, so each size's peak memory
is its own): ``N / 8`` agents of 8 slots register, and one more as the spare a
restart needs; a run of N ranks is submitted, admitted and started; every rank
heartbeats (its record encoded by the real codec, as a worker sends it, and
decoded before the core takes it, as the controller does) and the run is
confirmed; then one node dies with its agent and everything else keeps
heartbeating every ``BEAT_MS`` of simulated time until the controller names
the node lost, and until it commands the next generation on the spare.

The clock is simulated (the core is pure: ``now`` is an argument), so
detection and restart latencies are in the core's own milliseconds, exactly
what the service loop would decide at those times; CPU seconds are measured
for each phase. What this leaves out (the broker, the signatures, the
transactions, one Kafka record per rank's heartbeat) is the next section's.

The plan is built directly (``RunPlan``), not parsed from a spec (the broker
section submits a real one). The ``GenerationStarted`` record's size, its
members written as blocks (``events.placement``), is printed against
``events.limits.RECORD_MAX_BYTES``.
"""

from __future__ import annotations

import gc
import resource
import time
from dataclasses import dataclass
from typing import Any

from controller.emitter import Out
from controller.model import Model
from controller.reconcile import handle, tick
from controller.runplan import RunPlan
from controller.spec.parts import RetryPolicy
from events.codec import default_codec
from events.limits import RECORD_MAX_BYTES
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    Event,
    GroupStartCommanded,
    Header,
    HeartbeatRecorded,
    NodeLost,
    RunSubmitted,
    node_key,
)

SLOTS = 8
BEAT_MS = 2_000  # every member and agent heartbeats this often while a node is lost
TICK_MS = 250  # controller.service's tick_s
TIMEOUT_MS = 10_000  # the plan's heartbeat timeout
RUN = "run-scale"
START = 1_800_000_000_000


@dataclass
class World:
    """The core, its clock and the events it is handed."""

    plan: RunPlan
    model: Model
    now: int = START
    seq: int = 0

    def header(self, run_id: str, gen: int, producer: str) -> Header:
        self.seq += 1
        return Header(f"scale/{self.seq}", run_id, gen, self.now, producer, None, 1)

    def send(self, event: Event) -> list[Out]:
        self.model, out = handle(self.model, event, self.now, lambda _: self.plan)
        return out

    def tick(self) -> list[Out]:
        self.model, out = tick(self.model, self.now, lambda _: self.plan)
        return out


def _cpu() -> float:
    return time.process_time()


def measure(ranks: int) -> dict[str, Any]:
    """Every figure of the core section for one run of ``ranks`` ranks."""
    codec = default_codec()
    nodes = [f"node-{i:06d}" for i in range(ranks // SLOTS + 1)]  # the last one is the spare
    plan = RunPlan(world_size=ranks, argv=("train",), slots_per_node=SLOTS,
                   heartbeat_timeout_ms=TIMEOUT_MS, stall_timeout_ms=600_000,
                   retry={"infrastructure": RetryPolicy(attempts=5, backoff_base_s=0.0,
                                                         backoff_cap_s=0.0)})
    w = World(plan, Model(since=START))
    fig: dict[str, Any] = {"ranks": ranks, "nodes": len(nodes) - 1}

    def agent(node: str, busy: int = SLOTS) -> AgentHeartbeatRecorded:
        return AgentHeartbeatRecorded(header=w.header(node_key(node), 0, f"agent/{node}"),
                                      node=node, slots=SLOTS, domain="d1", busy_slots=busy)

    t = _cpu()
    for node in nodes:
        w.send(AgentRegistered(header=w.header(node_key(node), 0, f"agent/{node}"),
                               node=node, slots=SLOTS, domain="d1"))
    fig["register_s"] = _cpu() - t
    w.send(RunSubmitted(header=w.header(RUN, 0, "cli/alice"), spec_digest="sha256:scale",
                        spec_json="{}", principal="alice", world_size=ranks, dataset_id=None))
    t = _cpu()
    out = w.tick()
    fig["admit_start_s"] = _cpu() - t
    started = [e for _, e in out if e.event_type == "GenerationStarted"]
    fig["start_commands"] = sum(isinstance(e, GroupStartCommanded) for _, e in out)
    fig["generation_started_bytes"] = len(codec.encode(started[0])) if started else None
    fig["record_max_bytes"] = RECORD_MAX_BYTES
    members = w.model.runs[RUN].members

    def beats(skip: str | None = None) -> list[bytes]:
        gen = w.model.runs[RUN].generation
        return [codec.encode(HeartbeatRecorded(
            header=w.header(RUN, gen, f"worker/{RUN}/{m.logical_id}"),
            logical_id=m.logical_id, node=m.node, step=0)) for m in members if m.node != skip]

    # One heartbeat per rank: decode alone (the baseline), then decode + the core.
    encoded = beats()
    gc.collect()
    t = _cpu()
    for raw in encoded:
        codec.decode(raw)
    decode_s = _cpu() - t
    beaten_at = w.now  # the dead node's last word, below
    t = _cpu()
    for raw in encoded:
        w.send(codec.decode(raw).event)
    core_s = _cpu() - t
    fig["heartbeat_decode_us"] = decode_s / ranks * 1e6
    fig["heartbeat_core_us"] = core_s / ranks * 1e6
    fig["heartbeats_per_s"] = ranks / core_s
    fig["ratio_to_decode"] = decode_s / core_s
    w.now += 100
    out = w.tick()
    fig["confirmed"] = any(e.event_type == "MembershipConfirmed" for _, e in out)
    ticks = []
    for _ in range(5):
        w.now += 250
        t = _cpu()
        w.tick()
        ticks.append(_cpu() - t)
    fig["tick_ms"] = sorted(ticks)[2] * 1000
    fig.update(_lose_a_node(w, nodes, agent, codec, beaten_at))
    fig["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return fig


def _lose_a_node(w: World, nodes: list[str], agent: Any, codec: Any,
                 died_at: int) -> dict[str, Any]:
    """The node in the middle dies with its agent, right after its members' heartbeats at
    ``died_at``; the others heartbeat every BEAT_MS, the controller ticks every TICK_MS."""
    dead = nodes[len(nodes) // 2]
    members = w.model.runs[RUN].members
    lost_at = restarted_at = None
    detect_cpu = restart_cpu = 0.0
    while restarted_at is None and w.now - died_at < 20 * TIMEOUT_MS:
        gen = w.model.runs[RUN].generation
        for m in members:
            if m.node != dead:
                w.send(codec.decode(codec.encode(HeartbeatRecorded(
                    header=w.header(RUN, gen, f"worker/{RUN}/{m.logical_id}"),
                    logical_id=m.logical_id, node=m.node, step=0))).event)
        for node in nodes:
            if node != dead:
                w.send(agent(node))
        for _ in range(BEAT_MS // TICK_MS):  # the service ticks every TICK_MS between beats
            t = _cpu()
            out = w.tick()
            spent = _cpu() - t
            if lost_at is None and any(isinstance(e, NodeLost) for _, e in out):
                lost_at, detect_cpu = w.now, spent
            if lost_at is not None and any(isinstance(e, GroupStartCommanded)
                                           and e.header.generation > gen for _, e in out):
                restarted_at, restart_cpu = w.now, spent
                break
            w.now += TICK_MS
    return {
        "lost_node": dead,
        "detected_ms": None if lost_at is None else lost_at - died_at,
        "heartbeat_timeout_ms": TIMEOUT_MS,
        "detect_tick_ms": detect_cpu * 1000,
        "restart_command_ms": (None if lost_at is None or restarted_at is None
                               else restarted_at - lost_at),
        "restart_tick_ms": restart_cpu * 1000,
    }
