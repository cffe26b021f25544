"""Parts of ``bench/projector.py``: the synthetic log, producing it, the consume passes, ETTR.

The log is what a busy cluster leaves on the two projected topics: per run a
``RunSubmitted`` copy, admission and the first generation, then per ~1 s step a
heartbeat from every member and the coordinator's ``StepCommitted`` (on
``runledger.reports``, and the controller's copy of the same bytes on
``runledger.runs``), every 8 steps a ``StepTimesRecorded`` per member, every 50
steps a checkpoint (``CheckpointStaged`` and ``ShardWritten`` reports and their
copies, ``ManifestProposed``, ``ManifestCommitted`` + ``CursorAdvanced`` with
per-source counts), for some runs a crash (``WorkerExited`` + copy,
``FailureClassified``, an alert raised and resolved, a restart from the last
checkpoint with ``CheckpointRestored`` from every member, a late report of the
old generation and its ``WriteRejected``), and at the end every member's exit
and ``RunFinished`` (or ``RunCancelled``; a few runs are still live). Plus a few
corrupt records of every kind the projector must quarantine.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import io
import json
import random
import re
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import fastavro
import yaml
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from bench.common import REPO_ROOT, percentile
from events.codec import MAGIC, Codec
from events.convert import to_record
from events.errors import DecodeError
from events.kafka.clients import decode_message
from events.kafka.connection import client_config
from events.kafka.keys import read_ring_or_empty
from events.kafka.reportdoor import ReportDoor
from events.model import (
    EVENT_TYPES,
    AlertRaised,
    AlertResolved,
    CheckpointRestored,
    CheckpointStaged,
    CursorAdvanced,
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
    RunCancelled,
    RunFinished,
    RunQueued,
    RunSubmitted,
    ShardWritten,
    StepCommitted,
    StepTimesRecorded,
    WorkerExited,
    WriteRejected,
)
from events.placement import deflate
from events.signed.signing import Headers as SignedHeaders
from events.topics import REPORTS, RUNS
from projectors.projector import BATCH, TOPICS
from projectors.tables import rows_for
from queries.runner import sql_text

SEED = 20240611
T0_MS = 1_700_000_000_000
SPEC_FILE = REPO_ROOT / "examples" / "run.yaml"
WORLD_SIZES = (1, 2, 2, 4, 8)  # drawn per typical run
BIG_WORLD_SIZE = 4
NODES = 256
CHECKPOINT_EVERY = 50  # steps
STEP_TIMES_BATCH = 8  # worker.session.STEP_TIMES_BATCH (not imported: it pulls in torch)
GLOBAL_BATCH = 32  # samples per step: the data cursor's unit
TOKENS_PER_STEP = GLOBAL_BATCH * 2048
SOURCES = {"web": 0.6, "code": 0.3, "math": 0.1}
DATASET_ID = "sha256:" + "d" * 64
START_SPREAD_MS_PER_RUN = 1_800
BOTH = (REPORTS, RUNS)  # a report and the controller's copy of the same bytes
ONLY_REPORTS = (REPORTS,)
ONLY_RUNS = (RUNS,)

Headers = list[tuple[str, str | bytes | None]]
# (topic, key, value, headers): one Kafka record, value None for a tombstone.
LogRecord = tuple[str, bytes, bytes | None, Headers]
# (event, its value, the member's node): the headers its real sender signs it with.
Signer = Callable[[Event, bytes, str | None], SignedHeaders]
# (occurred_at, run index, sequence, topics, event): merged across runs by time.
Item = tuple[int, int, int, tuple[str, ...], Event]


# --- the runs ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RunPlan:
    """One run's shape; the generator turns it into events."""

    index: int
    run_id: str
    world_size: int
    start_ms: int
    budget: int | None  # records this run contributes (None: run to ``last_step``)
    last_step: int | None
    crash_steps: tuple[int, ...]
    ending: str  # succeeded | cancelled | live
    queued_ms: int
    seed: int


def _spec_json(name: str) -> str:
    data = yaml.safe_load(SPEC_FILE.read_text("utf-8"))
    if not isinstance(data, dict):
        raise RuntimeError(f"{SPEC_FILE} is not a mapping")
    return json.dumps({**data, "name": name}, sort_keys=True, separators=(",", ":"))


def _records_per_step(ws: int) -> float:
    """Records a step costs on average: heartbeats, the step and its copy, times, checkpoints."""
    return ws + 2 + ws / STEP_TIMES_BATCH + (4 * ws + 8) / CHECKPOINT_EVERY


def end_cost(plan: RunPlan) -> int:
    """Records the run's ending takes: exits (and copies) and the ending fact."""
    return 0 if plan.ending == "live" else 2 * plan.world_size + 1


def step_cost_max(ws: int) -> int:
    """The most records one step can add: step, times, checkpoint and a crash together."""
    return ws + 2 + ws + (4 * ws + 8) + (ws + 12)


def plan_runs(runs: int, big_steps: int) -> list[RunPlan]:
    """Run 0 is the big one (``big_steps`` steps, a crash every ~2,000); budgets come later."""
    rng = random.Random(SEED)
    spread = runs * START_SPREAD_MS_PER_RUN
    crashes = tuple(range(1_970, big_steps - 100, 2_000))
    out = [RunPlan(0, f"bench-big-{SEED}", BIG_WORLD_SIZE, T0_MS, None, big_steps, crashes,
                   "succeeded", 0, rng.getrandbits(32))]
    for i in range(1, runs):
        ws = rng.choice(WORLD_SIZES)
        roll = rng.random()
        ending = "live" if roll < 0.07 else "cancelled" if roll < 0.10 else "succeeded"
        out.append(RunPlan(i, f"bench-{i:05d}-{rng.getrandbits(40):010x}", ws,
                           T0_MS + rng.randrange(spread), 0, None, (), ending,
                           rng.randrange(10_000, 120_000) if rng.random() < 0.3 else 0,
                           rng.getrandbits(32)))
    return out


def with_budgets(plans: list[RunPlan], total: int) -> list[RunPlan]:
    """Typical runs share ``total`` records; crashes are placed inside their expected length."""
    rng = random.Random(SEED + 1)
    typical = plans[1:]
    per_run, extra = divmod(total, len(typical))
    out = [plans[0]]
    for k, p in enumerate(typical):
        budget = per_run + (1 if k < extra else 0)
        steps = int(budget / _records_per_step(p.world_size))
        roll = rng.random()
        crashes: tuple[int, ...] = ()
        if steps > 60 and roll < 0.05:
            crashes = tuple(sorted(rng.sample(range(20, steps - 20), 2)))
        elif steps > 60 and roll < 0.30:
            crashes = (rng.randrange(20, steps - 20),)
        out.append(dataclasses.replace(p, budget=budget, crash_steps=crashes))
    return out


def member_node(index: int, rank: int) -> str:
    """The node run ``index``'s member ``r<rank>`` is placed on: two members per node."""
    return f"node-{((index * 3) % NODES + rank // 2) % NODES:03d}"


def run_items(plan: RunPlan) -> Iterator[Item]:
    """One run's records in time order; exactly ``plan.budget`` of them when it has one."""
    rng = random.Random(plan.seed)
    run_id, ws = plan.run_id, plan.world_size
    members = tuple(Member(f"r{j}", member_node(plan.index, j), j % 2, "rack-1")
                    for j in range(ws))
    seq = emitted = 0

    def item(at: int, topics: tuple[str, ...], event: Event) -> Item:
        nonlocal seq, emitted
        seq += 1
        emitted += len(topics)
        return (at, plan.index, seq, topics, event)

    def fact(at: int, gen: int, eid: str, cause: str | None = None) -> Header:
        return Header(f"{run_id}/{eid}", run_id, gen, at, "controller", cause)

    def report(at: int, gen: int, lid: str, eid: str) -> Header:
        return Header(f"{run_id}/g{gen}/{lid}/{eid}", run_id, gen, at, f"worker/{run_id}/{lid}")

    t = plan.start_ms
    gen = 1
    beats = 0
    yield item(t, ONLY_RUNS, RunSubmitted(
        header=Header(f"{run_id}/submitted", run_id, 0, t, "cli/alice"),
        spec_digest=f"sha256:{rng.getrandbits(256):064x}", spec_json=_spec_json(run_id),
        principal="alice", world_size=ws, dataset_id=DATASET_ID))
    if plan.queued_ms:
        yield item(t, ONLY_RUNS, RunQueued(header=fact(t, 0, "g0/RunQueued"),
                                           reason=f"needs {ws} slots, 0 free in 'rack-1'"))
        t += plan.queued_ms
    yield item(t, ONLY_RUNS, RunAdmitted(header=fact(t, 0, "g1/RunAdmitted"), members=members))
    yield item(t, ONLY_RUNS, GenerationStarted(header=fact(t, 1, "g1/GenerationStarted"),
                                               members=members, reason="admitted"))
    t += 5_000 + rng.randrange(20_000)  # launch and rendezvous: idle allocation
    yield item(t, ONLY_RUNS, MembershipConfirmed(header=fact(t, 1, "g1/MembershipConfirmed"),
                                                 members_joined=ws))
    step = checkpoint = 0
    manifest: str | None = None
    times: list[tuple[int, list[float], float]] = []  # (step, per-rank ms, input wait ms)
    crashes = list(plan.crash_steps)
    failures = 0
    ending_cost = end_cost(plan)
    max_step = step_cost_max(ws)

    def step_times(at: int) -> Iterator[Item]:
        nonlocal times
        if not times:
            return
        for j, m in enumerate(members):
            yield item(at, ONLY_REPORTS, StepTimesRecorded(
                header=report(at, gen, m.logical_id, f"steptimes/{times[0][0]}"),
                logical_id=m.logical_id, node=m.node, first_step=times[0][0],
                step_time_ms=tuple(r[j] for _, r, _ in times),
                input_wait_ms=tuple(w for _, _, w in times)))
        times = []

    while True:
        if plan.budget is not None:
            if plan.budget - emitted < max_step + ending_cost:
                # Fill the budget exactly: members keep beating while the run winds down.
                while plan.budget - emitted > ending_cost:
                    m = members[beats % ws]
                    beats += 1
                    t += 1_000 // ws
                    yield item(t, ONLY_REPORTS, HeartbeatRecorded(
                        header=report(t, gen, m.logical_id, f"hb/{beats}"),
                        logical_id=m.logical_id, node=m.node, step=step))
                break
        elif plan.last_step is not None and step >= plan.last_step:
            break
        step += 1
        step_ms = 900.0 + rng.random() * 100.0
        wait_ms = rng.random() * 30.0 if rng.random() < 0.9 else 100.0 + rng.random() * 400.0
        for j, m in enumerate(members):
            beats += 1
            yield item(t + 1 + j, ONLY_REPORTS, HeartbeatRecorded(
                header=report(t + 1 + j, gen, m.logical_id, f"hb/{beats}"),
                logical_id=m.logical_id, node=m.node, step=step - 1))
        t += int(step_ms) + 1
        yield item(t, BOTH, StepCommitted(
            header=report(t, gen, "r0", f"step/{step}"), step=step, tokens=TOKENS_PER_STEP,
            loss_tokens=TOKENS_PER_STEP - rng.randrange(4096), step_time_ms=step_ms,
            input_wait_ms=wait_ms, loss=2.0 + 3.0 / (1.0 + step / 1000.0) + rng.random() * 0.05))
        times.append((step, [step_ms * (0.97 + 0.03 * rng.random()) for _ in members], wait_ms))
        due = step % CHECKPOINT_EVERY == 0
        if due or len(times) >= STEP_TIMES_BATCH:
            yield from step_times(t + 1)
        t += 2 + rng.randrange(20)  # the loop between steps: logging, reporting
        if due:
            stall = 80.0 + rng.random() * 170.0  # async staging: the copy to host memory
            t += int(stall) + 1
            yield item(t, BOTH, CheckpointStaged(
                header=report(t, gen, "r0", f"ckpt/{step}/staged"), step=step, mode="async",
                stall_ms=stall, waited_ms=0.0, bytes=ws * 50_000_000, backlog=0,
                durable_step=checkpoint or None))
            path = f"file:///ckpt/{run_id}/g{gen}/s{step}"
            for j, m in enumerate(members):
                yield item(t + 1 + j, BOTH, ShardWritten(
                    header=report(t + 1 + j, gen, m.logical_id, f"shard/{step}"), step=step,
                    logical_id=m.logical_id, path=f"{path}/__{j}_0.distcp",
                    bytes=50_000_000 + rng.randrange(1_000_000), crc32c=rng.getrandbits(32)))
            at = t + ws + 2
            position = step * GLOBAL_BATCH
            counts: dict[str, int] = {}
            left = position
            for k, (name, w) in enumerate(SOURCES.items()):
                counts[name] = left if k == len(SOURCES) - 1 else int(position * w)
                left -= counts[name]
            proposal = ManifestProposed(
                header=report(at, gen, "r0", f"manifest/{step}"), step=step,
                manifest_path=f"{path}/manifest.json",
                manifest_digest=f"sha256:{rng.getrandbits(256):064x}", dataset_id=DATASET_ID,
                epoch=0, position=position, source_counts=counts, mixture_targets=SOURCES)
            yield item(at, ONLY_REPORTS, proposal)
            pid = proposal.header.event_id
            yield item(at, ONLY_RUNS, ManifestCommitted(
                header=Header(f"{pid}/ManifestCommitted", run_id, gen, at, "controller", pid),
                step=step, manifest_path=proposal.manifest_path,
                manifest_digest=proposal.manifest_digest))
            yield item(at, ONLY_RUNS, CursorAdvanced(
                header=Header(f"{pid}/CursorAdvanced", run_id, gen, at, "controller", pid),
                step=step, dataset_id=DATASET_ID, epoch=0, position=position,
                source_counts=counts, mixture_targets=SOURCES))
            checkpoint, manifest = step, proposal.manifest_path
            t = at + 1
        if crashes and step >= crashes[0]:
            crashes.pop(0)
            failures += 1
            victim = members[-1]
            t += 200 + rng.randrange(600)
            exited = WorkerExited(header=report(t, gen, victim.logical_id, "exit"),
                                  logical_id=victim.logical_id, node=victim.node, signal=9)
            yield item(t, BOTH, exited)
            t += 50 + rng.randrange(2_000)  # detection: the agent notices, the controller decides
            backoff = 2_000 * 2 ** min(failures - 1, 4)
            classified = FailureClassified(
                header=fact(t, gen, f"g{gen}/FailureClassified", exited.header.event_id),
                failure_class="worker_crash", signature="worker_crash:signal=9", action="restart",
                attempt=failures, detail=f"{victim.logical_id} on {victim.node} killed by signal 9",
                logical_id=victim.logical_id, node=victim.node, backoff_ms=backoff)
            yield item(t, ONLY_RUNS, classified)
            raised = AlertRaised(
                header=fact(t, gen, f"alert/progress_stall/{failures}"), alert="progress_stall",
                severity="warning", owner="alice", runbook="docs/runbooks.md#progress_stall",
                detail="no step since the crash", subject="", threshold="120s", value=None)
            yield item(t, ONLY_RUNS, raised)
            t += backoff
            gen += 1
            yield item(t, ONLY_RUNS, GenerationStarted(
                header=fact(t, gen, f"g{gen}/GenerationStarted"), members=members,
                reason="restart", resume_step=checkpoint if manifest else None,
                resume_manifest=manifest))
            t += 3_000 + rng.randrange(5_000)  # relaunch, rendezvous, restore
            for j, m in enumerate(members):
                yield item(t + j, ONLY_REPORTS, CheckpointRestored(
                    header=report(t + j, gen, m.logical_id, f"restored/{checkpoint}"),
                    step=checkpoint, manifest_path=manifest or "", manifest_digest="sha256:x",
                    logical_id=m.logical_id, verify_ms=400.0 + rng.random() * 100,
                    load_ms=1_500.0 + rng.random() * 500, fell_back=0))
            t += ws
            yield item(t, ONLY_RUNS, MembershipConfirmed(
                header=fact(t, gen, f"g{gen}/MembershipConfirmed"), members_joined=ws))
            yield item(t, ONLY_RUNS, AlertResolved(
                header=fact(t, gen, f"{raised.header.event_id}/resolved"),
                alert="progress_stall", subject="", raised_event_id=raised.header.event_id,
                detail="generation confirmed"))
            # A report of the fenced generation that was still in flight: computed on, refused.
            stale = StepCommitted(header=report(t + 1, gen - 1, "r0", f"step/{step + 1}"),
                                  step=step + 1, tokens=TOKENS_PER_STEP, loss_tokens=60_000,
                                  step_time_ms=950.0, input_wait_ms=1.0, loss=2.5)
            yield item(t + 1, ONLY_REPORTS, stale)
            yield item(t + 1, ONLY_RUNS, WriteRejected(
                header=fact(t + 1, gen, f"{stale.header.event_id}/WriteRejected",
                            stale.header.event_id),
                rejected_event_id=stale.header.event_id, rejected_event_type="StepCommitted",
                reason="stale_generation", detail=f"generation {gen - 1}, current is {gen}"))
            t += 2
            step, times = checkpoint, []  # training resumes after the checkpoint: lost work
    if plan.ending == "live":
        return
    t += 1_000
    for m in members:
        sig = 15 if plan.ending == "cancelled" else None
        yield item(t, BOTH, WorkerExited(header=report(t, gen, m.logical_id, "exit"),
                                         logical_id=m.logical_id, node=m.node,
                                         exit_code=None if sig else 0, signal=sig))
    if plan.ending == "cancelled":
        yield item(t, ONLY_RUNS, RunCancelled(header=fact(t, gen, "RunCancelled"),
                                              principal="alice", reason="operator request"))
    else:
        yield item(t, ONLY_RUNS, RunFinished(header=fact(t, gen, "RunFinished"),
                                             outcome="succeeded", reason="every member exited 0"))
    if plan.budget is not None and emitted != plan.budget:
        raise RuntimeError(f"run {run_id}: {emitted} records, budget {plan.budget}")


# --- encoding ---------------------------------------------------------------------


class FastEncoder:
    """``Codec.encode``'s bytes without its per-event validation pass (as bench/controller.py).

    Every type's first event and every 100th event go through ``Codec.encode`` and
    are compared byte for byte, so the log is what the real writers produce.
    """

    CHECK_EVERY = 100

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self.writers: dict[str, tuple[bytes, Any, Headers]] = {}
        for name in EVENT_TYPES:
            latest = codec.registry.latest(name)
            headers: Headers = [("event_type", name.encode()),
                                ("schema_version", str(latest.version).encode())]
            self.writers[name] = (MAGIC + latest.fingerprint, latest.parsed, headers)
        self.checked: Counter[str] = Counter()
        self.count = 0

    def encode(self, event: Event) -> tuple[bytes, Headers]:
        name = type(event).__name__
        prefix, parsed, headers = self.writers[name]
        record = to_record(event)
        record["header"]["schema_version"] = self.codec.registry.latest(name).version
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
        return data, headers


CORRUPT_KINDS = ("bad_magic", "truncated", "unknown_fingerprint", "body_invalid",
                 "trailing_bytes", "empty", "event_type_mismatch")


def corrupt_record(kind: str, topic: str, key: bytes, good: bytes, headers: Headers) -> LogRecord:
    """A record the projector must quarantine, made from a good one's bytes."""
    match kind:
        case "bad_magic":
            return (topic, key, b"\x00\x01" + good[2:], headers)
        case "truncated":
            return (topic, key, good[:6], headers)
        case "unknown_fingerprint":
            return (topic, key, MAGIC + b"\xff" * 8 + good[10:], headers)
        case "body_invalid":
            return (topic, key, good[:-3], headers)  # the body ends inside a field
        case "trailing_bytes":
            return (topic, key, good + b"\x00\x00", headers)
        case "empty":
            return (topic, key, None, headers)
        case "event_type_mismatch":
            return (topic, key, good, [("event_type", b"HeartbeatRecorded"),
                                       ("schema_version", b"1")])
    raise ValueError(kind)


@dataclasses.dataclass
class Log:
    records: list[LogRecord]
    runs: int
    big_run_id: str
    big_steps: int
    mix: dict[str, int]  # "topic EventType" -> records
    corrupt: dict[str, int]
    build_s: float
    checked_with_codec: int

    @property
    def size_bytes(self) -> int:
        return sum(len(r[2] or b"") for r in self.records)

    def per_topic(self) -> dict[str, int]:
        return dict(Counter(r[0] for r in self.records))


def build_log(codec: Codec, events: int, runs: int, big_steps: int, corrupt_each: int,
              sign: Signer | None = None) -> Log:
    """Exactly ``events`` records: the big run, typical runs, corrupt records; each
    report signed as its sender would (``sign``: ``bench.reportkeys.ReportKeys.headers``)."""
    started = time.perf_counter()
    plans = plan_runs(runs, big_steps)
    big_items = list(run_items(plans[0]))
    big_records = sum(len(i[3]) for i in big_items)
    n_corrupt = corrupt_each * len(CORRUPT_KINDS)
    rest = events - big_records - n_corrupt
    min_per_run = 40 + 12 * max(WORLD_SIZES)
    if rest < (runs - 1) * min_per_run:
        raise ValueError(f"{events:,} events are too few for {runs} runs and a big run of "
                         f"{big_records:,} records")
    plans = with_budgets(plans, rest)
    encoder = FastEncoder(codec)
    keys = {p.index: p.run_id.encode() for p in plans}
    records: list[LogRecord] = []
    mix: Counter[str] = Counter()
    merged = heapq.merge(iter(big_items), *(run_items(p) for p in plans[1:]))
    for _at, run, _seq, topics, event in merged:
        value, headers = encoder.encode(event)
        for topic in topics:
            if topic == REPORTS and sign is not None:
                # a worker's report names its member in its producer: worker/<run>/<rank id>
                rank = event.header.producer.rsplit("/", 1)[-1]
                node = member_node(run, int(rank[1:])) if rank[:1] == "r" else None
                records.append((topic, keys[run], value, [*headers, *sign(event, value, node)]))
                continue
            records.append((topic, keys[run], value, headers))
            mix[f"{topic} {event.event_type}"] += 1
    # Corrupt records at random places, made from a good StepCommitted's bytes.
    rng = random.Random(SEED + 2)
    good = next(r for r in records if r[3][0][1] == b"StepCommitted")
    corrupt: Counter[str] = Counter()
    for k in range(n_corrupt):
        kind = CORRUPT_KINDS[k % len(CORRUPT_KINDS)]
        topic = TOPICS[k % 2]
        pos = rng.randrange(len(records))
        records.insert(pos, corrupt_record(kind, topic, records[pos][1], good[2] or b"", good[3]))
        corrupt[kind] += 1
        mix[f"{topic} (corrupt)"] += 1
    if len(records) != events:
        raise RuntimeError(f"built {len(records):,} records, wanted {events:,}")
    big = plans[0]
    return Log(records, runs, big.run_id, big.last_step or 0, dict(mix.most_common()),
               dict(corrupt), time.perf_counter() - started, sum(encoder.checked.values()))


# --- Kafka ------------------------------------------------------------------------

# Throughput settings: the producing is setup, not measured. The same idempotent,
# acks=all producer as EventProducer, with bigger batches.
PRODUCE_SETTINGS: dict[str, Any] = {"acks": "all", "enable.idempotence": True,
                                    "linger.ms": 50, "batch.size": 1_000_000,
                                    "queue.buffering.max.messages": 500_000,
                                    "log_level": 3}  # no warnings while the broker warms up
# Projector.run's consumer settings: the baseline reads the same way.
CONSUMER_SETTINGS: dict[str, Any] = {"enable.auto.commit": False,
                                     "isolation.level": "read_committed",
                                     "enable.partition.eof": True}
CONSUME_BATCH = BATCH  # Projector's default batch
POLL_S = 0.5  # Projector.run's default


def produce_log(bootstrap: str, log: Log) -> dict[str, Any]:
    failed: list[str] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failed.append(err.str())

    producer = Producer(client_config(bootstrap, {"client.id": "bench-projector",
                         "on_delivery": delivered, **PRODUCE_SETTINGS}))
    started = time.perf_counter()
    for topic, key, value, headers in log.records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: serve delivery reports first
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    if left or failed:
        raise RuntimeError(f"produce: {left} records undelivered, {len(failed)} failed "
                           f"({failed[:3]})")
    return {"records": len(log.records), "seconds": elapsed,
            "records_per_s": len(log.records) / elapsed, "settings": PRODUCE_SETTINGS}


def watermarks(bootstrap: str) -> dict[str, int]:
    """Records per projected topic (high - low watermark over its partitions)."""
    consumer = Consumer(client_config(bootstrap, {"group.id": "bench-projector-marks"}))
    try:
        out = {}
        for topic in TOPICS:
            parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            total = 0
            for p in parts:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                total += high - low
            out[topic] = total
        return out
    finally:
        consumer.close()


@dataclasses.dataclass
class PassResult:
    """One read of both topics from the beginning to the end, with per-message work."""

    records: int
    seconds: float
    errors: Counter[str]
    rows: int = 0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {"records": self.records, "seconds": self.seconds,
                "records_per_s": self.records_per_s, "decode_errors": dict(self.errors),
                "rows": self.rows}


Work = Callable[[Message], int]  # per message: rows it would add (0 for none)


def consume_pass(bootstrap: str, work: Work, group: str) -> PassResult:
    """Read every partition of both topics from offset 0 up to the end, as Projector.run does.

    Same consumer settings, same ``consume(num_messages=1000, timeout=0.5)`` loop
    and the same end-of-partition rule; ``work`` is applied to every record.
    """
    consumer = Consumer(client_config(bootstrap, {"group.id": group, **CONSUMER_SETTINGS}))
    errors: Counter[str] = Counter()
    try:
        started = time.perf_counter()
        parts = []
        for topic in TOPICS:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            parts += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(meta.partitions)]
        consumer.assign(parts)
        pending = {(tp.topic, tp.partition) for tp in parts}
        total = rows = 0
        while True:
            msgs = consumer.consume(num_messages=CONSUME_BATCH, timeout=POLL_S)
            got = 0
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard((msg.topic() or "", msg.partition() or 0))
                    continue
                got += 1
                try:
                    rows += work(msg)
                except DecodeError as exc:
                    errors[exc.reason] += 1
            total += got
            if not pending and not got:
                break
        return PassResult(total, time.perf_counter() - started, errors, rows)
    finally:
        consumer.close()


def touch_work(msg: Message) -> int:
    """Bare consume: take the value out of the message, nothing else."""
    msg.value()
    return 0


def decode_work(codec: Codec) -> Work:
    """Bare consume + ``Codec.decode`` of the value (the baseline)."""
    decode = codec.decode

    def work(msg: Message) -> int:
        value = msg.value()
        if value is None:
            raise DecodeError("empty", "tombstone")
        decode(value)
        return 0

    return work


def rows_work(codec: Codec) -> Work:
    """What ``Projector._apply`` does per record before DuckDB: decode_message + rows_for."""

    def work(msg: Message) -> int:
        return len(rows_for(decode_message(codec, msg)))

    return work


def door_work(codec: Codec, bootstrap: str) -> Work:
    """``rows_work`` with each report first judged by the projector's report door
    (``events.kafka.reportdoor.ReportDoor``, keys as of each record's log time), as
    ``Projector._judged`` does: what the signatures cost a reader of history."""
    door = ReportDoor(lambda: read_ring_or_empty(bootstrap, name="bench-projector-keys",
                                                 retry_s=5.0), historic=True)

    def work(msg: Message) -> int:
        record = decode_message(codec, msg, raw=True)
        if record.topic == REPORTS and door.judge(record) is not None:
            return 0
        return len(rows_for(record))

    return work


# --- ETTR -------------------------------------------------------------------------


def latencies(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def summary_ms(samples: Sequence[float]) -> dict[str, float]:
    return {"n": len(samples), "median_ms": statistics.median(samples) * 1e3,
            "p90_ms": percentile(samples, 90) * 1e3, "min_ms": min(samples) * 1e3,
            "max_ms": max(samples) * 1e3}


_CTE = re.compile(r"^(\w+)(?:\([^)]*\))? AS \($", re.MULTILINE)


def ettr_ctes() -> tuple[str, list[tuple[str, list[str]]]]:
    """queries/ettr.sql cut at its final SELECT: the WITH clause, and per CTE (in
    order) its name and the earlier CTEs its body names."""
    text = sql_text("ettr")
    cut = text.rindex("\nSELECT part, seconds, share FROM (")
    head = text[:cut]
    found = list(_CTE.finditer(head, head.index("WITH")))
    out: list[tuple[str, list[str]]] = []
    for k, m in enumerate(found):
        body = head[m.end():found[k + 1].start() if k + 1 < len(found) else len(head)]
        deps = [n for n, _ in out if re.search(rf"\b{n}\b", body)]
        out.append((m.group(1), deps))
    return head, out


def ettr_cte_profile(con: duckdb.DuckDBPyConnection, run_id: str, repeats: int
                     ) -> list[dict[str, Any]]:
    """Median time to compute each CTE of ettr.sql with everything it depends on.

    ``count(*), sum(hash(x))`` over the whole row keeps the optimizer from
    dropping columns (the ``lost`` EXISTS of step_iv, say) that a bare
    ``count(*)`` would not need. ``own_ms`` subtracts the slowest input CTE's
    time: an estimate of what the CTE itself adds.
    """
    head, ctes = ettr_ctes()
    cur = con.cursor()
    try:
        cur.execute("SET VARIABLE run_id = ?", [run_id])
        out: list[dict[str, Any]] = []
        cum: dict[str, float] = {}
        for name, deps in ctes:
            sql = f"{head}\nSELECT count(*), sum(hash(x)) FROM {name} x"
            rows: list[Any] = []
            samples = latencies(functools.partial(_fetch_into, cur, sql, rows), repeats)
            cum[name] = statistics.median(samples) * 1e3
            own = cum[name] - max((cum[d] for d in deps), default=0.0)
            out.append({"cte": name, "depends_on": deps, "median_ms": cum[name],
                        "own_ms": own, "rows": rows[-1][0] if rows and rows[-1] else None})
        return out
    finally:
        cur.close()


def _fetch_into(cur: duckdb.DuckDBPyConnection, sql: str, out: list[Any]) -> None:
    out.append(cur.execute(sql).fetchone())


def explain_analyze(con: duckdb.DuckDBPyConnection, sql: str, run_id: str, top: int = 8
                    ) -> dict[str, Any]:
    """EXPLAIN ANALYZE's operator timings (DuckDB's JSON profile), the costliest first.

    Each operator is attributed to the materialized CTE whose definition holds it
    (``cte``), where DuckDB materialized one; operator times are summed over threads.
    """
    with tempfile.TemporaryDirectory(prefix="bench-projector-profile-") as tmp:
        path = Path(tmp) / "profile.json"
        cur = con.cursor()
        try:
            cur.execute("SET VARIABLE run_id = ?", [run_id])
            cur.execute("PRAGMA enable_profiling = 'json'")
            cur.execute(f"PRAGMA profiling_output = '{path}'")
            t0 = time.perf_counter()
            cur.execute(sql).fetchall()
            wall = time.perf_counter() - t0
            cur.execute("PRAGMA disable_profiling")
        finally:
            cur.close()
        profile = json.loads(path.read_text("utf-8"))
    ops: list[dict[str, Any]] = []

    def walk(node: dict[str, Any], cte: str | None) -> None:
        info = node.get("extra_info") or {}
        name = node.get("name") or node.get("operator_name") or node.get("operator_type")
        timing = node.get("timing", node.get("operator_timing"))
        if name and isinstance(timing, int | float):
            ops.append({"operator": str(name).strip(), "seconds": float(timing),
                        "rows": node.get("intermediate_rows",
                                         node.get("operator_cardinality")),
                        "cte": cte, "info": _short_info(info)})
        children = node.get("children") or []
        if name == "CTE" and children and isinstance(info, dict):
            walk(children[0], str(info.get("CTE Name", cte)))  # the definition
            children = children[1:]
        for child in children:
            walk(child, cte)

    roots = profile.get("operator")
    for root in roots if isinstance(roots, list) else [profile]:
        walk(root, None)
    total = sum(o["seconds"] for o in ops)
    ops.sort(key=lambda o: -o["seconds"])
    phases = {k: profile[k] for k in ("planner", "optimizer", "physical_planner")
              if isinstance(profile.get(k), dict)}
    planning = sum(float(p.get("total_time") or 0.0) for p in phases.values())
    return {"wall_s": wall, "operator_total_s": total, "operators": len(ops),
            "planning_s": planning, "top": ops[:top]}


def _short_info(info: Any) -> str:
    """A one-line summary of an operator's extra_info (join conditions, tables)."""
    if isinstance(info, dict):
        parts = []
        for key in ("Table", "Join Type", "Conditions", "CTE Name", "Aggregates", "Groups",
                    "Filters"):
            value = info.get(key)
            if value:
                text = " ".join(value) if isinstance(value, list) else str(value)
                parts.append(f"{key}: {' '.join(text.split())}")
        return "; ".join(parts)[:160]
    return " ".join(str(info).split())[:160]
