"""events/kafka/clients.py on a real broker: every event type round trips (its bytes readable with
the schema files alone), transactions commit, abort and fence, a dead bootstrap is a clear
error.

The quarantine is exercised through the group consumer, in tests/events/kafka/test_consume.py."""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import KafkaError

from events.errors import BrokerUnavailable, NotAuthorized, ProducerFenced
from events.kafka.broker import check_broker
from events.kafka.clients import EventProducer
from events.kafka.consume import read_log
from events.kafka.transactions import TransactionalWriter
from tests.events.broker import new_topic, raw_values
from tests.events.builders import Ev
from tests.events.sample_events import one_of_each

pytestmark = pytest.mark.kafka
SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


def test_every_event_type_round_trips_through_the_broker(bootstrap: str) -> None:
    topic = new_topic(bootstrap)
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
    raw = raw_values(bootstrap, topic)
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


def test_transactions_commit_abort_and_fence(bootstrap: str) -> None:
    topic = new_topic(bootstrap, partitions=1)
    run = f"run-{uuid.uuid4().hex[:8]}"
    ev = Ev(run)
    txn_id = f"controller-{uuid.uuid4().hex[:8]}"
    first = TransactionalWriter(bootstrap, txn_id)
    first.init()
    with first.transaction() as tx:
        tx.send(topic, ev.queued(reason="committed"))
    with pytest.raises(RuntimeError), first.transaction() as tx:
        tx.send(topic, ev.queued(reason="aborted"))
        raise RuntimeError("the controller failed mid-transaction")

    second = TransactionalWriter(bootstrap, txn_id)
    second.init()  # bumps the epoch: the first writer is now a zombie
    with pytest.raises(ProducerFenced), first.transaction() as tx:
        tx.send(topic, ev.queued(reason="zombie"))
    with second.transaction() as tx:
        tx.send(topic, ev.queued(reason="successor"))

    reasons = [r.event.reason for r in read_log(bootstrap, topic)]  # type: ignore[attr-defined]
    assert reasons == ["committed", "successor"]


def test_a_dead_bootstrap_is_a_clear_error() -> None:
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=r"127\.0\.0\.1:1"):
        check_broker("127.0.0.1:1", timeout_s=2)
    assert time.monotonic() - started < 30


class _TrippedProducer:
    """A librdkafka producer whose flush fails bare (``SystemError``) on a fatal error whose
    delivery report runs only at the next poll, as confluent-kafka did on a loaded machine."""

    def __init__(self, producer: EventProducer, topic: str) -> None:
        self.owner, self.topic, self.polls = producer, topic, 0

    def flush(self, timeout: float) -> int:
        raise SystemError("<method 'flush' of 'cimpl.Producer' objects> returned NULL")

    def poll(self, timeout: float) -> int:
        self.polls += 1
        if self.polls == 3:  # the report arrives a little later
            err = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "refused a PID", fatal=True)
            self.owner._failed.append((err, self.topic, None))
        return 0


def test_a_bare_system_error_from_flush_is_reported_as_the_fatal_error_behind_it() -> None:
    producer = EventProducer("127.0.0.1:1")
    producer._topics.add("runledger.runs")
    producer._producer = _TrippedProducer(producer, "runledger.runs")  # type: ignore[assignment]
    with pytest.raises(NotAuthorized, match=r"may not write runledger\.runs"):
        producer.flush(1)


def test_a_system_error_with_no_kafka_error_behind_it_stays_a_bug() -> None:
    producer = EventProducer("127.0.0.1:1")
    tripped = _TrippedProducer(producer, "runledger.runs")
    tripped.polls = -10_000  # no report ever comes
    producer._producer = tripped  # type: ignore[assignment]
    with pytest.raises(SystemError):
        producer.flush(1)
