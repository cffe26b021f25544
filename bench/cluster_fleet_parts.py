"""bench/cluster.py's fleet: many small runs through several real controllers.

Every run is 2 ranks on one node of 8 slots (a node holds 4). Each partition
number *p* of the co-partitioned topics gets its own domain of nodes, and the
runs submitted for it are given run ids that hash onto *p*: the controller that
owns *p* places them on its own nodes, so optimistic admission across
controllers (architecture §7) never makes two owners place on one slot, which
would be a failure of the runs, not of the handover this bench is about.

The fleet speaks the real protocol, signed as the real senders sign: an
operator's key registered on ``runledger.keys`` signs every ``RunSubmitted``
(as ``runledger submit`` does), each node's enrolled key its agent's records,
and a run key its node certified the coordinator's ``StepCommitted``. It reacts
to the facts on ``runledger.runs`` as agents and workers would:

- a history run: on its ``GenerationStarted`` the node reports both members
  alive (``MembersHeartbeatRecorded``); on ``MembershipConfirmed`` the
  coordinator reports one step and both members exit 0 (``WorkerExited``); its
  ``RunFinished`` frees its slots for the next submission;
- a live run: its members are reported alive every interval, and once it is
  confirmed its coordinator reports a step every ``step_every_s``, each timed
  from its send to its fact (report -> fact);
- every node's agent heartbeats every interval.

All of it from one thread (the facts reader's thread only queues what it read),
driven by a heap of due sends, so the orchestrator in ``bench/cluster.py``
decides the phases with :meth:`Fleet.spin`.
"""

from __future__ import annotations

import heapq
import queue
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from bench.controller import PRODUCER_SETTINGS, Latencies, wall_ms
from bench.reportkeys import ReportKeys
from controller.spec.runspec import RunSpec, run_id_for
from events.codec import Codec
from events.kafka.clients import EventProducer, event_headers
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    Header,
    Member,
    MemberBeat,
    MembersHeartbeatRecorded,
    RunSubmitted,
    StepCommitted,
    WorkerExited,
    node_key,
)
from events.partition import partition_for
from events.signed.signing import SigningKey, sign_request
from events.topics import REQUESTS

SLOTS = 8
RANKS = 2  # per run, on one node
PER_NODE = SLOTS // RANKS
PRINCIPAL = "alice"


@dataclass(frozen=True)
class Shape:
    """What one scenario asks for."""

    concurrent: int  # live runs held at once while controllers die and join
    finished: int  # history: runs taken through their whole life first
    partitions: int  # of the co-partitioned topics (6 on a stack)
    interval_s: float = 2.0  # agents' and members' heartbeat (the spec's interval_s)
    timeout_s: float = 30.0  # the spec's heartbeat timeout
    silence_s: float = 10.0  # the controllers' --node-silence-s
    step_every_s: float = 5.0  # each live run's coordinator reports a step this often

    def runs_on(self, partition: int) -> int:
        """Live runs whose ids hash onto ``partition``: the concurrent spread evenly."""
        return len(range(partition, self.concurrent, self.partitions))

    def nodes_on(self, partition: int) -> int:
        """The nodes of ``partition``'s domain: room for its live runs, one node spare."""
        return -(-self.runs_on(partition) // PER_NODE) + 1


def spec_for(name: str, domain: str, shape: Shape) -> RunSpec:
    return RunSpec.model_validate({
        "name": name, "code_version": "3f1c2a9b7d4e5f60718293a4b5c6d7e8f9012345",
        "command": [sys.executable, "-c", "pass"], "model": {"arch": "bench"},
        "dataset": "sha256:" + "ab" * 32,
        "topology": {"replicas": RANKS, "slots_per_node": RANKS, "domain": domain},
        "resume": "exact", "rpo_s": 600, "rto_s": 300, "cancel_authority": [PRINCIPAL],
        "heartbeat": {"interval_s": shape.interval_s, "timeout_s": shape.timeout_s,
                      "stall_timeout_s": 600.0},
        "retry": {"default": {"attempts": 3, "backoff_base_s": 0.0, "backoff_cap_s": 0.0,
                              "escalate_after": 3}},
        "checkpoint": {"policy": "fixed", "interval_steps": 1_000_000}})


@dataclass
class Planned:
    """One run the fleet will submit: its id lands on ``partition``, its nodes' domain."""

    run_id: str
    partition: int
    live: bool
    submission: RunSubmitted
    value: bytes = b""


def plan(shape: Shape, tag: str, codec: Codec) -> list[Planned]:
    """Every run of the scenario, history first.

    One spec per domain (a sweep's runs share theirs); the submission id is varied
    until the run id hashes onto the domain's partition (six tries on average). Each
    is signed at its send, as ``runledger submit`` signs.
    """
    specs = [spec_for(f"cl{tag}-p{p}", f"cl{tag}-p{p}", shape) for p in range(shape.partitions)]
    out: list[Planned] = []
    at = wall_ms()
    for i in range(shape.finished + shape.concurrent):
        p = i % shape.partitions
        spec, k = specs[p], 0
        while partition_for(run_id := run_id_for(spec, PRINCIPAL, f"{tag}-{i}-{k}"),
                            shape.partitions) != p:
            k += 1
        event = RunSubmitted(
            header=Header(f"{run_id}/submitted", run_id, 0, at, f"cli/{PRINCIPAL}"),
            spec_digest=spec.digest(), spec_json=spec.canonical_json(), principal=PRINCIPAL,
            world_size=spec.world_size, dataset_id=spec.dataset)
        out.append(Planned(run_id, p, i >= shape.finished, event, codec.encode(event)))
    return out


@dataclass
class Live:
    """What the fleet knows of one started run."""

    planned: Planned
    generation: int
    node: str
    members: tuple[Member, ...]
    confirmed: bool = False
    step: int = 0


@dataclass
class Fleet:
    shape: Shape
    tag: str
    keys: ReportKeys
    codec: Codec
    operator: SigningKey
    bootstrap: str
    lat: Latencies = field(default_factory=lambda: Latencies(expected=1 << 30))
    inbox: queue.SimpleQueue[tuple[str, str, object]] = field(
        default_factory=queue.SimpleQueue)
    offered: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    # Each says why the fleet cannot go on (a reader died), or None.
    checks: list[Callable[[], str | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.nodes = {p: [f"cl{self.tag}-p{p}-n{i:04d}" for i in range(self.shape.nodes_on(p))]
                      for p in range(self.shape.partitions)}
        self.domain_of = {n: f"cl{self.tag}-p{p}" for p, ns in self.nodes.items() for n in ns}
        self.busy: Counter[str] = Counter()
        self.runs: dict[str, Live] = {}
        self.planned: dict[str, Planned] = {}
        self.todo: list[Planned] = []
        self.in_flight: Counter[int] = Counter()  # history runs per partition not finished
        self.finished: set[str] = set()
        self.due: list[tuple[float, int, str, str]] = []  # (when, seq, kind, key)
        self.seq = 0
        self.stepping = True
        self.producer = EventProducer(self.bootstrap, client_id=f"cluster-{self.tag}",
                                      codec=self.codec, config=PRODUCER_SETTINGS)

    # -- what the facts reader hands over (its thread) ------------------------------------

    def heard(self, kind: str, run_id: str, payload: object) -> None:
        self.inbox.put((kind, run_id, payload))

    # -- sending -------------------------------------------------------------------------

    def _header(self, key: str, gen: int, producer_id: str, what: str) -> Header:
        self.seq += 1
        return Header(f"{key}/{what}/{self.seq}", key, gen, wall_ms(), producer_id)

    def _send(self, event: object, node: str | None = None) -> None:
        self.keys.send(self.producer, event, node)  # type: ignore[arg-type]
        self.offered += 1

    def _later(self, when: float, kind: str, key: str) -> None:
        self.seq += 1
        heapq.heappush(self.due, (when, self.seq, kind, key))

    def register(self) -> None:
        """Enroll every node's key, register its agent; its heartbeats spread over the
        interval, as agents that started apart speak."""
        everyone = [n for ns in self.nodes.values() for n in ns]
        self.keys.enroll(everyone)
        now = time.monotonic()
        for i, node in enumerate(everyone):
            self._send(AgentRegistered(header=self._header(node_key(node), 0, f"agent/{node}",
                                                           "reg"),
                                       node=node, slots=SLOTS, domain=self.domain_of[node]))
            self._later(now + self.shape.interval_s * i / len(everyone), "agent", node)
        self.producer.flush(30)

    def submit(self, runs: list[Planned]) -> None:
        self.todo.extend(runs)
        self.planned.update((r.run_id, r) for r in runs)

    def _submit_due(self) -> None:
        """History runs while their partition's nodes have room; live runs at once."""
        cap = {p: len(ns) * PER_NODE for p, ns in self.nodes.items()}
        keep: list[Planned] = []
        for r in self.todo:
            if not r.live and self.in_flight[r.partition] >= cap[r.partition]:
                keep.append(r)
                continue
            version = self.codec.registry.latest(r.submission.event_type).version
            self.producer.send_bytes(
                REQUESTS, r.run_id, r.value,
                [*event_headers(r.submission, version), *sign_request(self.operator, r.value)])
            self.offered += 1
            if not r.live:
                self.in_flight[r.partition] += 1
        self.todo = keep

    def _beats(self, run: Live) -> None:
        self._send(MembersHeartbeatRecorded(
            header=self._header(run.planned.run_id, run.generation, f"agent/{run.node}",
                                "beats"),
            node=run.node, beats=tuple(MemberBeat(m.logical_id, run.step)
                                       for m in run.members)))

    def _step(self, run: Live) -> None:
        run.step += 1
        rid = run.planned.run_id
        event = StepCommitted(
            header=Header(f"{rid}/g{run.generation}/step/{run.step}", rid, run.generation,
                          wall_ms(), f"worker/{rid}/{run.members[0].logical_id}"),
            step=run.step, tokens=65_536, loss_tokens=60_000, step_time_ms=5.0,
            input_wait_ms=0.1, loss=2.5)
        if run.planned.live:
            self.lat.sent[event.header.event_id] = time.perf_counter()
        self._send(event, run.node)

    # -- reacting ------------------------------------------------------------------------

    def _take(self, kind: str, run_id: str, payload: object) -> None:
        planned = self.planned.get(run_id)
        if planned is None:
            return
        self.counts[kind] += 1
        if kind == "started":
            gen, members = cast(tuple[int, tuple[Member, ...]], payload)
            node = members[0].node
            run = self.runs[run_id] = Live(planned, gen, node, members)
            self.busy[node] += len(members)
            self._beats(run)
            if planned.live:
                self._later(time.monotonic() + self.shape.interval_s, "beats", run_id)
        elif kind == "confirmed" and run_id in self.runs:
            run = self.runs[run_id]
            run.confirmed = True
            if not planned.live:
                self._step(run)
                for m in run.members:
                    self._send(WorkerExited(
                        header=self._header(run_id, run.generation, f"agent/{run.node}",
                                            f"exit-{m.logical_id}"),
                        logical_id=m.logical_id, node=run.node, exit_code=0))
            else:  # the first step at a random phase, as runs that started apart
                phase = (zlib.crc32(run_id.encode()) % 1000) / 1000 * self.shape.step_every_s
                self._later(time.monotonic() + phase, "step", run_id)
        elif kind == "finished":
            self.finished.add(run_id)
            gone = self.runs.pop(run_id, None)
            if gone is not None:
                self.busy[gone.node] -= len(gone.members)
            if not planned.live:
                self.in_flight[planned.partition] -= 1

    def _fire(self, kind: str, key: str, now: float) -> None:
        if kind == "agent":
            self._send(AgentHeartbeatRecorded(
                header=self._header(node_key(key), 0, f"agent/{key}", "hb"), node=key,
                slots=SLOTS, domain=self.domain_of[key], busy_slots=self.busy[key]))
            self._later(now + self.shape.interval_s, kind, key)
            return
        run = self.runs.get(key)
        if run is None:
            return  # finished meanwhile
        if kind == "beats":
            self._beats(run)
            self._later(now + self.shape.interval_s, kind, key)
        elif kind == "step" and self.stepping:
            self._step(run)
            self._later(now + self.shape.step_every_s, kind, key)

    def spin(self, until: Callable[[], bool], limit_s: float, what: str) -> float:
        """Act until ``until()`` holds; the seconds it took. ``RuntimeError`` past ``limit_s``."""
        began = said = time.monotonic()
        while not until():
            now = time.monotonic()
            if now - said >= 15.0:
                said = now
                print(f"     {what}: {now - began:.0f} s, {len(self.finished):,} runs finished, "
                      f"{len(self.runs):,} started, {self.offered:,} records sent", flush=True)
            for check in self.checks:
                if (trouble := check()) is not None:
                    raise RuntimeError(f"{what}: {trouble}")
            if now - began > limit_s:
                raise RuntimeError(f"{what}: not reached in {limit_s:g} s "
                                   f"(fleet saw {dict(self.counts)})")
            while True:
                try:
                    self._take(*self.inbox.get_nowait())
                except queue.Empty:
                    break
            if self.todo:
                self._submit_due()
            while self.due and self.due[0][0] <= now:
                _, _, kind, key = heapq.heappop(self.due)
                self._fire(kind, key, now)
            self.producer.poll(0)
            wait = 0.02 if not self.due else min(0.02, max(0.0, self.due[0][0] - now))
            time.sleep(wait)
        return time.monotonic() - began

    def close(self) -> None:
        self.producer.flush(30)
