"""The group-less log reader on a real broker: assignment from the beginning, the end
or stored offsets, of chosen partitions; positions; the end of the log past transaction
markers; decoding and quarantine, or records handed out undecoded as stored; key
filtering; watermarks and partition lists; a bounded read under a steady trickle;
patience with a broker that is not there, or lost mid-read (a broker of its own)."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from events.errors import BrokerUnavailable, KafkaOperationError
from events.kafka.clients import EventProducer, event_type_of
from events.kafka.connection import client_config
from events.kafka.reader import BEGINNING, END, LogReader, Watermarks, topic_partitions
from events.kafka.transactions import TransactionalWriter
from events.model import HeartbeatRecorded
from events.partition import partition_for
from events.record import Quarantined, Record
from runledger.stack.layout import wait_ports_free
from tests.events.builders import Ev
from tests.stacks import private_stack

pytestmark = pytest.mark.kafka


def make_topic(bootstrap: str, name: str, partitions: int) -> str:
    """A new topic whose every partition's leader answers watermark lookups."""
    admin = AdminClient(client_config(bootstrap, {}))  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    marks = Watermarks(bootstrap, [name])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if len(marks.get()) == partitions:
                    return name
            except (KafkaOperationError, BrokerUnavailable):  # no leader elected yet
                pass
            time.sleep(0.1)
        raise AssertionError(f"{name}: no leader answered within 30 s")
    finally:
        marks.close()


def beat(run: str, n: int) -> HeartbeatRecorded:
    return Ev(run).heartbeat(1, "r0", step=n, node="n1", n=n)


def send(bootstrap: str, topic: str, events: list[HeartbeatRecorded]) -> None:
    producer = EventProducer(bootstrap)
    for e in events:
        producer.send(topic, e)
    producer.flush()


def drain(reader: LogReader, want: int, timeout_s: float = 30.0) -> list[Record | Quarantined]:
    """Read until ``want`` items came (or the time is up); every item, in arrival order."""
    out: list[Record | Quarantined] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < want and time.monotonic() < deadline:
        out += reader.read(100, 0.5)
    return out


def test_from_the_beginning_every_partition_until_caught_up(bootstrap: str,
                                                            topic_name: str) -> None:
    topic = make_topic(bootstrap, topic_name, 3)
    runs = [f"run-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    sent = [beat(run, n) for n in range(5) for run in runs]
    send(bootstrap, topic, sent)
    with LogReader(bootstrap, [topic]) as reader:
        assert [p for _, p in reader.partitions] == [0, 1, 2]
        assert not reader.caught_up
        got = list(reader.records())
        assert reader.caught_up
        marks = reader.watermarks()
        positions = reader.positions
    assert sorted(r.event.header.event_id for r in got) == sorted(
        e.header.event_id for e in sent)
    for run in runs:  # one key, one partition: each run's records in send order
        assert [r.event.step for r in got if r.event.run_id == run] == list(range(5))
    for (t, p), (low, high) in marks.items():
        assert t == topic and low == 0
        assert positions.get((t, p), 0) == high  # one past the last record read
    assert sum(high for _, high in marks.values()) == len(sent)


def test_from_the_end_only_what_comes_later(bootstrap: str, topic_name: str) -> None:
    topic = make_topic(bootstrap, topic_name, 2)
    run = f"run-{uuid.uuid4().hex[:8]}"
    send(bootstrap, topic, [beat(run, n) for n in range(3)])
    with LogReader(bootstrap, [topic], start=END) as reader:
        assert reader.caught_up  # nothing to catch up with
        send(bootstrap, topic, [beat(run, n) for n in range(3, 6)])
        got = drain(reader, 3)
        assert not reader.read(100, 1.0)
    assert [r.event.step for r in got if isinstance(r, Record)] == [3, 4, 5]


def test_from_stored_offsets_and_the_beginning_for_the_rest(bootstrap: str,
                                                            topic_name: str) -> None:
    topic = make_topic(bootstrap, topic_name, 2)
    # 20 keys: both partitions get some (all on one: a chance of 2 in a million).
    runs = [f"run-{uuid.uuid4().hex[:8]}" for _ in range(20)]
    send(bootstrap, topic, [beat(run, n) for run in runs for n in range(3)])
    with LogReader(bootstrap, [topic]) as reader:
        everything = list(reader.records())
    ends = {p: 1 + max(r.offset for r in everything if r.partition == p) for p in (0, 1)}
    assert min(ends.values()) >= 3
    # Partition 0 resumes at its offset 2; partition 1 is not named: from its beginning.
    with LogReader(bootstrap, [topic], start={(topic, 0): 2}) as reader:
        got = list(reader.records())
    assert [r.offset for r in got if r.partition == 0] == list(range(2, ends[0]))
    assert [r.offset for r in got if r.partition == 1] == list(range(ends[1]))
    first = {(r.partition, r.offset): r.event for r in everything}
    assert all(r.event == first[(r.partition, r.offset)] for r in got)


def test_undecodable_records_are_handed_over_with_their_bytes(
        bootstrap: str, topic_name: str, caplog: pytest.LogCaptureFixture) -> None:
    topic = make_topic(bootstrap, topic_name, 1)
    run = f"run-{uuid.uuid4().hex[:8]}"
    producer = EventProducer(bootstrap)
    producer.send(topic, beat(run, 0))
    producer.send_bytes(topic, run, b"\x00garbage, not avro",
                        [("event_type", b"HeartbeatRecorded")])
    producer.send(topic, beat(run, 1))
    producer.send_bytes(topic, None, b"")  # an empty value, and no key
    producer.flush()

    with LogReader(bootstrap, [topic]) as reader:
        items = drain(reader, 4)
    assert [type(i).__name__ for i in items] == ["Record", "Quarantined", "Record", "Quarantined"]
    bad, empty = items[1], items[3]
    assert isinstance(bad, Quarantined) and isinstance(empty, Quarantined)
    assert (bad.topic, bad.partition, bad.offset, bad.key) == (topic, 0, 1, run)
    assert (bad.reason, bad.value) == ("bad_magic", b"\x00garbage, not avro")
    assert bad.detail and "not avro" not in str(bad)  # the bytes are not in the log line
    assert (empty.offset, empty.key, empty.reason, empty.value) == (3, None, "truncated", b"")

    # read_records hands them to on_quarantine; without one they are logged.
    seen: list[Quarantined] = []
    with LogReader(bootstrap, [topic], on_quarantine=seen.append) as reader:
        assert [r.offset for r in reader.records()] == [0, 2]
    assert [q.offset for q in seen] == [1, 3]
    with caplog.at_level(logging.WARNING, logger="runledger.events.reader"), \
            LogReader(bootstrap, [topic]) as reader:
        assert len(list(reader.records())) == 2
    logged = [r.getMessage() for r in caplog.records if r.name == "runledger.events.reader"]
    assert len(logged) == 2 and all(f"{topic}[0]@" in m for m in logged)
    assert "bad_magic" in logged[0] and "truncated" in logged[1]


def test_caught_up_past_transaction_markers_and_never_an_aborted_record(
        bootstrap: str, topic_name: str) -> None:
    topic = make_topic(bootstrap, topic_name, 1)
    run = f"run-{uuid.uuid4().hex[:8]}"
    ev = Ev(run)
    writer = TransactionalWriter(bootstrap, f"test-reader-{uuid.uuid4().hex[:8]}")
    writer.init()
    with writer.transaction() as tx:
        tx.send(topic, ev.queued(reason="kept"))
    with pytest.raises(RuntimeError), writer.transaction() as tx:
        tx.send(topic, ev.queued(reason="aborted"))
        raise RuntimeError("abort")
    with writer.transaction() as tx:
        tx.send(topic, ev.queued(reason="kept too"))

    with LogReader(bootstrap, [topic]) as reader:
        got = list(reader.records())
    assert [r.event.reason for r in got] == ["kept", "kept too"]
    last = got[-1].offset
    # A commit returns before the coordinator has written its markers: wait for the last.
    marks = Watermarks(bootstrap, [topic])
    deadline = time.monotonic() + 30
    while marks.get()[(topic, 0)][1] < last + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    marks.close()
    with LogReader(bootstrap, [topic]) as reader:
        again = list(reader.records())  # would never end if the last marker were not passed
        reached, positions = reader.reached, reader.positions
    assert [r.offset for r in again] == [r.offset for r in got]
    assert positions == {(topic, 0): last + 1}  # one past the last record...
    assert reached == {(topic, 0): last + 2}  # ... and the end is past its commit marker


def test_a_key_filter_passes_other_keys_over_undecoded(bootstrap: str, topic_name: str) -> None:
    topic = make_topic(bootstrap, topic_name, 1)
    mine, other = f"run-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"
    producer = EventProducer(bootstrap)
    producer.send(topic, beat(mine, 0))
    producer.send_bytes(topic, other, b"garbage of another run")
    producer.send(topic, beat(other, 1))
    producer.send(topic, beat(mine, 2))
    producer.flush()
    seen: list[Quarantined] = []
    with LogReader(bootstrap, [topic], key=mine, on_quarantine=seen.append) as reader:
        got = list(reader.records())
        positions = reader.positions
    assert [(r.offset, r.event.run_id) for r in got] == [(0, mine), (3, mine)]
    assert seen == []  # another run's garbage is not this reader's business
    assert positions == {(topic, 0): 4}


def test_a_select_by_event_type_passes_other_types_over_undecoded(
    bootstrap: str, topic_name: str,
) -> None:
    """`runledger nodes` reads only the node facts and failures of runledger.runs: the
    rest of a long log is judged by its event_type header, never decoded."""
    topic = make_topic(bootstrap, topic_name, 1)
    run = f"run-{uuid.uuid4().hex[:8]}"
    producer = EventProducer(bootstrap)
    producer.send(topic, beat(run, 0))
    producer.send_bytes(topic, run, b"not avro", [("event_type", b"StepCommitted")])
    producer.send_bytes(topic, run, b"not avro either", [("event_type", b"HeartbeatRecorded")])
    producer.send(topic, beat(run, 3))
    producer.flush()
    seen: list[Quarantined] = []
    with LogReader(bootstrap, [topic], on_quarantine=seen.append, bounded=True,
                   select=lambda m: event_type_of(m) == "HeartbeatRecorded") as reader:
        got = list(reader.records())
    assert [r.offset for r in got] == [0, 3]
    # The selected type is decoded, so its garbage is still caught; the other is not read.
    assert [q.offset for q in seen] == [2]


def test_a_key_partition_reader_reads_only_the_partition_of_its_key(
    bootstrap: str, topic_name: str,
) -> None:
    topic = make_topic(bootstrap, topic_name, 6)
    runs = [f"run-{uuid.uuid4().hex[:8]}" for _ in range(12)]
    producer = EventProducer(bootstrap)  # places by murmur2 of the run id, as ours all do
    for i, run in enumerate(runs):
        producer.send(topic, beat(run, i))
    producer.flush()
    mine = runs[0]
    with LogReader(bootstrap, [topic], key=mine, key_partition=True, bounded=True) as reader:
        got = list(reader.records())
        assert reader.partitions == [(topic, partition_for(mine, 6))]
    assert [r.event.run_id for r in got] == [mine]


def test_undecoded_messages_of_chosen_partitions_come_as_stored(
        bootstrap: str, topic_name: str) -> None:
    """What the audit and the status reader take: value bytes (none for a tombstone),
    keys and headers as written, only from the partitions asked for, to the ends."""
    topic = make_topic(bootstrap, topic_name, 3)
    producer = Producer(client_config(bootstrap, {}))
    signed: list[tuple[str, str | bytes | None]] = [
        ("sig", b"\xff" * 8), ("h", b""), ("h", b"2")]
    for part, key, value, headers in [(0, b"a", b"\x00not avro", signed), (1, b"b", None, []),
                                      (2, b"c", b"elsewhere", []), (0, None, b"", [])]:
        producer.produce(topic, value=value, key=key, partition=part, headers=headers)
    producer.flush(30)
    seen: list[Quarantined] = []
    with LogReader(bootstrap, [topic], partitions=[0, 1], bounded=True,
                   on_quarantine=seen.append) as reader:
        assert reader.partitions == [(topic, 0), (topic, 1)]
        got = []
        while not reader.caught_up:
            got += reader.read_messages(100, 0.5)
        positions = reader.positions
    stored = sorted((m.partition(), m.offset(), m.key(), m.value(), m.headers()) for m in got)
    assert stored == [
        (0, 0, b"a", b"\x00not avro", [("sig", b"\xff" * 8), ("h", b""), ("h", b"2")]),
        (0, 1, None, b"", None), (1, 0, b"b", None, None)]
    assert seen == [] and positions == {(topic, 0): 2, (topic, 1): 1}


def test_topic_partitions_are_listed_once(bootstrap: str, topic_name: str) -> None:
    topic = make_topic(bootstrap, topic_name, 2)
    assert topic_partitions(bootstrap, [topic]) == [(topic, 0), (topic, 1)]
    with pytest.raises(KafkaOperationError, match="does not exist"):
        topic_partitions(bootstrap, [f"{topic}.missing"])


def test_beginning_is_the_default_and_a_missing_topic_is_an_error(bootstrap: str) -> None:
    assert BEGINNING == "beginning"
    with pytest.raises(KafkaOperationError, match="does not exist"):
        LogReader(bootstrap, [f"test.missing-{uuid.uuid4().hex[:8]}"])


def test_no_broker_is_a_clear_error() -> None:
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable):
        LogReader("127.0.0.1:1", ["runledger.runs"], timeout_s=2.0)
    assert time.monotonic() - started < 30


def test_watermarks_of_every_partition(bootstrap: str, topic_name: str) -> None:
    topic = make_topic(bootstrap, topic_name, 2)
    run = f"run-{uuid.uuid4().hex[:8]}"
    marks = Watermarks(bootstrap, [topic])
    try:
        assert marks.get() == {(topic, 0): (0, 0), (topic, 1): (0, 0)}
        send(bootstrap, topic, [beat(run, n) for n in range(7)])
        after = marks.get()
    finally:
        marks.close()
    assert set(after) == {(topic, 0), (topic, 1)}
    assert sorted(high for _, high in after.values()) == [0, 7]  # one key, one partition
    assert all(low == 0 for low, _ in after.values())


def test_a_bounded_reader_stops_at_the_start_ends_however_much_keeps_arriving(
        bootstrap: str, topic_name: str) -> None:
    topic = make_topic(bootstrap, topic_name, 3)
    before = [beat(f"run-{uuid.uuid4().hex[:8]}", n) for n in range(30)]
    send(bootstrap, topic, before)
    stop = threading.Event()

    def trickle() -> None:  # another run, reporting steadily throughout
        producer, other, n = EventProducer(bootstrap), f"run-{uuid.uuid4().hex[:8]}", 0
        while not stop.is_set():
            producer.send(topic, beat(other, n))
            producer.flush()
            n += 1
            time.sleep(0.02)

    writer = threading.Thread(target=trickle)
    writer.start()
    try:
        time.sleep(0.5)
        with LogReader(bootstrap, [topic], bounded=True) as reader:
            ends = reader.ends
            got: list[Record] = []
            for record in reader.records():
                got.append(record)
                time.sleep(0.02)  # a slow caller: the trickle's records pile up meanwhile
            positions = reader.positions
        time.sleep(0.3)
        marks = Watermarks(bootstrap, [topic])
        later = marks.get()
        marks.close()
    finally:
        stop.set()
        writer.join(10)
    # Exactly the records below the ends taken at the start: everything sent before
    # it, none of what the trickle appended while it read (and it kept appending).
    assert {e.header.event_id for e in before} <= {r.event.header.event_id for r in got}
    assert len(got) == sum(ends.values())
    assert all(r.offset < ends[(r.topic, r.partition)] for r in got)
    assert positions == {tp: end for tp, end in ends.items() if end > 0}
    assert sum(high for _, high in later.values()) > sum(ends.values())


def test_patience_waits_out_a_missing_broker_then_names_it() -> None:
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=r"at 127\.0\.0\.1:1 for 2 s"):
        LogReader("127.0.0.1:1", ["runledger.runs"], timeout_s=1.0, retry_s=2.0)
    assert 2.0 <= time.monotonic() - started < 20


def test_patience_alone_does_not_wait_for_a_broker_that_is_not_there() -> None:
    """``patience_s`` bounds a silent read; without ``retry_s`` a failing broker is
    named at once (``events.kafka.statuslog``: its callers retry)."""
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=r"at 127\.0\.0\.1:1: "):
        LogReader("127.0.0.1:1", ["runledger.runs"], timeout_s=1.0, patience_s=30.0)
    assert time.monotonic() - started < 20


# Small fetches: a reader that has read a little has not prefetched the rest.
SMALL_FETCHES = {"fetch.max.bytes": 1000, "message.max.bytes": 1000,
                 "max.partition.fetch.bytes": 1000, "queued.max.messages.kbytes": 1,
                 "queued.min.messages": 1}


@pytest.mark.slow
def test_a_broker_lost_mid_read_is_waited_for_then_named(tmp_path: Path) -> None:
    """A bounded reader whose broker stops mid-read gives up after retry_s with
    BrokerUnavailable; one whose broker is back within retry_s reads on to its end."""
    stack = private_stack(tmp_path / "kafka")
    try:
        address = stack.up().bootstrap
        topic = make_topic(address, "test.lost", 1)
        run = f"run-{uuid.uuid4().hex[:8]}"
        producer = EventProducer(address)
        for n in range(120):  # one record batch each: a fetch of 1,000 bytes takes a few
            producer.send(topic, beat(run, n))
            producer.flush()
        for comes_back in (True, False):
            # Coming back may wait for the old broker's port to be released: a longer
            # patience there; the reader that must give up waits out 8 s.
            with LogReader(address, [topic], bounded=True, strict=True,
                           retry_s=90.0 if comes_back else 8.0,
                           config=SMALL_FETCHES) as reader:
                got = reader.read_records(10, 5.0)
                assert got and not reader.caught_up
                stack.down()
                if comes_back:
                    port = int(address.rpartition(":")[2])
                    time.sleep(2)
                    assert wait_ports_free([port], 60), _holders(port)
                    assert stack.up(port=port).bootstrap == address
                    got += list(reader.records())
                    assert [r.event.step for r in got] == list(range(120))
                else:
                    started = time.monotonic()
                    with pytest.raises(BrokerUnavailable, match=f"at {address} for 8 s"):
                        list(reader.records())
                    assert 8 <= time.monotonic() - started < 30
                    assert stack.up(port=int(address.rpartition(":")[2])).bootstrap == address
    finally:
        stack.down(purge=True)


def _holders(port: int) -> str:
    """Who holds ``port`` on loopback (from /proc), for a failure message."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    owners = []
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            pid = fd.parts[2]
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
            except OSError:
                cmd = b"?"
            owners.append(f"pid {pid}: {cmd.decode(errors='replace')}")
    return f"port {port} still held after stack down: {owners or 'no owner found'}"
