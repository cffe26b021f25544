"""Benchmark: the event codec and the event log on a real broker, each against a bare baseline.

Usage: ``.venv/bin/python bench/events.py [--quick] [--bootstrap HOST:PORT]``

1. Codec. ``events.codec.Codec`` on the full path (dataclass -> bytes with the
   10-byte single-object prefix; bytes -> fingerprint lookup, body, header
   check, dataclass) against bare ``fastavro.schemaless_writer`` /
   ``schemaless_reader`` on the same records (pre-built dicts, the same parsed
   schemas, no prefix). A realistic mix: mostly heartbeats and step reports,
   some of every type. Also per event type, in microseconds per event. And the
   compiled read path (``events.columnar``: the same bytes, prefix included, to
   one Arrow record batch per type in one call) against the same bare reader.
2. Broker. ``EventProducer`` (send -> flush) and ``read_log`` / ``EventConsumer``
   (decoding included) against a plain confluent_kafka Producer/Consumer that
   moves the very same records (same keys, value bytes and headers, encoded
   before the clock starts) with the same settings; and the projector's compiled
   route's read (``LogReader.read_messages`` batches decoded to Arrow columns by
   ``events.columnar``) against the same plain read. A fresh topic per
   measurement; skipped, with a message, when no broker answers.

Every ratio is runledger events/s divided by baseline events/s, both measured
in this run: 1.00 is as fast as the baseline, 0.50 is half as fast. Nothing
here asserts on a timing. Results go to ``bench/results/events.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import os
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path, where this very
    # file would shadow the ``events`` package; use the repository root instead.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import fastavro
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

# confluent_kafka.admin re-exports NewTopic without __all__, which mypy --strict rejects.
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench.common import (
    Timing,
    fmt_num,
    machine_info,
    print_table,
    ratio,
    time_interleaved,
    write_results,
)
from events.codec import PREFIX_LEN, Codec, default_codec
from events.columnar import ColumnarDecoder, Columns
from events.convert import to_record
from events.errors import BrokerUnavailable
from events.kafka.broker import check_broker
from events.kafka.clients import EventProducer
from events.kafka.connection import client_config
from events.kafka.consume import EventConsumer, read_log
from events.kafka.reader import LogReader
from events.model import EVENT_TYPES, Event, Header
from events.placement import deflate
from events.workerenv import ENV_BOOTSTRAP
from tests.events.sample_events import one_of_each

NAME = "events"
SEED = 20240601
# Share of the codec mix per type; what is left is spread over every type alike.
MIX_WEIGHTS = {"HeartbeatRecorded": 0.55, "StepCommitted": 0.25}
RUNS = 64  # distinct run ids (Kafka keys) in the mix
# The producer settings of EventProducer, passed explicitly to both sides so they match.
PRODUCER_SETTINGS: dict[str, Any] = {"acks": "all", "enable.idempotence": True, "linger.ms": 5}
# read_log's consumer settings; the raw assign-and-poll reader uses the same.
READER_SETTINGS: dict[str, Any] = {
    "enable.auto.commit": False,
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
}
# EventConsumer's settings; the raw group consumer uses the same.
GROUP_SETTINGS: dict[str, Any] = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
}
GROUP_BATCH = 500  # EventConsumer.poll's default max_records
READER_BATCH = 500  # what read_log asks LogReader.read for at a time
DEADLINE_S = 120.0


@dataclasses.dataclass(frozen=True, slots=True)
class Mode:
    codec_events: int
    codec_repeats: int
    per_type_events: int
    per_type_repeats: int
    broker_messages: int
    partitions: tuple[int, ...]


FULL = Mode(20_000, 5, 200, 5, 50_000, (1, 3))
QUICK = Mode(5_000, 3, 100, 3, 5_000, (1,))


# --- the events ----------------------------------------------------------------


def _vary(template: Event, i: int, rng: random.Random) -> Event:
    """A copy of ``template`` with its own ids, run, time and progress fields."""
    run = f"run-{i % RUNS:03d}-{SEED}"
    seq = i // RUNS
    head = Header(
        event_id=f"{run}-e{seq}-{uuid.UUID(int=rng.getrandbits(128)).hex[:12]}",
        run_id=run,
        generation=1 + seq // 400,
        occurred_at=1_700_000_000_000 + i * 37,
        producer=f"agent/node-{i % 16:02d}",
        causation_id=None if seq == 0 else f"{run}-e{seq - 1}",
        schema_version=template.header.schema_version,
    )
    names = {f.name for f in dataclasses.fields(template)}
    changes: dict[str, Any] = {"header": head}
    candidates: dict[str, Any] = {
        "step": seq,
        "first_step": seq,
        "logical_id": f"r{i % 8}",
        "node": f"node-{i % 16:02d}",
        "tokens": 65_536 + rng.randrange(1024),
        "loss_tokens": 60_000 + rng.randrange(1024),
        "step_time_ms": 800.0 + rng.random() * 50,
        "input_wait_ms": rng.random() * 5,
        "loss": 2.0 + rng.random(),
        "position": seq * 64,
        "bytes": 100_000_000 + rng.randrange(10_000_000),
        "crc32c": rng.getrandbits(32),
    }
    for name, value in candidates.items():
        if name in names:
            old = getattr(template, name)
            # A batched report (StepTimesRecorded) carries one value per step:
            # keep the template's length, so its per-step tuples stay aligned.
            changes[name] = tuple(value for _ in old) if isinstance(old, tuple) else value
    return dataclasses.replace(template, **changes)


def _templates() -> dict[str, Event]:
    return {type(e).__name__: e for e in one_of_each("run-template")}


def build_mix(n: int) -> list[Event]:
    """``n`` valid events: mostly heartbeats and step reports, some of every type."""
    templates = _templates()
    rest = 1.0 - sum(MIX_WEIGHTS.values())
    names = sorted(templates)
    weights = [MIX_WEIGHTS.get(name, 0.0) + rest / len(names) for name in names]
    rng = random.Random(SEED)
    picks = rng.choices(names, weights=weights, k=n)
    return [_vary(templates[name], i, rng) for i, name in enumerate(picks)]


def build_of_type(name: str, n: int) -> list[Event]:
    template = _templates()[name]
    rng = random.Random(SEED)
    return [_vary(template, i, rng) for i in range(n)]


def _headers(event: Event, version: int) -> list[tuple[str, str | bytes | None]]:
    """The Kafka headers EventProducer attaches (``events.kafka.clients._headers``)."""
    return [("event_type", event.event_type.encode()), ("schema_version", str(version).encode())]


# --- 1. codec ------------------------------------------------------------------


@dataclasses.dataclass
class CodecWork:
    """One set of events, ready for both contenders; built before any clock starts."""

    codec: Codec
    events: list[Event]
    encoded: list[bytes]  # the codec's bytes: prefix + body
    records: list[tuple[Any, dict[str, Any]]]  # (parsed schema, record) for the bare writer
    bodies: list[tuple[Any, bytes]]  # (parsed schema, body) for the bare reader

    @classmethod
    def prepare(cls, codec: Codec, events: list[Event]) -> CodecWork:
        encoded = [codec.encode(e) for e in events]
        records: list[tuple[Any, dict[str, Any]]] = []
        bodies: list[tuple[Any, bytes]] = []
        for event, data in zip(events, encoded, strict=True):
            latest = codec.registry.latest(event.event_type)
            record = to_record(event)
            record["header"]["schema_version"] = latest.version  # as Codec.encode does
            if event.event_type in codec.packed:  # members as blocks, as it does too
                record = deflate(record)
            records.append((latest.parsed, record))
            bodies.append((latest.parsed, data[PREFIX_LEN:]))
        work = cls(codec, events, encoded, records, bodies)
        work.check()
        return work

    def check(self) -> None:
        """Both contenders do the same work: the same bytes, and round trips hold."""
        bare = self.bare_encode()
        for ours, theirs in zip(self.encoded, bare, strict=True):
            if ours[PREFIX_LEN:] != theirs:
                raise RuntimeError("the codec's body differs from bare fastavro's on one record")
        for event, decoded in zip(self.events, self.codec_decode(), strict=True):
            if decoded != event:
                raise RuntimeError(f"{event.event_type} does not round-trip through the codec")
        columns = self.columnar_decode()
        if columns.refused or sum(b.num_rows for b in columns.batches.values()) != len(self):
            raise RuntimeError(f"the columnar path did not read every record: {columns.refused}")

    def __len__(self) -> int:
        return len(self.events)

    def codec_encode(self) -> list[bytes]:
        encode = self.codec.encode
        return [encode(e) for e in self.events]

    def codec_decode(self) -> list[Event]:
        decode = self.codec.decode
        return [decode(b).event for b in self.encoded]

    def columnar_decode(self) -> Columns:
        return columnar().decode(self.encoded)

    def bare_encode(self) -> list[bytes]:
        writer = fastavro.schemaless_writer
        out = []
        for parsed, record in self.records:
            buf = io.BytesIO()
            writer(buf, parsed, record)
            out.append(buf.getvalue())
        return out

    def bare_decode(self) -> list[Any]:
        reader = fastavro.schemaless_reader
        return [reader(io.BytesIO(body), parsed, None) for parsed, body in self.bodies]

    def time(self, repeats: int) -> dict[str, Timing]:
        return time_interleaved(
            {
                "bare_encode": self.bare_encode,
                "codec_encode": self.codec_encode,
                "bare_decode": self.bare_decode,
                "codec_decode": self.codec_decode,
                "columnar_decode": self.columnar_decode,
            },
            repeats,
        )


def _direction(timings: dict[str, Timing], direction: str, n: int,
               contender: str = "") -> dict[str, Any]:
    """``contender`` (by default ``codec_<direction>``) against ``bare_<direction>``."""
    ours, bare = timings[contender or f"codec_{direction}"], timings[f"bare_{direction}"]
    return {
        "runledger": {**ours.to_json(), "events_per_s": ours.rate(n)},
        "bare_fastavro": {**bare.to_json(), "events_per_s": bare.rate(n)},
        "ratio": ratio(ours.rate(n), bare.rate(n)),
    }


@functools.cache
def columnar() -> ColumnarDecoder:
    """One compiled decoder for the run (building it parses every schema file)."""
    return ColumnarDecoder(default_codec().registry)


def codec_section(mode: Mode) -> dict[str, Any]:
    codec = default_codec()
    events = build_mix(mode.codec_events)
    work = CodecWork.prepare(codec, events)
    n = len(events)
    sizes = [len(b) for b in work.encoded]
    timings = work.time(mode.codec_repeats)
    result: dict[str, Any] = {
        "events": n,
        "repeats": mode.codec_repeats,
        "mix": dict(Counter(e.event_type for e in events).most_common()),
        "mean_bytes_with_prefix": sum(sizes) / n,
        "encode": _direction(timings, "encode", n),
        "decode": _direction(timings, "decode", n),
        "columnar_decode": _direction(timings, "decode", n, contender="columnar_decode"),
    }
    rows = []
    for direction in ("encode", "decode", "columnar_decode"):
        d = result[direction]
        rows.append([
            {"columnar_decode": "decode to Arrow (events.columnar)"}.get(direction, direction),
            fmt_num(d["bare_fastavro"]["events_per_s"]),
            fmt_num(d["runledger"]["events_per_s"]),
            f"{d['ratio']:.2f}",
            fmt_num(d["bare_fastavro"]["median_s"] / n * 1e6, 2),
            fmt_num(d["runledger"]["median_s"] / n * 1e6, 2),
        ])
    print_table(
        ["codec (mix)", "bare ev/s", "runledger ev/s", "ratio", "bare us/ev", "runledger us/ev"],
        rows,
        title=f"1. codec: {n:,} events, median of {mode.codec_repeats}, "
        f"{result['mean_bytes_with_prefix']:.1f} B/event incl. 10-byte prefix",
    )

    per_type: dict[str, Any] = {}
    type_rows = []
    for name in sorted(EVENT_TYPES):
        typed = CodecWork.prepare(codec, build_of_type(name, mode.per_type_events))
        k = len(typed.events)
        t = typed.time(mode.per_type_repeats)

        def us(key: str, t: dict[str, Timing] = t, k: int = k) -> float:
            return t[key].median / k * 1e6

        enc_bare, enc_rl = us("bare_encode"), us("codec_encode")
        dec_bare, dec_rl = us("bare_decode"), us("codec_decode")
        size = sum(len(b) for b in typed.encoded) / k
        per_type[name] = {
            "events": k,
            "bytes": size,
            "encode_us": {"runledger": enc_rl, "bare_fastavro": enc_bare},
            "decode_us": {"runledger": dec_rl, "bare_fastavro": dec_bare},
            "encode_ratio": ratio(enc_bare, enc_rl),
            "decode_ratio": ratio(dec_bare, dec_rl),
        }
        type_rows.append([
            name, f"{size:.0f}",
            f"{enc_bare:.2f}", f"{enc_rl:.2f}", f"{ratio(enc_bare, enc_rl):.2f}",
            f"{dec_bare:.2f}", f"{dec_rl:.2f}", f"{ratio(dec_bare, dec_rl):.2f}",
        ])
    result["per_type"] = per_type
    print_table(
        ["event type", "bytes", "enc bare us", "enc rl us", "ratio",
         "dec bare us", "dec rl us", "ratio"],
        type_rows,
        title=f"   per type: {mode.per_type_events} events each, median of "
        f"{mode.per_type_repeats} (us per event; ratio = bare us / runledger us)",
    )
    return result


# --- 2. broker -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Read:
    count: int
    value_bytes: int | None  # None where the reader hands out events, not bytes
    first_s: float  # from opening the consumer to the first record
    total_s: float  # from opening the consumer to the last record

    @property
    def rate(self) -> float:
        """Steady-state records/s: from the first record to the last, startup excluded."""
        return ratio(self.count - 1, self.total_s - self.first_s)

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "value_bytes": self.value_bytes,
                "first_record_s": self.first_s, "total_s": self.total_s,
                "steady_events_per_s": self.rate,
                "overall_events_per_s": ratio(self.count, self.total_s)}


class Topics:
    """Fresh, uniquely named topics on a shared broker, deleted again at the end."""

    def __init__(self, bootstrap: str, replication: int) -> None:
        # The client must outlive every future it hands out.
        self.admin = AdminClient(client_config(bootstrap, {}))
        self.replication = replication
        self.created: list[str] = []
        self.prefix = f"bench.events.{os.getpid()}.{uuid.uuid4().hex[:8]}"

    def create(self, label: str, partitions: int) -> str:
        name = f"{self.prefix}.{label}"
        futures = self.admin.create_topics([NewTopic(name, partitions, self.replication)])
        futures[name].result(30)
        self.created.append(name)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until every partition has a leader
            meta = self.admin.list_topics(name, timeout=10).topics.get(name)
            if (meta is not None and meta.error is None and len(meta.partitions) == partitions
                    and all(p.leader >= 0 for p in meta.partitions.values())):
                return name
            time.sleep(0.1)
        raise TimeoutError(f"topic {name} has no leader for every partition after 30 s")

    def delete_all(self) -> None:
        if not self.created:
            return
        futures = self.admin.delete_topics(self.created, operation_timeout=30)
        for future in futures.values():
            try:
                future.result(30)
            except Exception as exc:  # leaving a topic behind is not worth a traceback
                print(f"   (could not delete a bench topic: {exc})", file=sys.stderr)
        self.created = []


def _produce_raw(bootstrap: str, topic: str,
                 records: Sequence[tuple[str, bytes, list[tuple[str, str | bytes | None]]]]
                 ) -> float:
    producer = Producer(client_config(bootstrap, {"client.id": "bench-raw",
                         **PRODUCER_SETTINGS}))
    key, value, headers = records[0]
    producer.produce(topic, value=value, key=key, headers=headers)  # warm-up: connect, pid
    producer.flush(30)
    produce = producer.produce
    start = time.perf_counter()
    for key, value, headers in records:
        while True:  # the same backpressure loop as EventProducer.send_bytes
            try:
                produce(topic, value=value, key=key, headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(DEADLINE_S)
    elapsed = time.perf_counter() - start
    if left:
        raise RuntimeError(f"raw producer: {left} records not delivered")
    return elapsed


def _produce_runledger(bootstrap: str, topic: str, events: Sequence[Event]) -> float:
    producer = EventProducer(bootstrap, client_id="bench-runledger", config=PRODUCER_SETTINGS)
    producer.send(topic, events[0])  # warm-up: connect, producer id
    producer.flush()
    send = producer.send
    start = time.perf_counter()
    for event in events:
        send(topic, event)
    producer.flush(DEADLINE_S)
    return time.perf_counter() - start


def _read_raw(bootstrap: str, topic: str) -> Read:
    """read_log's loop without decoding: assign, wait for one record, take what else is
    there (up to READER_BATCH), stop at the end offsets or end-of-partition."""
    start = time.perf_counter()
    first = 0.0
    count = size = 0
    consumer = Consumer(client_config(bootstrap, {"group.id": "runledger-reader",
                         **READER_SETTINGS}))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions = sorted(meta.partitions)
        ends: dict[int, int] = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = start + DEADLINE_S
        while ends and time.perf_counter() < deadline:
            one = consumer.poll(1.0)
            if one is None:
                continue
            for msg in [one, *consumer.consume(READER_BATCH - 1, 0)]:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        ends.pop(msg.partition() or 0, None)
                        continue
                    raise RuntimeError(f"raw read {topic}: {err.str()}")
                part, offset = msg.partition() or 0, msg.offset() or 0
                if part in ends and offset + 1 >= ends[part]:
                    ends.pop(part)
                if not count:
                    first = time.perf_counter() - start
                count += 1
                size += len(msg.value() or b"")
        return Read(count, size, first, time.perf_counter() - start)
    finally:
        consumer.close()


def _read_runledger(bootstrap: str, topic: str, codec: Codec) -> Read:
    start = time.perf_counter()
    first = 0.0
    count = 0
    for _record in read_log(bootstrap, topic, codec=codec):
        if not count:
            first = time.perf_counter() - start
        count += 1
    return Read(count, None, first, time.perf_counter() - start)


def _read_columns(bootstrap: str, topic: str, codec: Codec) -> Read:
    """The projector's compiled route's read (projectors.fastpath): LogReader's batches
    undecoded (read_messages), each decoded into Arrow columns in one compiled call."""
    start = time.perf_counter()
    first = 0.0
    count = 0
    decoder = columnar()
    reader = LogReader(bootstrap, [topic], codec=codec, strict=True, bounded=True)
    try:
        while not reader.caught_up:
            # Take what is there (a short wait, as the raw loop's consume(.., 0) after
            # its poll): waiting to fill a batch would time the wait, not the read.
            messages = reader.read_messages(5000, 0.05)
            if not messages:
                continue
            got = decoder.decode([m.value() for m in messages])
            if got.refused:
                raise RuntimeError(f"columns refused {got.refused[:3]}")
            if not count:
                first = time.perf_counter() - start
            count += len(got)
    finally:
        reader.close()
    return Read(count, None, first, time.perf_counter() - start)


def _group_raw(bootstrap: str, topic: str, expected: int) -> Read:
    """EventConsumer's loop (subscribe, consume batches) without decoding."""
    start = time.perf_counter()
    first = 0.0
    count = size = 0
    consumer = Consumer(client_config(bootstrap, {
                         "group.id": f"bench-raw-{uuid.uuid4().hex[:8]}", **GROUP_SETTINGS}))
    try:
        consumer.subscribe([topic])
        deadline = start + DEADLINE_S
        while count < expected and time.perf_counter() < deadline:
            # Ask for no more than is left: consume() waits out its timeout for a full batch.
            for msg in consumer.consume(min(GROUP_BATCH, expected - count), 1.0):
                if msg.error() is not None:
                    continue
                if not count:
                    first = time.perf_counter() - start
                count += 1
                size += len(msg.value() or b"")
        return Read(count, size, first, time.perf_counter() - start)
    finally:
        consumer.close()


def _group_runledger(bootstrap: str, topic: str, expected: int, codec: Codec) -> Read:
    start = time.perf_counter()
    first = 0.0
    count = 0
    consumer = EventConsumer(bootstrap, f"bench-rl-{uuid.uuid4().hex[:8]}", [topic], codec=codec)
    try:
        deadline = start + DEADLINE_S
        while count < expected and time.perf_counter() < deadline:
            records = consumer.poll(1.0, min(GROUP_BATCH, expected - count))
            if records and not count:
                first = time.perf_counter() - start
            count += len(records)
        if consumer.quarantined:
            raise RuntimeError(f"{len(consumer.quarantined)} records did not decode")
        return Read(count, None, first, time.perf_counter() - start)
    finally:
        consumer.close()


def _pair(raw_rate: float, rl_rate: float) -> dict[str, Any]:
    return {"raw_events_per_s": raw_rate, "runledger_events_per_s": rl_rate,
            "ratio": ratio(rl_rate, raw_rate)}


def broker_variant(bootstrap: str, topics: Topics, partitions: int, events: Sequence[Event],
                   codec: Codec) -> dict[str, Any]:
    n = len(events)
    expected = n + 1  # each topic also holds its producer's warm-up record
    # The raw side moves the very records EventProducer would: same key, bytes, headers.
    raw_records = []
    for event in events:
        value = codec.encode(event)
        raw_records.append((event.run_id, value, _headers(event, event.header.schema_version)))
    value_bytes = sum(len(v) for _, v, _ in raw_records) / n
    key_bytes = sum(len(k.encode()) for k, _, _ in raw_records) / n
    header_bytes = sum(len(name) + len(v or b"") for _, _, hs in raw_records
                       for name, v in hs) / n

    raw_topic = topics.create(f"p{partitions}.raw", partitions)
    rl_topic = topics.create(f"p{partitions}.runledger", partitions)
    produce_raw_s = _produce_raw(bootstrap, raw_topic, raw_records)
    produce_rl_s = _produce_runledger(bootstrap, rl_topic, events)
    read_raw = _read_raw(bootstrap, raw_topic)
    read_rl = _read_runledger(bootstrap, rl_topic, codec)
    read_cols = _read_columns(bootstrap, rl_topic, codec)
    group_raw = _group_raw(bootstrap, raw_topic, expected)
    group_rl = _group_runledger(bootstrap, rl_topic, expected, codec)
    for label, read in (("raw read", read_raw), ("read_log", read_rl), ("columns", read_cols),
                        ("raw group", group_raw), ("EventConsumer", group_rl)):
        if read.count != expected:
            raise RuntimeError(f"{label} got {read.count} of {expected} records")

    e2e_raw = n / (produce_raw_s + read_raw.total_s)
    e2e_rl = n / (produce_rl_s + read_rl.total_s)
    return {
        "partitions": partitions,
        "messages": n,
        "topics": {"raw": raw_topic, "runledger": rl_topic},
        "bytes_per_event": {"value": value_bytes, "key": key_bytes, "headers": header_bytes,
                            "record": value_bytes + key_bytes + header_bytes},
        "produce": {"raw_s": produce_raw_s, "runledger_s": produce_rl_s,
                    **_pair(n / produce_raw_s, n / produce_rl_s)},
        "consume_read_log": {"raw": read_raw.to_json(), "runledger": read_rl.to_json(),
                             **_pair(read_raw.rate, read_rl.rate)},
        "consume_columns": {"raw": read_raw.to_json(), "runledger": read_cols.to_json(),
                            **_pair(read_raw.rate, read_cols.rate)},
        "consume_group": {"raw": group_raw.to_json(), "runledger": group_rl.to_json(),
                          **_pair(group_raw.rate, group_rl.rate)},
        "end_to_end": _pair(e2e_raw, e2e_rl),
    }


def _find_bootstrap(explicit: str | None) -> tuple[str | None, str | None, int]:
    """(bootstrap, reason it is unusable, number of brokers)."""
    bootstrap = explicit or os.environ.get(ENV_BOOTSTRAP) or None
    if bootstrap is None:
        return None, f"no bootstrap address (pass --bootstrap or set {ENV_BOOTSTRAP})", 0
    try:
        brokers = check_broker(bootstrap, timeout_s=5.0)
    except BrokerUnavailable as exc:
        return bootstrap, str(exc), 0
    return bootstrap, None, brokers


def broker_section(mode: Mode, explicit: str | None) -> dict[str, Any]:
    bootstrap, unusable, brokers = _find_bootstrap(explicit)
    if bootstrap is None or unusable is not None:
        print(f"2. broker: SKIPPED: {unusable}", flush=True)
        print(flush=True)
        return {"skipped": unusable, "bootstrap": bootstrap}

    codec = default_codec()
    events = build_mix(mode.broker_messages)
    topics = Topics(bootstrap, replication=min(3, brokers))
    variants = []
    try:
        for partitions in mode.partitions:
            variants.append(broker_variant(bootstrap, topics, partitions, events, codec))
    finally:
        topics.delete_all()

    for v in variants:
        rows: list[list[object]] = []
        for label, key in (("produce (send -> flush)", "produce"),
                           ("consume read_log (poll + batch)", "consume_read_log"),
                           ("consume to Arrow columns (LogReader + events.columnar)",
                            "consume_columns"),
                           ("consume EventConsumer (batch)", "consume_group"),
                           ("end-to-end (produce + read_log)", "end_to_end")):
            d = v[key]
            rows.append([label, fmt_num(d["raw_events_per_s"]),
                         fmt_num(d["runledger_events_per_s"]), f"{d['ratio']:.2f}"])
        for label, key in (("  read_log first record after (ms)", "consume_read_log"),
                           ("  group first record after (ms)", "consume_group")):
            d = v[key]
            rows.append([label, f"{d['raw']['first_record_s'] * 1e3:.0f}",
                         f"{d['runledger']['first_record_s'] * 1e3:.0f}", ""])
        b = v["bytes_per_event"]
        rows.append(["bytes/event value (same both)", f"{b['value']:.1f}", f"{b['value']:.1f}", ""])
        rows.append(["bytes/event key+value+headers", f"{b['record']:.1f}", f"{b['record']:.1f}",
                     ""])
        print_table(
            ["broker", "raw ev/s", "runledger ev/s", "ratio"],
            rows,
            title=f"2. broker {bootstrap}: {v['messages']:,} events, {v['partitions']} "
            f"partition(s), acks=all, idempotent, linger.ms=5, one run each",
        )
    return {"bootstrap": bootstrap, "brokers": brokers, "replication": topics.replication,
            "producer_settings": PRODUCER_SETTINGS, "variants": variants}


# --- main ----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--bootstrap", default=None,
                        help=f"Kafka bootstrap address (default: ${ENV_BOOTSTRAP})")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL

    started = time.perf_counter()
    machine = machine_info(["fastavro", "confluent-kafka", "runledger"])
    try:
        import confluent_kafka

        machine["libraries"]["librdkafka"] = confluent_kafka.libversion()[0]
    except Exception:  # only informational
        pass
    print(f"bench/events.py ({'quick' if args.quick else 'full'}) on "
          f"{machine['usable_cores']} cores, Python {machine['python']}, "
          f"load average {machine['load_average_1_5_15']}")
    print("ratio = runledger events/s / baseline events/s in this run (1.00 = as fast; "
          "lower = slower). Shared machine: numbers are noisy.\n", flush=True)

    results: dict[str, Any] = {
        "benchmark": NAME,
        "mode": "quick" if args.quick else "full",
        "machine": machine,
        "notes": [
            "ratio = runledger events/s divided by baseline events/s, measured in the same run",
            "codec baseline: fastavro.schemaless_writer/reader on the same records and parsed "
            "schemas, no prefix, no dataclasses",
            "broker baseline: plain confluent_kafka Producer/Consumer with the same settings, "
            "moving the same keys, value bytes and headers, encoded before the clock starts",
            "end_to_end = messages / (produce+flush seconds + read_log seconds), sequential",
            "consume events/s are steady state (first record to last); the time from opening "
            "the consumer to its first record (metadata, assignment or group join) is "
            "reported apart, and end_to_end includes it",
            "shared machine: other engineers run tests at the same time; numbers are noisy",
        ],
    }
    section_start = time.perf_counter()
    results["codec"] = codec_section(mode)
    results["codec"]["elapsed_s"] = time.perf_counter() - section_start
    section_start = time.perf_counter()
    try:
        results["broker"] = broker_section(mode, args.bootstrap)
    except Exception as exc:  # keep the codec numbers even when the broker misbehaves
        print(f"2. broker: FAILED: {exc!r}", flush=True)
        results["broker"] = {"failed": repr(exc)}
    results["broker"]["elapsed_s"] = time.perf_counter() - section_start
    results["elapsed_s"] = time.perf_counter() - started
    path = write_results(NAME, results)
    print(f"wrote {path} in {results['elapsed_s']:.0f} s")
    return 1 if "failed" in results["broker"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
