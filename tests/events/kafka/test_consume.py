"""events/kafka/consume.py: the group consumer on a real broker: undecodable records are
quarantined and reading goes on; a group resumes where it explicitly committed; held
partitions give nothing until resumed, and a rewind reads from the committed offsets;
a revocation counts as a change of assignment the moment it happens; a record too large
to copy whole is quarantined without its value, saying so.

``read_log`` is exercised by tests/events/kafka/test_clients.py, which reads back what the
producers wrote with it.
"""

from __future__ import annotations

import time
import uuid

import pytest

from events.codec import default_codec
from events.kafka.clients import EventProducer, Quarantine
from events.kafka.consume import EventConsumer
from events.limits import RECORD_MAX_BYTES
from events.topics import QUARANTINE, RUNS
from tests.events.broker import new_topic, raw_values
from tests.events.builders import Ev

pytestmark = pytest.mark.kafka


def test_garbage_on_runs_is_quarantined_and_reading_goes_on(bootstrap: str) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    producer = EventProducer(bootstrap)
    ev = Ev(run)
    good = [ev.queued(reason=f"r{i}") for i in range(3)]
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
    kept = [r for r in raw_values(bootstrap, QUARANTINE)
            if r[3].get("origin_offset") in {str(q.offset).encode() for q in mine}
            and r[3].get("origin_topic") == RUNS.encode()]
    values = {r[2] for r in kept}
    assert b"\x00garbage, not avro" in values
    assert {r[3]["reason"] for r in kept} >= {b"bad_magic", b"unknown_fingerprint"}


def test_explicit_commit_is_where_a_group_resumes(bootstrap: str) -> None:
    topic = new_topic(bootstrap, partitions=1)
    run = f"run-{uuid.uuid4().hex[:8]}"
    producer = EventProducer(bootstrap)
    ev = Ev(run)
    events = [ev.heartbeat(1, "r0", step=i, node="n") for i in range(6)]
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




def _poll_until(consumer: EventConsumer, want: int, timeout_s: float = 20.0) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got += [r.event.header.event_id for r in consumer.poll(0.5)]
    return got


def test_held_partitions_give_nothing_until_resumed_and_rewind_reads_again(
    bootstrap: str,
) -> None:
    topic = new_topic(bootstrap, partitions=1)
    producer = EventProducer(bootstrap)
    ev = Ev(f"run-{uuid.uuid4().hex[:8]}")
    sent = [ev.queued(reason=f"r{i}") for i in range(3)]
    for event in sent:
        producer.send(topic, event)
    producer.flush()
    c = EventConsumer(bootstrap, f"g-{uuid.uuid4().hex}", [topic], hold_assigned=True)
    try:
        deadline = time.monotonic() + 20
        while not c.assignment and time.monotonic() < deadline:
            assert c.poll(0.5) == []
        assert c.assignment == {(topic, 0)} and c.assignments == 1
        assert c.poll(1.0) == []  # held: the caller has not caught up yet
        c.resume([(topic, 0)])
        ids = [e.header.event_id for e in sent]
        assert _poll_until(c, 3) == ids
        c.rewind()  # an aborted transaction: back to the committed offsets (none: the start)
        assert _poll_until(c, 3) == ids
    finally:
        c.close()


def test_a_revocation_counts_as_a_change_before_the_new_assignment(bootstrap: str) -> None:
    """A member that loses partitions to a joining one sees the revocation as a change
    of its own (the controller stops deciding for them then, not seconds later when
    the group hands out the new assignment): assign, revoke, assign = three changes."""
    topic = new_topic(bootstrap, partitions=2)
    group = f"g-{uuid.uuid4().hex}"
    first = EventConsumer(bootstrap, group, [topic])
    second: EventConsumer | None = None
    try:
        deadline = time.monotonic() + 30
        while len(first.assignment) < 2 and time.monotonic() < deadline:
            first.poll(0.3)
        assert first.assignment == {(topic, 0), (topic, 1)} and first.assignments == 1
        second = EventConsumer(bootstrap, group, [topic])
        deadline = time.monotonic() + 60
        while (len(first.assignment) != 1 or len(second.assignment) != 1) \
                and time.monotonic() < deadline:
            first.poll(0.3)
            second.poll(0.3)
        assert len(first.assignment) == 1 and len(second.assignment) == 1
        assert first.assignment.isdisjoint(second.assignment)
        assert first.assignments >= 3, first.assignments
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_record_too_large_to_copy_whole_is_quarantined_without_its_value(
        bootstrap: str) -> None:
    """Undecodable bytes as large as a producer may send: the copy with its origin headers
    could never be written, so it keeps its origin and reason and says where the value is."""
    topic, kept_on = new_topic(bootstrap, partitions=1), new_topic(bootstrap, partitions=1)
    producer = EventProducer(bootstrap)
    big = b"\x00" + b"g" * (RECORD_MAX_BYTES - 200)
    producer.send_bytes(topic, "run-big", big)
    producer.flush()
    reported = []
    quarantine = Quarantine(producer, topic=kept_on, report=reported.append)
    consumer = EventConsumer(bootstrap, f"g-{uuid.uuid4().hex}", [topic], quarantine=quarantine)
    deadline = time.monotonic() + 60
    while not reported and time.monotonic() < deadline:
        assert consumer.poll(1.0) == []
    consumer.close()
    assert [q.reason for q in reported] == ["bad_magic"]
    ((_, _, value, headers),) = raw_values(bootstrap, kept_on)
    assert value == b"" and headers["origin_topic"] == topic.encode()
    assert headers["detail"].decode().startswith(
        f"value of {len(big)} bytes not kept here: with its origin headers it would pass the "
        f"{RECORD_MAX_BYTES}-byte record limit; read it at its origin. ")
