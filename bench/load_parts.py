"""bench/scale.py's broker section: a fleet of simulated agents against a real controller.

One run of N ranks on N/8 simulated nodes of 8 slots (and one spare node)
speaks the real protocol to a real ``runledger controller`` process on a real
broker: every node enrolls its own key (``runledger node enroll``'s record,
``bench/reportkeys.py``) and signs what it sends; the run is a real spec,
submitted as ``runledger submit`` writes it; every interval each node sends its
``AgentHeartbeatRecorded`` and, in ``aggregated`` mode, one
``MembersHeartbeatRecorded`` for its 8 members (what ``agent.beats`` sends),
or in ``per-rank`` mode (the baseline, what workers without a beat file do)
one ``HeartbeatRecorded`` per member, signed with the run key its node
certified. The coordinator reports a ``StepCommitted`` every
``STEP_EVERY_S``, timed to its fact on ``runledger.runs`` (report -> fact).

After a steady window, one node dies with its agent: it sends nothing more.
Measured from the fleet's side: when the controller names it (``NodeLost`` on
``runs``) after its last record, and when the next generation starts (its
``GenerationStarted``, appended in the transaction that commands it), placed
on the spare. Throughout, the controller's consumer lag on ``reports`` (end
offsets minus its group's committed offsets, sampled every second), its CPU
(``/proc/<pid>/stat``) and its peak memory (``VmHWM``).

The fleet runs in this process, the controller in its own, the broker in a
third: on this 2-core machine they share the cores, so the controller's CPU
share is the figure that scales, not the wall-clock rates.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Message

from bench.common import REPO_ROOT, percentile, proc_cpu_s, proc_hwm_mb
from bench.controller import (
    PRODUCER_SETTINGS,
    Latencies,
    Reader,
    run_event,
    step_report,
    wall_ms,
)
from bench.fleet_watch_parts import Lag, Projection, Status
from bench.reportkeys import ReportKeys
from controller.spec.runspec import RunSpec, run_id_for
from events.codec import Codec
from events.kafka.clients import EventProducer
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    GenerationStarted,
    Header,
    HeartbeatRecorded,
    Member,
    MemberBeat,
    MembersHeartbeatRecorded,
    MembershipConfirmed,
    NodeLost,
    RunSubmitted,
    StepCommitted,
    WriteRejected,
    node_key,
)
from events.topics import REQUESTS, RUNS

SLOTS = 8


@dataclass(frozen=True)
class Pace:
    """How often a fleet speaks, and how long the controller waits for it."""

    interval_s: float  # every agent's heartbeat and every member's (the spec's interval_s)
    timeout_s: float  # the spec's heartbeat timeout
    silence_s: float  # the controller's --node-silence-s: three intervals or more


# The spec's default interval, the agents' default silence window.
PACE = Pace(interval_s=1.0, timeout_s=10.0, silence_s=6.0)
# A fleet over LARGE ranks (12,500 nodes at 10^5) cannot report every second to one
# controller on this machine (2 records per node per interval at about 300 us of
# controller CPU each: 25,000 records/s would need 8 cores). At a 10 s interval
# (2,500 records/s) the controller absorbed about 1,900/s beside the fleet and the
# broker on 2 cores, and fell behind; at 20 s its agents and members offer 1,250/s,
# and the controller waits three intervals for a silent node.
LARGE = 16_384
SLOW = Pace(interval_s=20.0, timeout_s=60.0, silence_s=60.0)


def pace_for(ranks: int) -> Pace:
    return PACE if ranks <= LARGE else SLOW
LIMIT_S = 900.0  # one fleet, from its registration to the next generation
STEP_EVERY_S = 0.1  # the coordinator's StepCommitted reports, timed to their facts
PRINCIPAL = "alice"


@dataclass
class Watch:
    """Our run's facts as the fleet sees them on ``runledger.runs``."""

    codec: Codec
    run_id: str
    lat: Latencies
    members: tuple[Member, ...] = ()
    generation: int = 0
    facts: Counter[str] = field(default_factory=Counter)
    rejections: list[str] = field(default_factory=list)
    started: dict[int, float] = field(default_factory=dict)  # generation -> wall s seen
    confirmed: threading.Event = field(default_factory=threading.Event)
    lost_at: float | None = None
    lost_node: str | None = None

    def on_message(self, msg: Message, at: float) -> None:
        event = run_event(self.codec, self.run_id, msg)
        if event is None:
            return
        self.facts[event.event_type] += 1
        now = time.time()
        match event:
            case StepCommitted():
                self.lat.arrived(event.header.event_id, at)
            case GenerationStarted():
                self.members, self.generation = event.members, event.generation
                self.started[event.generation] = now
            case MembershipConfirmed():
                self.confirmed.set()
            case NodeLost():
                self.lost_at, self.lost_node = now, event.node
            case WriteRejected():
                if len(self.rejections) < 20:
                    self.rejections.append(f"{event.rejected_event_type}: {event.reason}")


def spec_for(name: str, ranks: int, domain: str, pace: Pace = PACE) -> RunSpec:
    return RunSpec.model_validate({
        "name": name, "code_version": "3f1c2a9b7d4e5f60718293a4b5c6d7e8f9012345",
        "command": [sys.executable, "-c", "pass"], "model": {"arch": "bench"},
        "dataset": "sha256:" + "ab" * 32,
        # Its own domain: the fleets before it on the same broker are not placed on.
        "topology": {"replicas": ranks, "slots_per_node": SLOTS, "domain": domain},
        "resume": "exact",
        "rpo_s": 600, "rto_s": 300, "cancel_authority": [PRINCIPAL],
        "heartbeat": {"interval_s": pace.interval_s, "timeout_s": pace.timeout_s,
                      "stall_timeout_s": 600.0},
        # A lost node is infrastructure: restart at once, on the spare.
        "retry": {"default": {"attempts": 5, "backoff_base_s": 0.0, "backoff_cap_s": 0.0,
                              "escalate_after": 5}},
        "checkpoint": {"policy": "fixed", "interval_steps": 1_000_000}})


def fleet(bootstrap: str, keys: ReportKeys, codec: Codec, ranks: int, mode: str,
          steady_s: float, env: dict[str, str], controller_key: Path | None,
          pace: Pace | None = None) -> dict[str, Any]:
    """One fleet of ``ranks`` ranks in ``mode`` (``aggregated`` or ``per-rank``), at
    ``pace`` (by default :func:`pace_for` its size)."""
    tag = uuid.uuid4().hex[:8]
    nodes = [f"s{tag}-{i:05d}" for i in range(ranks // SLOTS + 1)]
    enroll_started = keys.enroll_s
    keys.enroll(nodes)  # before the clock starts: a fleet's keys predate its run
    enroll_s = keys.enroll_s - enroll_started
    domain = f"fleet-{tag}"
    pace = pace or pace_for(ranks)
    steady_s = max(steady_s, 3 * pace.interval_s)
    spec = spec_for(f"scale-{tag}", ranks, domain, pace)
    run_id = run_id_for(spec, PRINCIPAL, f"scale-{tag}")
    lat = Latencies(expected=1 << 30)
    watch = Watch(codec, run_id, lat)
    facts = Reader(bootstrap, RUNS, watch.on_message, f"scale-facts-{tag}")
    facts.start()
    group = f"scale-ctl-{tag}"
    signing = ["--signing-key", str(controller_key)] if controller_key else ["--unsigned"]
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"runledger-scale-{tag}.log"
    # One line per round: whether the fleet keeps its pace, the lag, the facts so far.
    progress = log_path.with_suffix(".fleet.log").open("w")
    with log_path.open("wb") as log:
        ctl = subprocess.Popen(
            [sys.executable, "-m", "runledger.cli", "controller", "--bootstrap", bootstrap,
             "--transactional-id", f"scale-ctl-{tag}", "--group", group,
             "--trust-unsigned", "--node-silence-s", str(pace.silence_s), *signing],
            cwd=REPO_ROOT, env=env, stdout=log,
            stderr=subprocess.STDOUT)
    lag = Lag(bootstrap, group)
    projection = Projection(env, log_path.with_suffix(".duckdb"),
                            log_path.with_suffix(".projector.log"))
    producer = EventProducer(bootstrap, client_id=f"scale-{tag}", codec=codec,
                             config=PRODUCER_SETTINGS)
    seq = Counter[str]()
    offered = [0]

    def header(run: str, gen: int, producer_id: str, what: str) -> Header:
        seq[what] += 1
        return Header(f"{run}/{what}/{seq[what]}", run, gen, wall_ms(), producer_id)

    def agent_beat(node: str) -> None:
        keys.send(producer, AgentHeartbeatRecorded(
            header=header(node_key(node), 0, f"agent/{node}", f"hb-{node}"), node=node,
            slots=SLOTS, domain=domain, busy_slots=SLOTS))
        offered[0] += 1

    def member_beats(node: str, on: list[Member], gen: int) -> None:
        if mode == "aggregated":
            keys.send(producer, MembersHeartbeatRecorded(
                header=header(run_id, gen, f"agent/{node}", f"beats-{node}"), node=node,
                beats=tuple(MemberBeat(m.logical_id, 0) for m in on)))
            offered[0] += 1
            return
        for m in on:
            keys.send(producer, HeartbeatRecorded(
                header=header(run_id, gen, f"worker/{run_id}/{m.logical_id}",
                              f"hb-{m.logical_id}"), logical_id=m.logical_id, node=node,
                step=0))
            offered[0] += 1

    status = Status(run_id, env)
    started = time.monotonic()
    confirmed_at: float | None = None
    try:
        for node in nodes:
            keys.send(producer, AgentRegistered(
                header=header(node_key(node), 0, f"agent/{node}", f"reg-{node}"), node=node,
                slots=SLOTS, domain=domain))
        at = wall_ms()
        producer.send(REQUESTS, RunSubmitted(
            header=Header(f"{run_id}/submitted", run_id, 0, at, f"cli/{PRINCIPAL}"),
            spec_digest=spec.digest(), spec_json=spec.canonical_json(), principal=PRINCIPAL,
            world_size=spec.world_size, dataset_id=spec.dataset))
        producer.flush()
        lag.start()
        dead: str | None = None
        died_at = 0.0
        steady_end: float | None = None
        cpu0 = proc_cpu_s(ctl.pid)
        cpu_window: tuple[float, float] | None = None
        cpu_steady = float("nan")
        next_step = time.monotonic()
        step = 0
        victim, last_word = nodes[len(nodes) // 2], 0.0
        rounds: list[float] = []  # how long each round took to speak for every node

        def until(due: float, gen: int, members: tuple[Member, ...]) -> None:
            """Send the coordinator's steps as they fall due, up to ``due``."""
            nonlocal step, next_step
            while True:
                now = time.monotonic()
                stepping = watch.confirmed.is_set() and gen > 0
                if stepping and now >= next_step:
                    step += 1
                    event = step_report(run_id, gen, step, tag)
                    lat.sent[event.header.event_id] = time.perf_counter()
                    keys.send(producer, event, members[0].node)
                    next_step = max(next_step + STEP_EVERY_S, now - STEP_EVERY_S)
                if now >= due:
                    return
                producer.poll(0)
                wait = min(due - now, STEP_EVERY_S)
                time.sleep(min(wait, max(0.001, next_step - now)) if stepping else wait)

        while True:
            round_start = time.monotonic()
            gen, members = watch.generation, watch.members
            by_node: dict[str, list[Member]] = {}
            for m in members:
                by_node.setdefault(m.node, []).append(m)

            # Spread over the interval, as agents that started apart report.
            for i, node in enumerate(nodes):
                until(round_start + pace.interval_s * i / len(nodes), gen, members)
                if node == dead:
                    continue
                agent_beat(node)
                if gen and node in by_node:
                    member_beats(node, by_node[node], gen)
                if node == victim:
                    last_word = time.time()  # detection counts from here
            rounds.append(time.monotonic() - round_start)
            progress.write(f"{time.time():.1f} generation {gen} confirmed "
                           f"{watch.confirmed.is_set()} spoke in {rounds[-1]:.2f} s, lag "
                           f"{lag.samples[-1][1] if lag.samples else '-'}, facts "
                           f"{dict(watch.facts)}\n")
            progress.flush()
            until(round_start + pace.interval_s, gen, members)
            producer.poll(0)
            now = time.monotonic()
            if watch.confirmed.is_set() and steady_end is None:
                confirmed_at = now
                steady_end = now + steady_s
                cpu_window = (now, proc_cpu_s(ctl.pid))
                status.start()  # beside the fleet: the round must keep its pace
            if steady_end is not None and now >= steady_end and dead is None:
                cpu_steady = (proc_cpu_s(ctl.pid) - cpu_window[1]) / (now - cpu_window[0]) \
                    if cpu_window else float("nan")
                dead = victim
                died_at = last_word
            if dead is not None and (2 in watch.started
                                     or time.time() - died_at > 60 + 4 * pace.timeout_s):
                break
            if now - started > LIMIT_S:
                raise RuntimeError(f"{run_id}: the fleet did not finish in {LIMIT_S:g} s "
                                   f"(facts {dict(watch.facts)})")
        producer.flush(10)
    finally:
        lag.stop.set()
        lag.join(15)
        cpu_total = proc_cpu_s(ctl.pid) - cpu0 if ctl.poll() is None else float("nan")
        hwm = proc_hwm_mb(ctl.pid) if ctl.poll() is None else float("nan")
        ctl.terminate()
        try:
            ctl.wait(30)
        except subprocess.TimeoutExpired:
            ctl.kill()
        facts.stop.set()
        facts.join(10)
        progress.close()
        if status.is_alive():
            status.join(120)
        projected = projection.stop(confirmed_at)
    elapsed = time.monotonic() - started
    # From the run's confirmation on: a new controller group first reads the reports
    # the fleets before it left on the broker, which is no lag of this fleet's.
    lags = [n for at, n in lag.samples if confirmed_at is not None and at >= confirmed_at]
    half = lags[len(lags) // 2:]
    measured = [k for k in lat.sent]
    latency = lat.summary(measured[20:])  # the first 20 warm the path
    return {
        "ranks": ranks, "nodes": len(nodes) - 1, "mode": mode, "run_id": run_id,
        "enroll_s": enroll_s, "elapsed_s": elapsed,
        "offered_per_s": offered[0] / elapsed,
        "controller_cpu_share_steady": cpu_steady,
        "controller_cpu_s": cpu_total, "controller_peak_rss_mb": hwm,
        "lag_p50": percentile(lags, 50) if lags else None,
        "lag_p99": percentile(lags, 99) if lags else None,
        "lag_last_half_max": max(half) if half else None,
        "report_to_fact": latency,
        "lost_node": dead, "named_lost": watch.lost_node,
        "detected_s": None if watch.lost_at is None else watch.lost_at - died_at,
        "heartbeat_timeout_s": pace.timeout_s, "interval_s": pace.interval_s,
        "node_silence_s": pace.silence_s,
        "next_generation_s": (None if watch.lost_at is None or 2 not in watch.started
                              else watch.started[2] - watch.lost_at),
        "status_s": status.took_s, "status_members": status.members,
        "fleet_round_s_p50": percentile(rounds, 50) if rounds else None,
        "fleet_round_s_max": max(rounds) if rounds else None,
        "facts": dict(watch.facts), "rejections": watch.rejections,
        "controller_log": str(log_path), "fleet_log": str(log_path.with_suffix(".fleet.log")),
        **projected,
    }
