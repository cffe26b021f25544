"""``events.kafka.statuslog`` against the session's broker: the newest summary per run, read
through the group-less reader, keys compared before anything is decoded.

A run's newer summary replaces its older one, a tombstone removes it, an undecodable
newest value goes to ``on_undecodable``; one run's read takes only its partition,
a partitions read only those partitions. The partitions are counted as created.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from events.errors import DecodeError
from events.fold import apply
from events.kafka.connection import client_config
from events.kafka.statuslog import read_status, status_partitions
from events.partition import PARTITIONER, partition_for
from events.state import RunState
from events.status import NO_NOTES, RunStatusChanged, encode, summarize
from events.topics import STATUS
from tests.events.builders import Ev

pytestmark = pytest.mark.kafka


def summary(run: str, at: int) -> RunStatusChanged:
    t = apply(None, Ev(run).submitted())
    assert isinstance(t.state, RunState)
    return summarize(t.state, NO_NOTES, at)


def test_the_newest_summary_of_each_run(bootstrap: str, unique: str) -> None:
    newer, gone, broken = (f"run-{name}-{unique}" for name in ("newer", "gone", "broken"))
    first, last = summary(newer, 1), summary(newer, 2)
    producer = Producer(client_config(bootstrap, {"partitioner": PARTITIONER}))
    for key, value in [(newer, encode(first)), (gone, encode(summary(gone, 1))),
                       (broken, encode(summary(broken, 1))), (newer, encode(last)),
                       (gone, None), (broken, b"not a summary")]:
        producer.produce(STATUS, key=key, value=value)
    producer.flush(30)
    n = status_partitions(bootstrap)
    assert n is not None and n >= 1
    assert read_status(bootstrap, run_id=newer) == {newer: last}
    assert read_status(bootstrap, run_id=gone) == {}
    undecodable: list[tuple[str, DecodeError]] = []
    assert read_status(bootstrap, run_id=broken,
                       on_undecodable=lambda k, e: undecodable.append((k, e))) == {}
    assert [k for k, _ in undecodable] == [broken]
    part = partition_for(newer, n)
    found = read_status(bootstrap, partitions=[part], on_undecodable=lambda k, e: None)
    assert found[newer] == last and gone not in found
    assert {partition_for(run, n) for run in found} == {part}
    everything = read_status(bootstrap, on_undecodable=lambda k, e: None)
    assert everything[newer] == last and gone not in everything and broken not in everything
