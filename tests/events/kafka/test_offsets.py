"""A reader's start below the log's start is a named gap, never a silent jump: the pure
rule, then a real broker whose records ``AdminClient.delete_records`` removes (a stored
offset below the low watermark at the start; a reader that deletion overtakes; a group
member whose committed offset is below it, which says so and reads on)."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from events.kafka.clients import EventProducer
from events.kafka.connection import client_config
from events.kafka.consume import EventConsumer
from events.kafka.offsets import BEGINNING, END, LogGap, gap_at_start
from events.kafka.reader import LogReader
from events.record import Record
from tests.events.kafka.test_reader import SMALL_FETCHES, beat, make_topic


def test_only_a_stored_offset_below_the_low_watermark_is_a_gap() -> None:
    marks = {("t", 0): (5, 9), ("t", 1): (0, 3)}
    assert gap_at_start(BEGINNING, marks) is None and gap_at_start(END, marks) is None
    assert gap_at_start({("t", 0): 5, ("t", 1): 0}, marks) is None
    assert gap_at_start({("t", 1): 2}, marks) is None  # not named: from the beginning
    gap = gap_at_start({("t", 0): 2}, marks)
    assert gap is not None and (gap.topic, gap.partition, gap.offset, gap.low, gap.lost) == (
        "t", 0, 2, 5, 3)
    assert str(gap) == ("t[0]: the next offset to read, 2, is below the partition's low "
                        "watermark 5: offsets 2..4 (up to 3 records) were deleted (retention "
                        "or delete_records) before they were read")
    past = gap_at_start({("t", 1): 4}, marks)  # the end is 3: the topic was recreated
    assert past is not None and past.lost == 0 and str(past) == (
        "t[1]: the next offset to read, 4, is past the partition's end 3: the log was "
        "truncated or the topic recreated since it was read")
    assert gap_at_start({("t", 1): 3}, marks) is None  # at the end: nothing new yet


def delete_below(bootstrap: str, topic: str, offset: int) -> None:
    admin = AdminClient(client_config(bootstrap, {}))
    futures = admin.delete_records([TopicPartition(topic, 0, offset)])
    for future in futures.values():
        future.result(30)


def fill(bootstrap: str, topic: str, n: int) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    producer = EventProducer(bootstrap)
    for i in range(n):  # one record batch each: a small fetch takes a few
        producer.send(topic, beat(run, i))
        producer.flush()


@pytest.mark.kafka
def test_a_stored_offset_below_the_low_watermark_raises_the_gap(bootstrap: str,
                                                               topic_name: str) -> None:
    topic = make_topic(bootstrap, topic_name, 1)
    fill(bootstrap, topic, 10)
    delete_below(bootstrap, topic, 6)
    with pytest.raises(LogGap) as raised:
        LogReader(bootstrap, [topic], start={(topic, 0): 3})
    assert (raised.value.offset, raised.value.low, raised.value.lost) == (3, 6, 3)
    # At the low watermark, or from the beginning, nothing is missing: the rest is read.
    for start in ({(topic, 0): 6}, BEGINNING):
        with LogReader(bootstrap, [topic], start=start, bounded=True) as reader:
            assert [r.offset for r in reader.records()] == [6, 7, 8, 9]


@pytest.mark.kafka
def test_a_reader_that_deletion_overtakes_raises_the_gap(bootstrap: str,
                                                        topic_name: str) -> None:
    topic = make_topic(bootstrap, topic_name, 1)
    fill(bootstrap, topic, 60)
    got: list[Record] = []
    with LogReader(bootstrap, [topic], config=SMALL_FETCHES) as reader:
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got += reader.read_records(1, 0.5)
        assert got, "no record within 30 s"
        delete_below(bootstrap, topic, 50)
        with pytest.raises(LogGap) as raised:
            while time.monotonic() < deadline + 30:
                got += reader.read_records(10, 0.5)
    # What was fetched before the deletion was handed out; then the gap, never offset 50.
    assert raised.value.low == 50 and raised.value.offset == got[-1].offset + 1
    assert all(r.offset < 50 for r in got)


@pytest.mark.kafka
def test_a_group_member_assigned_below_the_start_says_so_and_reads_on(
        bootstrap: str, topic_name: str, unique: str, caplog: pytest.LogCaptureFixture) -> None:
    topic = make_topic(bootstrap, topic_name, 1)
    fill(bootstrap, topic, 10)
    group = f"test-{unique}"
    first = EventConsumer(bootstrap, group, [topic])
    try:
        deadline = time.monotonic() + 30
        while not first.assigned and time.monotonic() < deadline:
            first.poll(0.5)
        first.commit([TopicPartition(topic, 0, 3)])
    finally:
        first.close()
    delete_below(bootstrap, topic, 6)
    caplog.set_level(logging.ERROR, logger="runledger.events.consume")
    member = EventConsumer(bootstrap, group, [topic])
    try:
        got: list[Record] = []
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            got += member.poll(0.5)
    finally:
        member.close()
    assert [r.offset for r in got] == [6, 7, 8, 9]
    assert f"{topic}[0]: the next offset to read, 3, is below the partition's low watermark 6" \
        f": offsets 3..5 (up to 3 records) were deleted" in caplog.text
    assert f"group {group} reads on from offset 6" in caplog.text
