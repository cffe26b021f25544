"""The event log on a real broker: round trips, quarantine, transactions, commits."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from events.codec import default_codec
from events.consume import EventConsumer, read_log
from events.errors import BrokerUnavailable, ProducerFenced
from events.kafka import EventProducer, Quarantine, TransactionalWriter, check_broker, header_items
from events.model import GenerationStarted, HeartbeatRecorded, ManifestProposed, RunQueued
from events.topics import QUARANTINE, RUNS
from tests.events.sample_events import MEMBERS, header, one_of_each

pytestmark = pytest.mark.kafka
SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def _topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"test.{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _raw_values(bootstrap: str, topic: str) -> list[tuple[int, int, bytes, dict[str, bytes]]]:
    out = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    pending = set(meta.partitions)
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            pending.discard(msg.partition())
            continue
        out.append((msg.partition(), msg.offset(), msg.value(), dict(header_items(msg))))
    consumer.close()
    return out


def test_every_event_type_round_trips_through_the_broker(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    run = f"run-{uuid.uuid4().hex[:8]}"
    sent = one_of_each(run)
    producer = EventProducer(bootstrap)
    for event in sent:
        producer.send(topic, event)
    producer.flush()

    got = [r.event for r in read_log(bootstrap, topic)]
    # One key, so one partition, so log order is send order.
    assert got == sent

    # The bytes decode with the schema files alone: plain fastavro, no runledger code.
    raw = _raw_values(bootstrap, topic)
    assert len(raw) == len(sent)
    for (_, _, value, headers), event in zip(sorted(raw, key=lambda r: r[1]), sent, strict=True):
        name = headers["event_type"].decode()
        assert name == event.event_type
        assert value[:2] == b"\xc3\x01"
        version = headers["schema_version"].decode() if "schema_version" in headers else None
        newest = max(SCHEMAS.glob(f"{name}.v*.avsc"),
                     key=lambda p: int(p.name.split(".v")[1].split(".")[0]))
        path = SCHEMAS / f"{name}.v{version}.avsc" if version else newest
        schema = fastavro.parse_schema(json.loads(path.read_text()))
        body = io.BytesIO(value[10:])
        record = fastavro.schemaless_reader(body, schema, None)
        assert record["header"]["event_id"] == event.header.event_id
        assert record["header"]["run_id"] == run


def test_garbage_on_runs_is_quarantined_and_reading_goes_on(bootstrap: str) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    producer = EventProducer(bootstrap)
    good = [RunQueued(header=header(run, i, 0), reason=f"r{i}") for i in range(3)]
    producer.send(RUNS, good[0])
    producer.send_bytes(RUNS, run, b"\x00garbage, not avro", [("event_type", b"RunQueued")])
    producer.send(RUNS, good[1])
    valid = default_codec().encode(good[2])
    producer.send_bytes(RUNS, run, valid[:2] + b"\x01" * 8 + valid[10:])  # unknown fingerprint
    producer.send(RUNS, good[2])
    producer.flush()

    reported = []
    quarantine = Quarantine(producer, report=reported.append)
    consumer = EventConsumer(bootstrap, f"g-{uuid.uuid4().hex}", [RUNS], quarantine=quarantine)
    seen = []
    deadline = time.monotonic() + 60
    while len(seen) < 3 and time.monotonic() < deadline:
        seen += [r for r in consumer.poll(1.0) if r.event.run_id == run]
    consumer.close()

    assert [r.event for r in seen] == good
    mine = [q for q in reported if q.offset > seen[0].offset and q.partition == seen[0].partition]
    assert [q.reason for q in mine] == ["bad_magic", "unknown_fingerprint"]
    offsets = [r.offset for r in seen]
    assert mine[0].offset == offsets[0] + 1 and mine[1].offset == offsets[1] + 1

    # The quarantine keeps the exact bytes and says where they came from.
    kept = [r for r in _raw_values(bootstrap, QUARANTINE)
            if r[3].get("origin_offset") in {str(q.offset).encode() for q in mine}
            and r[3].get("origin_topic") == RUNS.encode()]
    values = {r[2] for r in kept}
    assert b"\x00garbage, not avro" in values
    assert {r[3]["reason"] for r in kept} >= {b"bad_magic", b"unknown_fingerprint"}


def test_explicit_commit_is_where_a_group_resumes(bootstrap: str) -> None:
    topic = _topic(bootstrap, partitions=1)
    run = f"run-{uuid.uuid4().hex[:8]}"
    producer = EventProducer(bootstrap)
    events = [HeartbeatRecorded(header=header(run, i), logical_id="r0", node="n", step=i)
              for i in range(6)]
    for e in events:
        producer.send(topic, e)
    producer.flush()
    group = f"g-{uuid.uuid4().hex}"

    def read(n: int, commit: bool) -> list[int]:
        c = EventConsumer(bootstrap, group, [topic])
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += [r.event.step for r in c.poll(1.0, max_records=n - len(got))]
        if commit:
            c.commit()
        c.close()
        return got

    assert read(3, commit=True) == [0, 1, 2]
    assert read(3, commit=False) == [3, 4, 5]  # resumes after the committed offset
    assert read(3, commit=False) == [3, 4, 5]  # nothing committed: the same records again


def test_transactions_commit_abort_and_fence(bootstrap: str) -> None:
    topic = _topic(bootstrap, partitions=1)
    run = f"run-{uuid.uuid4().hex[:8]}"
    txn_id = f"controller-{uuid.uuid4().hex[:8]}"
    first = TransactionalWriter(bootstrap, txn_id)
    first.init()
    with first.transaction() as tx:
        tx.send(topic, RunQueued(header=header(run, 0, 0), reason="committed"))
    with pytest.raises(RuntimeError), first.transaction() as tx:
        tx.send(topic, RunQueued(header=header(run, 1, 0), reason="aborted"))
        raise RuntimeError("the controller failed mid-transaction")

    second = TransactionalWriter(bootstrap, txn_id)
    second.init()  # bumps the epoch: the first writer is now a zombie
    with pytest.raises(ProducerFenced), first.transaction() as tx:
        tx.send(topic, RunQueued(header=header(run, 2, 0), reason="zombie"))
    with second.transaction() as tx:
        tx.send(topic, RunQueued(header=header(run, 3, 0), reason="successor"))

    reasons = [r.event.reason for r in read_log(bootstrap, topic)]  # type: ignore[attr-defined]
    assert reasons == ["committed", "successor"]


def test_a_dead_bootstrap_is_a_clear_error() -> None:
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=r"127\.0\.0\.1:1"):
        check_broker("127.0.0.1:1", timeout_s=2)
    assert time.monotonic() - started < 30


def test_events_dump_shows_fold_verdicts(bootstrap: str) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    events = one_of_each(run)
    submitted, admitted = events[0], events[3]
    producer = EventProducer(bootstrap)
    producer.send(RUNS, submitted)
    producer.send(RUNS, admitted)
    producer.send(RUNS, GenerationStarted(header=header(run, 50, 1), members=MEMBERS,
                                          reason="admitted"))
    producer.send(RUNS, ManifestProposed(header=header(run, 51, 0), step=5, manifest_path="m",
                                         manifest_digest="d"))
    producer.flush()
    out = subprocess.run(
        [sys.executable, "-m", "runledger.cli", "events", "dump", "--topic", RUNS, "--run", run,
         "--json", "--bootstrap", bootstrap],
        capture_output=True, text=True, timeout=120, check=True,
    )
    docs = [json.loads(line) for line in out.stdout.splitlines()]
    assert [d["type"] for d in docs] == [
        "RunSubmitted", "RunAdmitted", "GenerationStarted", "ManifestProposed"
    ]
    assert all(d["header"]["run_id"] == run for d in docs)
    assert docs[0]["payload"]["principal"] == "alice"
    assert [d["verdict"]["accepted"] for d in docs] == [True, True, True, False]
    assert docs[3]["verdict"]["reason"] == "stale_generation"
