"""Benchmark: the controller's pure core over a big log, and report -> fact latency on a broker.

Usage: ``.venv/bin/python bench/controller.py [--quick] [--bootstrap HOST:PORT] [--profile]``

1. Fold+plan throughput. A synthetic, valid log of 10^6 events for 1,000 runs
   (``--quick``: 10^5 / 100), interleaved by time like a real log: per run a
   ``RunSubmitted`` carrying a real spec (``examples/run.yaml``, renamed, world
   size 1..4), for 30% of runs a ``RunQueued`` and a wait, ``RunAdmitted``,
   ``GenerationStarted``, ``MembershipConfirmed``, then heartbeats from every
   member and a ``StepCommitted`` per second, a checkpoint (``ShardWritten`` per
   member, ``ManifestProposed``, ``ManifestCommitted``) every 50 steps, for some
   runs a crash (``WorkerExited`` + ``FailureClassified``, then after the backoff
   ``GenerationStarted`` resuming from the latest checkpoint +
   ``MembershipConfirmed``), and at the end every member exits 0 and
   ``RunFinished``. Encoded once; then, one pass each over the same bytes:

   a. baseline: ``Codec.decode`` of every record, nothing else;
   b. decode + ``events.fold.apply`` per run (what a projector or auditor does);
   c. decode + the controller core as the service loop drives it: facts through
      ``model.Draft.absorb``, requests and reports through ``reconcile.handle``
      (plans from ``plan_from_submission``), and ``reconcile.tick`` every 1,000
      events with the log's own time as ``now``. A fact the core has already
      appended itself (the ``ManifestCommitted`` for a proposal it handled, same
      event id) is not absorbed a second time.

   Accepted/rejected counts are printed so it is visible that the work is real.
2. The core with many finished runs (``bench/controller_parts.py``): the cost
   per report and per tick with 0 .. 10^5 finished runs in the model; a core
   that touches finished runs per event or per tick shows it here.
3. Report -> fact latency. A throwaway single-broker stack
   (``runledger.stack.Stack`` in a temporary directory, purged at the end;
   ``--bootstrap`` uses an existing cluster instead) and a ``ControllerService``
   in a thread. One run is submitted, an agent registers, the members heartbeat
   until the run is Running, then ``StepCommitted`` reports go out at a steady
   rate through ``EventProducer``; each one's latency is from just before the
   produce call to the moment its copy (same ``event_id``) is readable on
   ``runledger.runs`` by a ``read_committed`` consumer. Baseline, same run: the
   same bytes at the same rate through a plain producer to a fresh topic, read
   back by a plain consumer with the same settings: one hop, no controller, no
   transaction. The controller signs every fact and command with a key made
   for the run (one Ed25519 signature each); ``--unsigned`` runs it without.

Ratios are runledger / baseline from this run (events/s: 1.00 = as fast, lower
is slower; latency: how many times the baseline's). Nothing asserts on a
timing. Results go to ``bench/results/controller.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import gc
import heapq
import io
import logging
import os
import pstats
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path, where bench/events.py
    # would shadow the ``events`` package; use the repository root instead.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import fastavro
import yaml
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from bench.common import (
    REPO_ROOT,
    fmt_num,
    machine_info,
    percentile,
    print_table,
    ratio,
    time_once,
    write_results,
)
from bench.controller_parts import finished_section
from bench.reportkeys import ReportKeys
from controller.emitter import Out
from controller.model import Draft, Model
from controller.reconcile import handle, tick
from controller.runplan import plan_from_submission
from controller.service import ControllerService
from controller.spec.runspec import RunSpec, run_id_for
from events.codec import MAGIC, Codec, default_codec
from events.convert import to_record
from events.fold import apply
from events.kafka.broker import check_broker
from events.kafka.clients import EventProducer
from events.kafka.connection import ENV_CREDENTIALS, client_config
from events.model import (
    EVENT_TYPES,
    AgentHeartbeatRecorded,
    AgentRegistered,
    Event,
    FailureClassified,
    GenerationStarted,
    Header,
    HeartbeatRecorded,
    ManifestCommitted,
    ManifestProposed,
    Member,
    MembershipConfirmed,
    RunAdmitted,
    RunFinished,
    RunQueued,
    RunSubmitted,
    ShardWritten,
    StepCommitted,
    WorkerExited,
    WriteRejected,
    node_key,
)
from events.placement import deflate
from events.signed.signing import SigningKey
from events.state import RunState
from events.topics import REPORTS, REQUESTS, RUNS, TopicSpec, replication_for, topic_specs
from runledger.stack import Stack
from runledger.stack.admin import admin_client, ensure_topics

NAME = "controller"
SEED = 20240607
T0_MS = 1_700_000_000_000
SPEC_FILE = REPO_ROOT / "examples" / "run.yaml"
PRINCIPAL = "alice"
WORLD_SIZES = (1, 2, 2, 2, 4)  # drawn per run
NODES = 128  # node pool the synthetic placements use
CHECKPOINT_EVERY = 50  # steps
STEP_MS = 1_000  # one optimizer step (and one heartbeat per member) per second
CRASH_BACKOFF_MS = 2_000  # doubled per attempt, like the spec's retry policy
QUEUED_SHARE = 0.3  # runs that wait in the queue (10 s .. 2 min) before admission
START_SPREAD_MS_PER_RUN = 1_800  # runs start spread over runs x 1.8 s of log time
TICK_EVERY = 1_000  # events between reconcile ticks in path (c)
# A pass over the log is one sample; the log is large enough for a stable rate.
FACT_TYPES = tuple(cls for cls in EVENT_TYPES.values() if cls.TOPIC == RUNS)

# Latency: the producer settings of EventProducer, given to the raw side as well.
PRODUCER_SETTINGS: dict[str, Any] = {"acks": "all", "enable.idempotence": True, "linger.ms": 5}
# The fact reader's and the raw reader's settings (librdkafka defaults otherwise).
READER_SETTINGS: dict[str, Any] = {"enable.auto.commit": False,
                                   "isolation.level": "read_committed"}
TICK_S = 0.25  # the controller's poll/tick interval: `runledger controller --tick` default
HEARTBEAT_S = 1.0  # the spec's heartbeat interval: members heartbeat while steps go out
WARMUP_REPORTS = 20  # sent at the same rate before the measured ones, not counted
ARRIVAL_WAIT_S = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class Mode:
    runs: int
    events: int
    reports: int  # StepCommitted reports in the latency section
    rate_per_s: float
    repeats: int  # passes per path in section 1


FULL = Mode(runs=1_000, events=1_000_000, reports=2_000, rate_per_s=200.0, repeats=1)
QUICK = Mode(runs=100, events=100_000, reports=300, rate_per_s=200.0, repeats=2)


# --- the synthetic log ----------------------------------------------------------


def base_spec() -> dict[str, Any]:
    data = yaml.safe_load(SPEC_FILE.read_text("utf-8"))
    if not isinstance(data, dict):
        raise RuntimeError(f"{SPEC_FILE} is not a mapping")
    return data


def make_spec(base: dict[str, Any], name: str, world_size: int, domain: str) -> RunSpec:
    """``examples/run.yaml`` renamed, with ``world_size`` replicas in ``domain``, validated."""
    data = {**base, "name": name, "membership": {"kind": "fixed"},
            "topology": {"replicas": world_size, "slots_per_node": 2, "domain": domain}}
    return RunSpec.model_validate(data)


def submission(spec: RunSpec, submission_id: str, at_ms: int) -> RunSubmitted:
    """The ``RunSubmitted`` that ``runledger submit`` would write for ``spec``."""
    run_id = run_id_for(spec, PRINCIPAL, submission_id)
    return RunSubmitted(
        header=Header(f"{run_id}/submitted", run_id, 0, at_ms, f"cli/{PRINCIPAL}"),
        spec_digest=spec.digest(), spec_json=spec.canonical_json(), principal=PRINCIPAL,
        world_size=spec.world_size, dataset_id=spec.dataset)


@dataclasses.dataclass(frozen=True, slots=True)
class RunShape:
    index: int
    submitted: RunSubmitted
    members: tuple[Member, ...]
    start_ms: int
    budget: int  # events this run contributes to the log
    crash_steps: tuple[int, ...]  # a worker is killed after these steps
    queued_ms: int  # time in the queue before admission (0: admitted at once)
    seed: int


def shapes(mode: Mode) -> list[RunShape]:
    rng = random.Random(SEED)
    base = base_spec()
    per_run, extra = divmod(mode.events, mode.runs)
    spread = mode.runs * START_SPREAD_MS_PER_RUN
    specs: dict[int, RunSpec] = {}
    out = []
    for i in range(mode.runs):
        ws = rng.choice(WORLD_SIZES)
        # One validated spec per world size, renamed per run (renaming keeps it valid).
        template = specs.get(ws) or specs.setdefault(ws, make_spec(base, "bench", ws, "rack-1"))
        spec = template.model_copy(update={"name": f"bench-{i:05d}"})
        start = T0_MS + rng.randrange(spread)
        first = (i * 2) % NODES
        members = tuple(Member(f"r{j}", f"node-{(first + j // 2) % NODES:03d}", j % 2, "rack-1")
                        for j in range(ws))
        roll = rng.random()
        steps = per_run // (ws + 1)  # a rough length, to place crashes inside the run
        crashes: tuple[int, ...] = ()
        if roll < 0.05:
            crashes = tuple(sorted(rng.sample(range(20, max(21, steps - 20)), 2)))
        elif roll < 0.30:
            crashes = (rng.randrange(20, max(21, steps - 20)),)
        queued = rng.randrange(10_000, 120_000) if rng.random() < QUEUED_SHARE else 0
        out.append(RunShape(i, submission(spec, f"bench-{SEED}-{i}", start), members, start,
                            per_run + (1 if i < extra else 0), crashes, queued,
                            rng.getrandbits(32)))
    return out


Stamped = tuple[int, int, int, Event]  # (occurred_at, run index, sequence, event)


def run_events(shape: RunShape) -> Iterator[Stamped]:
    """One run's events in time order, exactly ``shape.budget`` of them.

    Events that must not be split by a reconcile tick (a decision and the facts
    that carry it out) share one timestamp; path (c) ticks only when time moves.
    """
    rng = random.Random(shape.seed)
    sub = shape.submitted
    run_id, members, ws = sub.run_id, shape.members, len(shape.members)
    seq = 0
    emitted = 0

    def stamp(at: int, event: Event) -> Stamped:
        nonlocal seq, emitted
        seq += 1
        emitted += 1
        return (at, shape.index, seq, event)

    def fact(at: int, gen: int, eid: str) -> Header:
        return Header(f"{run_id}/{eid}", run_id, gen, at, "controller")

    def report(at: int, gen: int, lid: str, eid: str) -> Header:
        return Header(f"{run_id}/g{gen}/{lid}/{eid}", run_id, gen, at, f"worker/{run_id}/{lid}")

    t = shape.start_ms
    gen = 1
    yield stamp(t, sub)
    if shape.queued_ms:
        yield stamp(t, RunQueued(header=fact(t, 0, "g0/f0/RunQueued"),
                                 reason=f"needs {ws} slots, 0 free in domain 'rack-1'"))
        t += shape.queued_ms
    yield stamp(t, RunAdmitted(header=fact(t, 0, "g1/RunAdmitted"), members=members))
    yield stamp(t, GenerationStarted(header=fact(t, 1, "g1/GenerationStarted"), members=members,
                                     reason="admitted"))
    yield stamp(t, MembershipConfirmed(header=fact(t, 1, "g1/MembershipConfirmed"),
                                       members_joined=ws))
    end_size = ws + 1
    step = checkpoint = 0
    manifest: str | None = None
    failures = 0
    crashes = list(shape.crash_steps)
    while True:
        t += STEP_MS + rng.randrange(50)
        for j, m in enumerate(members):
            if shape.budget - emitted <= end_size:
                break
            yield stamp(t + j, HeartbeatRecorded(header=report(t + j, gen, m.logical_id,
                                                               f"hb/{step}"),
                                                 logical_id=m.logical_id, node=m.node, step=step))
        if shape.budget - emitted <= end_size:
            break
        step += 1
        at = t + 400 + rng.randrange(100)
        yield stamp(at, StepCommitted(
            header=report(at, gen, "r0", f"step/{step}"), step=step,
            tokens=65_536, loss_tokens=60_000 + rng.randrange(4096),
            step_time_ms=900.0 + rng.random() * 100, input_wait_ms=rng.random() * 5,
            loss=2.0 + rng.random()))
        if step % CHECKPOINT_EVERY == 0 and shape.budget - emitted > end_size + ws + 2:
            at += 100
            path = f"file:///ckpt/{run_id}/g{gen}/s{step}"
            for j, m in enumerate(members):
                yield stamp(at + j, ShardWritten(
                    header=report(at + j, gen, m.logical_id, f"shard/{step}"), step=step,
                    logical_id=m.logical_id, path=f"{path}/__{j}_0.distcp",
                    bytes=50_000_000 + rng.randrange(1_000_000), crc32c=rng.getrandbits(32)))
            at += ws + 10
            proposal = ManifestProposed(
                header=report(at, gen, "r0", f"manifest/{step}"), step=step,
                manifest_path=f"{path}/manifest.json",
                manifest_digest=f"sha256:{rng.getrandbits(256):064x}", dataset_id=sub.dataset_id)
            yield stamp(at, proposal)
            # The controller's acceptance, with the id reconcile gives it.
            pid = proposal.header.event_id
            yield stamp(at, ManifestCommitted(
                header=Header(f"{pid}/ManifestCommitted", run_id, gen, at, "controller", pid),
                step=step, manifest_path=proposal.manifest_path,
                manifest_digest=proposal.manifest_digest))
            checkpoint, manifest = step, proposal.manifest_path
        if crashes and step >= crashes[0] and shape.budget - emitted > end_size + 4:
            crashes.pop(0)
            failures += 1
            victim = members[-1]
            at = t + 700
            backoff = CRASH_BACKOFF_MS * 2 ** (failures - 1)
            yield stamp(at, WorkerExited(header=report(at, gen, victim.logical_id, "exit"),
                                         logical_id=victim.logical_id, node=victim.node,
                                         signal=9))
            yield stamp(at, FailureClassified(
                header=fact(at, gen, f"g{gen}/FailureClassified"), failure_class="worker_crash",
                signature="worker_crash:signal=9", action="restart", attempt=failures,
                detail=f"{victim.logical_id} on {victim.node} killed by signal 9",
                logical_id=victim.logical_id, node=victim.node, backoff_ms=backoff))
            # The restart comes when the backoff is over, as a separate decision.
            t = at + backoff
            gen += 1
            yield stamp(t, GenerationStarted(header=fact(t, gen, f"g{gen}/GenerationStarted"),
                                             members=members, reason="restart",
                                             resume_step=checkpoint if manifest else None,
                                             resume_manifest=manifest))
            yield stamp(t, MembershipConfirmed(
                header=fact(t, gen, f"g{gen}/MembershipConfirmed"), members_joined=ws))
            step = checkpoint  # training resumes from the latest checkpoint
    t += STEP_MS
    for m in members:
        yield stamp(t, WorkerExited(header=report(t, gen, m.logical_id, "exit"),
                                    logical_id=m.logical_id, node=m.node, exit_code=0))
    yield stamp(t, RunFinished(header=fact(t, gen, "RunFinished"), outcome="succeeded",
                               reason="every member exited 0"))
    if emitted != shape.budget:
        raise RuntimeError(f"run {run_id}: {emitted} events, budget {shape.budget}")


class FastEncoder:
    """``Codec.encode``'s bytes without its per-event validation pass.

    Validation is two thirds of ``Codec.encode`` and would make building the log
    the slowest part of this benchmark. The bytes are the same (the codec's
    writer schema, prefix and record); every type's first event and every 100th
    event go through ``Codec.encode`` and are compared byte for byte.
    """

    CHECK_EVERY = 100

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self.writers = {}
        for name in EVENT_TYPES:
            latest = codec.registry.latest(name)
            self.writers[name] = (MAGIC + latest.fingerprint, latest.parsed, latest.version)
        self.checked: Counter[str] = Counter()
        self.count = 0

    def encode(self, event: Event) -> bytes:
        name = type(event).__name__
        prefix, parsed, version = self.writers[name]
        record = to_record(event)
        record["header"]["schema_version"] = version
        if name in self.codec.packed:  # members as blocks, as Codec.encode writes them
            record = deflate(record)
        buf = io.BytesIO()
        buf.write(prefix)
        fastavro.schemaless_writer(buf, parsed, record)
        data = buf.getvalue()
        self.count += 1
        if name not in self.checked or self.count % self.CHECK_EVERY == 0:
            if self.codec.encode(event) != data:
                raise RuntimeError(f"{name}: these bytes differ from Codec.encode's")
            self.checked[name] += 1
        return data


@dataclasses.dataclass
class Log:
    encoded: list[bytes]
    runs: int
    mix: dict[str, int]
    restarts: int
    build_s: float
    checked_with_codec: int

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.encoded)


def build_log(mode: Mode, codec: Codec) -> Log:
    start = time.perf_counter()
    run_shapes = shapes(mode)
    encoder = FastEncoder(codec)
    encoded: list[bytes] = []
    mix: Counter[str] = Counter()
    # Merge the runs by time: each run's generator stays lazy, so only the bytes are kept.
    for _at, _run, _seq, event in heapq.merge(*(run_events(s) for s in run_shapes)):
        encoded.append(encoder.encode(event))
        mix[event.event_type] += 1
    return Log(encoded, len(run_shapes), dict(mix.most_common()),
               sum(len(s.crash_steps) for s in run_shapes), time.perf_counter() - start,
               sum(encoder.checked.values()))


# --- 1. the three passes --------------------------------------------------------


@dataclasses.dataclass
class PassResult:
    """What one pass did: counts, so a reader can see the work is real."""

    events: int = 0
    accepted: int = 0
    rejected: int = 0
    reasons: Counter[str] = dataclasses.field(default_factory=Counter)
    statuses: Counter[str] = dataclasses.field(default_factory=Counter)
    outputs: Counter[str] = dataclasses.field(default_factory=Counter)
    ticks: int = 0
    own_facts: int = 0  # facts in the log the core had already appended itself

    def to_json(self) -> dict[str, Any]:
        return {"events": self.events, "accepted": self.accepted, "rejected": self.rejected,
                "rejected_by_reason": dict(self.reasons.most_common()),
                "final_status": dict(self.statuses.most_common()),
                "outputs_by_topic_type": dict(self.outputs.most_common()), "ticks": self.ticks,
                "facts_already_appended_by_core": self.own_facts}


def decode_pass(log: Log, codec: Codec) -> PassResult:
    decode = codec.decode
    n = 0
    for data in log.encoded:
        decode(data)
        n += 1
    return PassResult(events=n)


def fold_pass(log: Log, codec: Codec) -> PassResult:
    decode = codec.decode
    states: dict[str, RunState] = {}
    result = PassResult()
    accepted = rejected = 0
    for data in log.encoded:
        event = decode(data).event
        run_id = event.run_id
        transition = apply(states.get(run_id), event)
        if transition.verdict.accepted:
            accepted += 1
            if transition.state is not None:
                states[run_id] = transition.state
        else:
            rejected += 1
            result.reasons[transition.verdict.reason] += 1
    result.events, result.accepted, result.rejected = accepted + rejected, accepted, rejected
    result.statuses.update(s.status.value for s in states.values())
    return result


def core_pass(log: Log, codec: Codec) -> PassResult:
    """The service loop's work without Kafka: absorb facts, handle inputs, tick the clock."""
    decode = codec.decode
    plan_of = plan_from_submission
    result = PassResult()
    outputs = result.outputs
    model: Model | None = None
    last = 0
    since_tick = 0
    accepted = rejected = 0

    own: set[str] = set()  # ids of the facts the core appended itself

    def count(out: list[Out]) -> None:
        for topic, produced in out:
            outputs[f"{topic} {produced.event_type}"] += 1
            if isinstance(produced, FACT_TYPES):
                own.add(produced.header.event_id)

    for data in log.encoded:
        event = decode(data).event
        at = event.header.occurred_at
        if model is None:
            model = Model(since=at)
            last = at
        elif since_tick >= TICK_EVERY and at > last:
            model, out = tick(model, last, plan_of)
            result.ticks += 1
            since_tick = 0
            if out:
                count(out)
        since_tick += 1
        last = at
        if isinstance(event, FACT_TYPES):
            if event.header.event_id in own:
                # The core already appended this very fact (a ManifestCommitted for a
                # proposal it handled); the service never reads its own appends back.
                result.own_facts += 1
                continue
            draft = Draft(model, plan_of)
            verdict = draft.absorb(event)
            if verdict.accepted:
                accepted += 1
            else:
                rejected += 1
                result.reasons[f"fact: {verdict.reason}"] += 1
            model = draft.freeze()
        else:
            model, out = handle(model, event, at, plan_of)
            refused = [e for _, e in out if isinstance(e, WriteRejected)
                       and e.rejected_event_id == event.header.event_id]
            if refused:
                rejected += 1
                result.reasons[f"report: {refused[0].reason}"] += 1
            else:
                accepted += 1
            if out:
                count(out)
    if model is not None:
        model, out = tick(model, last, plan_of)
        result.ticks += 1
        count(out)
        result.statuses.update(s.status.value for s in model.runs.values())
    result.events = accepted + rejected + result.own_facts
    result.accepted, result.rejected = accepted, rejected
    return result


PATHS: dict[str, tuple[str, Callable[[Log, Codec], PassResult]]] = {
    "decode": ("a. bare decode (Codec.decode)", decode_pass),
    "fold": ("b. decode + fold (events.fold.apply)", fold_pass),
    "core": ("c. decode + controller core (absorb/handle/tick)", core_pass),
}


def timed_pass(fn: Callable[[Log, Codec], PassResult], log: Log, codec: Codec
               ) -> tuple[float, PassResult]:
    holder: list[PassResult] = []
    seconds = time_once(lambda: holder.append(fn(log, codec)))
    return seconds, holder[0]


def fold_section(mode: Mode, codec: Codec, profile: bool) -> dict[str, Any]:
    log = build_log(mode, codec)
    n = len(log.encoded)
    size = log.size
    print(f"   built the log in {log.build_s:.1f} s: {n:,} events, {log.runs:,} runs, "
          f"{log.restarts} crash restarts, {size / 1e6:.1f} MB encoded "
          f"({size / n:.1f} B/event); {log.checked_with_codec:,} events checked "
          f"byte-identical to Codec.encode", flush=True)
    samples: dict[str, list[float]] = {key: [] for key in PATHS}
    results: dict[str, PassResult] = {}
    for _ in range(mode.repeats):  # take turns, so a burst of load hits every path alike
        for key, (_label, fn) in PATHS.items():
            seconds, results[key] = timed_pass(fn, log, codec)
            samples[key].append(seconds)
    base_rate = n / min(samples["decode"])
    out: dict[str, Any] = {
        "events": n, "runs": log.runs, "crash_restarts": log.restarts,
        "encoded_bytes": size, "bytes_per_event": size / n, "mix": log.mix,
        "tick_every_events": TICK_EVERY, "repeats": mode.repeats, "build_log_s": log.build_s,
        "paths": {},
    }
    rows = []
    for key, (label, _fn) in PATHS.items():
        best = min(samples[key])
        rate = n / best
        r = results[key]
        out["paths"][key] = {"label": label, "samples_s": samples[key], "best_s": best,
                             "events_per_s": rate, "us_per_event": best / n * 1e6,
                             "ratio_to_decode": ratio(rate, base_rate),
                             "extra_us_per_event": (best - min(samples["decode"])) / n * 1e6,
                             **r.to_json()}
        rows.append([label, fmt_num(rate), f"{best / n * 1e6:.2f}", f"{ratio(rate, base_rate):.2f}",
                     fmt_num(r.accepted) if key != "decode" else "-",
                     fmt_num(r.rejected) if key != "decode" else "-"])
    print_table(
        ["path", "events/s", "us/event", "ratio", "accepted", "rejected"], rows,
        title=f"1. fold+plan: {n:,} events, {log.runs:,} runs, one pass per path "
        f"(best of {mode.repeats}); ratio = events/s / bare decode events/s")
    for key in ("fold", "core"):
        r = results[key]
        reasons = ", ".join(f"{k} {v:,}" for k, v in r.reasons.most_common()) or "none"
        status = ", ".join(f"{k} {v:,}" for k, v in r.statuses.most_common())
        print(f"   {key}: rejected by reason: {reasons}; final status: {status}")
    core = results["core"]
    made = ", ".join(f"{k} {v:,}" for k, v in core.outputs.most_common())
    print(f"   core: {core.ticks:,} ticks; {core.own_facts:,} facts in the log it had appended "
          f"itself (not absorbed again); records it would append: {made}")
    for key in ("fold", "core"):
        if results[key].rejected > n // 100:
            print(f"   WARNING: path {key} rejected {results[key].rejected:,} events: the "
                  "synthetic log no longer follows the fold's rules, so this pass measures "
                  "rejections, not normal work; update run_events()")
    print(flush=True)
    if profile:
        out["profile_top"] = profile_core(log, codec)
    return out


def profile_core(log: Log, codec: Codec, top: int = 25) -> list[dict[str, Any]]:
    """cProfile of path (c); prints and returns the functions with the most own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    core_pass(log, codec)
    profiler.disable()
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream).sort_stats("tottime")
    stats.print_stats(top)
    print("   cProfile of path (c), by own time:")
    print("\n".join("   " + line for line in stream.getvalue().splitlines()[:top + 12]))
    rows = []
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (file, line, func), (_cc, calls, tottime, cumtime, _callers) in sorted(
            raw.items(), key=lambda kv: kv[1][2], reverse=True)[:top]:
        rows.append({"function": f"{Path(file).name}:{line}({func})", "calls": calls,
                     "tottime_s": tottime, "cumtime_s": cumtime})
    return rows


# --- 2. report -> fact latency --------------------------------------------------


def wall_ms() -> int:
    return int(time.time() * 1000)


class Reader(threading.Thread):
    """Reads ``topic`` from the end offsets seen at start, calling ``on_message`` per record."""

    def __init__(self, bootstrap: str, topic: str, on_message: Callable[[Message, float], None],
                 group: str) -> None:
        super().__init__(name=f"reader-{topic}", daemon=True)
        self.on_message = on_message
        self.stop = threading.Event()
        self.error: str | None = None
        self.consumer = Consumer(client_config(bootstrap, {"group.id": group,
                                  **READER_SETTINGS}))
        meta = self.consumer.list_topics(topic, timeout=10).topics[topic]
        start = [TopicPartition(topic, p, self._end(topic, p)) for p in sorted(meta.partitions)]
        self.consumer.assign(start)

    def _end(self, topic: str, partition: int) -> int:
        # Right after start a broker may not have elected every leader yet.
        deadline = time.monotonic() + 30
        while True:
            try:
                _low, high = self.consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=10)
                return int(high)
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                msg = self.consumer.poll(0.05)
                if msg is None:
                    continue
                seen = time.perf_counter()
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF and err.fatal():
                        self.error = err.str()
                        return
                    continue
                self.on_message(msg, seen)
        finally:
            self.consumer.close()


def paced(count: int, rate: float, send: Callable[[int], None]) -> None:
    """Call ``send(i)`` for i in range(count), at ``rate`` calls per second."""
    start = time.perf_counter()
    for i in range(count):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(i)


@dataclasses.dataclass
class Latencies:
    sent: dict[str, float] = dataclasses.field(default_factory=dict)
    seen: dict[str, float] = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    expected: int = 0

    def arrived(self, key: str, at: float) -> None:
        with self.lock:
            if key in self.sent and key not in self.seen:
                self.seen[key] = at
                if len(self.seen) >= self.expected:
                    self.done.set()

    def summary(self, measured: Sequence[str]) -> dict[str, Any]:
        ms = [(self.seen[k] - self.sent[k]) * 1e3 for k in measured if k in self.seen]
        return {"count": len(measured), "arrived": len(ms), "missing": len(measured) - len(ms),
                "p50_ms": percentile(ms, 50), "p90_ms": percentile(ms, 90),
                "p99_ms": percentile(ms, 99), "max_ms": max(ms) if ms else float("nan"),
                "mean_ms": sum(ms) / len(ms) if ms else float("nan"),
                "min_ms": min(ms) if ms else float("nan")}


def step_report(run_id: str, gen: int, step: int, tag: str) -> StepCommitted:
    at = wall_ms()
    return StepCommitted(header=Header(f"{run_id}/g{gen}/bench-{tag}/step/{step}", run_id, gen, at,
                                       f"worker/{run_id}/r0"),
                         step=step, tokens=65_536, loss_tokens=60_000, step_time_ms=5.0,
                         input_wait_ms=0.1, loss=2.5)


def raw_round_trip(bootstrap: str, codec: Codec, mode: Mode, replication: int) -> dict[str, Any]:
    """Baseline: the same report bytes, produced and read back on a fresh topic, no controller."""
    topic = f"bench.controller.raw.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    partitions = next(s.partitions for s in topic_specs(1) if s.name == REPORTS)
    ensure_topics(bootstrap, [TopicSpec(topic, partitions, {})], replication)
    run_id = f"bench-raw-{uuid.uuid4().hex[:8]}"
    total = WARMUP_REPORTS + mode.reports
    # Encoded before the clock starts: the raw side moves bytes only.
    values = [codec.encode(step_report(run_id, 1, i + 1, "raw")) for i in range(total)]
    keys = {v: str(i) for i, v in enumerate(values)}
    lat = Latencies(expected=total)
    headers: list[tuple[str, str | bytes | None]] = [
        ("event_type", b"StepCommitted"), ("schema_version", b"1")]

    def on_message(msg: Message, at: float) -> None:
        key = keys.get(msg.value() or b"")
        if key is not None:
            lat.arrived(key, at)

    reader = Reader(bootstrap, topic, on_message, f"bench-raw-{uuid.uuid4().hex[:8]}")
    reader.start()
    producer = Producer(client_config(bootstrap, {"client.id": "bench-raw",
                         **PRODUCER_SETTINGS}))
    # Warm-up, as the controller path has had: a producer id, connections, and a
    # record the reader has seen, before the paced sends start.
    warm = codec.encode(step_report(run_id, 1, 0, "raw-warmup"))
    keys[warm] = "warmup"
    lat.sent["warmup"] = time.perf_counter()
    producer.produce(topic, value=warm, key=run_id, headers=headers)
    producer.flush(30)
    deadline = time.monotonic() + 30
    while "warmup" not in lat.seen and time.monotonic() < deadline:
        time.sleep(0.01)
    lat.expected += 1

    def send(i: int) -> None:
        lat.sent[str(i)] = time.perf_counter()
        producer.produce(topic, value=values[i], key=run_id, headers=headers)
        producer.poll(0)

    try:
        paced(total, mode.rate_per_s, send)
        producer.flush(30)
        lat.done.wait(ARRIVAL_WAIT_S)
    finally:
        reader.stop.set()
        reader.join(10)
        with contextlib.suppress(Exception):
            admin_client(bootstrap).delete_topics([topic], operation_timeout=30)[topic].result(30)
    return {"topic": topic, **lat.summary([str(i) for i in range(WARMUP_REPORTS, total)])}


def run_event(codec: Codec, run_id: str, msg: Message) -> Event | None:
    """The fact in ``msg`` when it is ``run_id``'s (keyed by it), else None."""
    key = msg.key()
    if (key.decode() if isinstance(key, bytes) else key) != run_id:
        return None
    return codec.decode(msg.value() or b"").event


class RunWatch:
    """Follows our run's facts on ``runledger.runs``: generation, confirmations, step copies."""

    def __init__(self, codec: Codec, run_id: str, lat: Latencies) -> None:
        self.codec, self.run_id, self.lat = codec, run_id, lat
        self.generation = 0
        self.members: tuple[Member, ...] = ()
        self.started = threading.Event()
        self.confirmed = threading.Event()
        self.finished = threading.Event()
        self.facts: Counter[str] = Counter()
        self.rejections: list[str] = []

    def on_message(self, msg: Message, at: float) -> None:
        event = run_event(self.codec, self.run_id, msg)
        if event is None:
            return
        self.facts[event.event_type] += 1
        match event:
            case StepCommitted():
                self.lat.arrived(event.header.event_id, at)
            case GenerationStarted():
                self.generation, self.members = event.generation, event.members
                self.started.set()
            case MembershipConfirmed():
                self.confirmed.set()
            case RunFinished():
                self.finished.set()
            case WriteRejected():
                self.rejections.append(f"{event.rejected_event_type}: {event.reason}")


def controller_round_trip(bootstrap: str, codec: Codec, mode: Mode, keys: ReportKeys,
                          signed: bool = True) -> dict[str, Any]:
    """Reports through a ControllerService to ``runledger.runs``, timed per report; each
    report signed as its real sender signs it (``keys``), inside the timed path."""
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    node = f"bench-node-{tag}"
    spec = make_spec(base_spec(), f"bench-latency-{tag}", 2, f"bench-{tag}")
    sub = submission(spec, f"bench-latency-{tag}", wall_ms())
    run_id = sub.run_id
    total = WARMUP_REPORTS + mode.reports
    lat = Latencies(expected=total)
    watch = RunWatch(codec, run_id, lat)
    reader = Reader(bootstrap, RUNS, watch.on_message, f"bench-facts-{tag}")
    reader.start()
    stop = threading.Event()
    exit_code: list[int] = []

    def run_controller() -> None:
        service = ControllerService(bootstrap, plan_from_submission,
                                    transactional_id=f"bench-controller-{tag}",
                                    group_id=f"bench-controller-{tag}", tick_s=TICK_S,
                                    signing_key=SigningKey.generate() if signed else None,
                                    # Its submission is written by hand, unsigned: the bench
                                    # times the report path, not request signatures.
                                    require_signatures=False)
        exit_code.append(service.run(stop))

    thread = threading.Thread(target=run_controller, name="controller", daemon=True)
    producer = EventProducer(bootstrap, client_id="bench-reports", codec=codec,
                             config=PRODUCER_SETTINGS)
    beating = threading.Event()
    n = [0]

    def agent(cls: type[AgentRegistered] | type[AgentHeartbeatRecorded]) -> None:
        n[0] += 1
        h = Header(f"{node_key(node)}/{cls.__name__}/{n[0]}", node_key(node), 0, wall_ms(),
                   f"agent/{node}")
        if cls is AgentRegistered:
            keys.send(producer, AgentRegistered(header=h, node=node, slots=2,
                                                domain=f"bench-{tag}"))
        else:
            keys.send(producer, AgentHeartbeatRecorded(header=h, node=node, slots=2,
                                                       domain=f"bench-{tag}", busy_slots=2))

    def heartbeats() -> None:
        beat = 0
        while beating.is_set():
            beat += 1
            gen = watch.generation
            for m in watch.members:
                h = Header(f"{run_id}/g{gen}/{m.logical_id}/hb/{beat}", run_id, gen, wall_ms(),
                           f"worker/{run_id}/{m.logical_id}")
                keys.send(producer, HeartbeatRecorded(header=h, logical_id=m.logical_id,
                                                      node=m.node, step=0))
            if beat % 5 == 0:
                agent(AgentHeartbeatRecorded)
            producer.poll(0)
            time.sleep(HEARTBEAT_S)

    setup_start = time.perf_counter()
    beater = threading.Thread(target=heartbeats, name="heartbeats", daemon=True)
    try:
        thread.start()
        agent(AgentRegistered)
        producer.send(REQUESTS, sub)
        producer.flush()
        if not watch.started.wait(60):
            raise RuntimeError(f"no GenerationStarted for {run_id} within 60 s "
                               f"(controller exit {exit_code}, facts {dict(watch.facts)})")
        beating.set()
        beater.start()
        if not watch.confirmed.wait(30):
            raise RuntimeError(f"{run_id} not Running within 30 s (facts {dict(watch.facts)})")
        setup_s = time.perf_counter() - setup_start
        gen = watch.generation
        reports = [step_report(run_id, gen, i + 1, tag) for i in range(total)]

        def send(i: int) -> None:
            event = reports[i]
            lat.sent[event.header.event_id] = time.perf_counter()
            keys.send(producer, event, node)
            producer.poll(0)

        paced(total, mode.rate_per_s, send)
        producer.flush()
        lat.done.wait(ARRIVAL_WAIT_S)
        # Let the run finish cleanly: every member exits 0, the controller records success.
        beating.clear()
        for m in watch.members:
            h = Header(f"{run_id}/g{gen}/{m.logical_id}/exit", run_id, gen, wall_ms(),
                       f"worker/{run_id}/{m.logical_id}")
            keys.send(producer, WorkerExited(header=h, logical_id=m.logical_id, node=m.node,
                                             exit_code=0))
        producer.flush()
        watch.finished.wait(10)
    finally:
        beating.clear()
        if beater.is_alive():
            beater.join(5)
        producer.flush(5)
        stop.set()
        thread.join(30)
        reader.stop.set()
        reader.join(10)
        gc.collect()  # drop the service's Kafka clients before the broker goes away
    measured = [e.header.event_id for e in reports[WARMUP_REPORTS:]]
    return {"run_id": run_id, "generation": gen, "setup_s": setup_s,
            "controller_exit": exit_code[0] if exit_code else None,
            "run_finished": watch.finished.is_set(), "facts_seen": dict(watch.facts),
            "rejections": watch.rejections, **lat.summary(measured)}


def latency_section(mode: Mode, codec: Codec, explicit: str | None,
                    signed: bool = True, admin_key: str | None = None) -> dict[str, Any]:
    stack: Any = None
    tmp: tempfile.TemporaryDirectory[str] | None = None
    started = time.perf_counter()
    if explicit:
        bootstrap = explicit
        brokers = check_broker(bootstrap)
        where = f"existing cluster {bootstrap}"
        admin = SigningKey.load(admin_key) if admin_key else None
        print(f"   note: the benchmark controller acts on every run in {bootstrap}'s log; "
              f"use a broker of your own", flush=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="runledger-bench-")
        stack = Stack(Path(tmp.name) / "stack")
        info = stack.up()
        bootstrap = info.bootstrap
        # Its clients (and the controller it starts) act as this stack's admin, not as
        # whatever principal $RUNLEDGER_CREDENTIALS names for another cluster.
        os.environ[ENV_CREDENTIALS] = str(info.credentials or "")
        brokers = 1
        where = f"throwaway stack {bootstrap}"
        admin = SigningKey.load(info.keys / "admin.key") if info.keys else None
    stack_up_s = time.perf_counter() - started
    try:
        raw = raw_round_trip(bootstrap, codec, mode, replication_for(brokers))
        keys = ReportKeys(bootstrap, admin)
        ctl = controller_round_trip(bootstrap, codec, mode, keys, signed)
    finally:
        gc.collect()  # close the section's Kafka clients before their broker goes away
        if stack is not None:
            stack.down(purge=True)
        if tmp is not None:
            tmp.cleanup()
    rows = []
    for label, key in (("p50", "p50_ms"), ("p90", "p90_ms"), ("p99", "p99_ms"),
                       ("max", "max_ms"), ("mean", "mean_ms")):
        rows.append([label, f"{raw[key]:.1f}", f"{ctl[key]:.1f}",
                     f"{ratio(ctl[key], raw[key]):.1f}"])
    rows.append(["arrived", f"{raw['arrived']}/{raw['count']}", f"{ctl['arrived']}/{ctl['count']}",
                 ""])
    print_table(
        ["latency ms", "raw 1 hop", "via controller", "ratio"], rows,
        title=f"3. report -> fact latency on {where}: {mode.reports:,} StepCommitted at "
        f"{mode.rate_per_s:.0f}/s after {WARMUP_REPORTS} warm-up; controller tick_s={TICK_S} "
        f"({'signed' if signed else 'unsigned'}), "
        f"EventProducer linger.ms={PRODUCER_SETTINGS['linger.ms']}; ratio = controller / raw")
    if ctl["rejections"]:
        print(f"   our run had {len(ctl['rejections'])} WriteRejected: {ctl['rejections'][:5]}")
    print(f"   controller run {ctl['run_id']}: Running {ctl['setup_s']:.1f} s after submit, "
          f"finished cleanly: {ctl['run_finished']}; stack up {stack_up_s:.1f} s", flush=True)
    print(flush=True)
    return {"where": where, "bootstrap": bootstrap, "stack_up_s": stack_up_s,
            "tick_s": TICK_S, "signed": signed, "rate_per_s": mode.rate_per_s,
            "warmup_reports": WARMUP_REPORTS,
            "producer_settings": PRODUCER_SETTINGS, "reader_settings": READER_SETTINGS,
            "raw": raw, "controller": ctl,
            "ratio_p50": ratio(ctl["p50_ms"], raw["p50_ms"]),
            "ratio_p99": ratio(ctl["p99_ms"], raw["p99_ms"])}


# --- main ----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10^5 events / 100 runs; 300 reports")
    parser.add_argument("--bootstrap", default=None,
                        help="use this Kafka cluster instead of a throwaway stack (the "
                        "benchmark's controller then acts on every run in its log)")
    parser.add_argument("--admin-key", default=None,
                        help="with --bootstrap: the cluster's admin key, to enroll the "
                        "benchmark's node (a secure cluster refuses unsigned reports)")
    parser.add_argument("--profile", action="store_true",
                        help="also run path (c) under cProfile and print the hot spots")
    parser.add_argument("--skip-latency", action="store_true", help="sections 1 and 2 only")
    parser.add_argument("--unsigned", action="store_true",
                        help="section 3's controller signs nothing (the cost of signing)")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    logging.basicConfig(level=logging.WARNING, format="   %(name)s: %(message)s")

    started = time.perf_counter()
    machine = machine_info(["fastavro", "confluent-kafka", "pydantic", "runledger"])
    print(f"bench/controller.py ({'quick' if args.quick else 'full'}) on "
          f"{machine['usable_cores']} cores, Python {machine['python']}, "
          f"load average {machine['load_average_1_5_15']}")
    print("Shared machine: numbers are noisy; nothing here asserts on a timing.\n", flush=True)
    codec = default_codec()
    results: dict[str, Any] = {
        "benchmark": NAME,
        "mode": "quick" if args.quick else "full",
        "machine": machine,
        "notes": [
            "fold ratio = path events/s / bare Codec.decode events/s over the same bytes, "
            "measured in this run; one pass per path per repeat, best pass reported",
            "path (c) ticks before the first event whose time is past the last tick's "
            f"{TICK_EVERY} events, with now = the log time so far",
            "the log is encoded with the codec's writer schemas; every type's first event "
            "and every 100th event are checked byte-identical to Codec.encode",
            "latency: from just before the produce call to the poll that returns the record "
            "on the reader; the controller path reads runledger.runs read_committed",
            "latency baseline: the same bytes, same producer settings, one hop to a fresh "
            "topic and a plain consumer; no controller, no transaction",
            "shared machine: other engineers run tests at the same time; numbers are noisy",
        ],
    }
    section = time.perf_counter()
    results["fold"] = fold_section(mode, codec, args.profile)
    results["fold"]["elapsed_s"] = time.perf_counter() - section
    section = time.perf_counter()
    template = submission(make_spec(base_spec(), "bench-finished", 2, "rack-1"),
                          "bench-finished", T0_MS)
    results["finished"] = finished_section(template, args.quick, T0_MS)
    results["finished"]["elapsed_s"] = time.perf_counter() - section
    status = 0
    if args.skip_latency:
        results["latency"] = {"skipped": "--skip-latency"}
    else:
        section = time.perf_counter()
        try:
            results["latency"] = latency_section(mode, codec, args.bootstrap,
                                                 signed=not args.unsigned,
                                                 admin_key=args.admin_key)
        except Exception as exc:  # keep section 1's numbers when the broker part fails
            print(f"3. latency: FAILED: {exc!r}", flush=True)
            results["latency"] = {"failed": repr(exc)}
            status = 1
        results["latency"]["elapsed_s"] = time.perf_counter() - section
    results["elapsed_s"] = time.perf_counter() - started
    path = write_results(NAME, results)
    print(f"wrote {path} in {results['elapsed_s']:.0f} s")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
