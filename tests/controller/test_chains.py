"""The controller's chain bookkeeping (controller.chains): copies, signatures, heads.

Pure: real Ed25519 keys and the real codec, no broker. What the controller
would append is checked the way an auditor checks the log (``events.signed.audit``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from confluent_kafka import Message

from controller.chains import Chains, Outgoing, link, outgoing, sign
from events.kafka.clients import decode_message, event_headers
from events.model import Event, GroupStopCommanded, RunSubmitted
from events.record import Record
from events.signed.audit import LoggedRecord, verify
from events.signed.keyring import check_headers
from events.signed.signing import (
    GENESIS,
    PREV_HEADER,
    REQUEST_KEY_HEADER,
    REQUEST_SIG_HEADER,
    command_message,
    fact_digest,
    header_values,
    prev_of,
    sign_request,
    signature_of,
)
from events.topics import COMMANDS, REQUESTS, RUNS
from tests.events.builders import Ev
from tests.events.signed_log import CAST, CODEC, START, cast_keys

ME = "ctl-a"


def encoded(topic: str, *events: Event) -> list[tuple[str, Event, bytes]]:
    return [(topic, e, CODEC.encode(e)) for e in events]


def request_record(event: Event, *, offset: int = 0, signed: bool = True,
                   extra: Sequence[tuple[str, bytes]] = ()) -> Record:
    """``event`` as the controller's raw consumer hands it over from ``requests``."""
    value = CODEC.encode(event)
    headers = [(k, bytes(v)) for k, v in event_headers(event, 1)]
    if signed:
        headers += sign_request(CAST.alice, value)
    msg = Message(topic=REQUESTS, partition=0, offset=offset, key=event.run_id.encode(),
                  value=value, headers=[*headers, *extra], timestamp=(1, START))
    return decode_message(CODEC, msg, raw=True)


def stored(signed: Iterable[Outgoing], writer: str = ME, start: int = 0) -> list[Record]:
    """Records as the tail reads them back from ``runs`` (raw), one partition."""
    out = []
    for n, o in enumerate(signed, start):
        headers = [(k, bytes(v)) for k, v in event_headers(o.event, 1)]
        msg = Message(topic=RUNS, partition=0, offset=n, key=o.event.run_id.encode(),
                      value=o.value, headers=[*headers, ("writer", writer.encode()),
                                              *o.headers], timestamp=(1, START + n))
        out.append(decode_message(CODEC, msg, raw=True))
    return out


def logged(records: Iterable[Record]) -> list[LoggedRecord]:
    return [LoggedRecord(r.topic, r.partition, r.offset, r.value, r.headers) for r in records]


def a_run(run_id: str = "r1", start: int = START) -> tuple[Ev, RunSubmitted]:
    ev = Ev(run_id, start=start, producer="controller")
    return ev, ev.submitted(principal="alice")


# -- Record keeps the raw record when asked -------------------------------------------


def test_a_raw_record_keeps_value_bytes_and_every_header_and_compares_as_before() -> None:
    _, sub = a_run()
    raw = request_record(sub, extra=[("empty", b"")])
    assert raw.value == CODEC.encode(sub)
    assert [n for n, _ in raw.headers] == ["event_type", "schema_version", "runledger-sig",
                                           "runledger-key", "empty"]
    msg = Message(topic=REQUESTS, partition=0, offset=0, value=raw.value,
                  headers=list(raw.headers), timestamp=(1, START))
    plain = decode_message(CODEC, msg)
    assert plain.value == b"" and plain.headers == ()
    assert plain == raw  # what existing callers compare is unchanged


# -- copies -----------------------------------------------------------------------------


def test_a_submission_copied_from_a_request_is_its_exact_bytes_with_its_signature() -> None:
    _, sub = a_run()
    request = request_record(sub)
    (copy,) = outgoing(encoded(RUNS, sub), request)
    assert copy.value is request.value  # the request's own bytes, not a re-encoding
    assert [n for n, _ in copy.request] == ["runledger-sig", "runledger-key"]
    assert copy.version == request.writer_version
    (signed,), _ = sign(CAST.controller, {}, [copy])
    assert header_values(signed.headers, REQUEST_SIG_HEADER) == header_values(
        request.headers, "runledger-sig")
    assert header_values(signed.headers, REQUEST_KEY_HEADER) == [CAST.alice.key_id.encode()]


def test_only_the_very_submission_of_the_request_is_copied() -> None:
    ev, sub = a_run()
    request = request_record(sub)
    other = ev.submitted(principal="alice", spec_json='{"x": 1}')
    queued = ev.queued()
    out = outgoing([*encoded(RUNS, other, queued), *encoded(COMMANDS, sub)], request)
    assert all(o.request == () and o.value == CODEC.encode(o.event) for o in out)
    # A request read without its raw bytes is not copied either: re-encoded, unsigned.
    plain = Record(REQUESTS, 0, 0, 0, sub, 1)
    (fact,) = outgoing(encoded(RUNS, sub), plain)
    assert fact.request == () and fact.version is None


# -- signing ------------------------------------------------------------------------------


def test_facts_chain_per_run_from_genesis_and_the_heads_move_only_when_told() -> None:
    ev1, sub1 = a_run("r1")
    ev2, sub2 = a_run("r2", START + 50)
    node = ev1.quarantined("node-b")
    out = outgoing(encoded(RUNS, sub1, sub2, ev1.queued(), node, ev2.queued()))
    heads: dict[str, str] = {}
    signed, moved = sign(CAST.controller, heads, out)
    assert heads == {}
    prevs = [prev_of(o.headers) for o in signed]
    digest = [fact_digest(o.value, signature_of(o.headers)[1]) for o in signed]  # type: ignore[index]
    assert prevs[:2] == [GENESIS, GENESIS] and prevs[3] == GENESIS  # a node key chains too
    assert prevs[2] == digest[0] and prevs[4] == digest[1]
    assert moved == {"r1": digest[2], "r2": digest[4], node.run_id: digest[3]}


def test_commands_are_signed_as_commands_and_other_topics_are_left_alone() -> None:
    ev, _ = a_run()
    stop = GroupStopCommanded(header=ev.h(1, event_id="c1"), command_id="c1", node="node-a",
                              reason="cancelled")
    out = outgoing([*encoded(COMMANDS, stop), *encoded("elsewhere", stop)])
    (command, other), moved = sign(CAST.controller, {}, out)
    ring = verify(cast_keys().records, []).ring
    assert check_headers(ring, command.headers, command_message(command.value),
                         principal="controller", role="controller") is None
    assert header_values(command.headers, PREV_HEADER) == []
    assert other.headers == () and moved == {}


def test_without_a_key_nothing_is_signed_but_a_request_signature_is_still_carried() -> None:
    ev, sub = a_run()
    out = outgoing(encoded(RUNS, sub), request_record(sub)) + outgoing(encoded(RUNS, ev.queued()))
    (copy, queued), moved = sign(None, {}, out)
    assert [n for n, _ in copy.headers] == [REQUEST_SIG_HEADER, REQUEST_KEY_HEADER]
    assert queued.headers == () and moved == {}


# -- what an auditor sees ------------------------------------------------------------------


def story(chains: Chains, batches: Sequence[list[Outgoing]],
          start: int = 0) -> list[Record]:
    """Each batch signed, committed and stored, in order: the runs log it leaves."""
    records: list[Record] = []
    for batch in batches:
        signed, moved = chains.sign(batch)
        records += stored(signed, chains.me, start + len(records))
        chains.advance(moved)
    return records


def test_what_the_controller_appends_verifies_and_a_restart_continues_each_chain() -> None:
    ev, sub = a_run()
    first = Chains(CAST.controller, ME)
    before = story(first, [outgoing(encoded(RUNS, sub), request_record(sub)),
                           outgoing(encoded(RUNS, ev.queued(), ev.admitted()))])
    # A restarted controller: nothing in memory, the heads recovered from the log.
    second = Chains(CAST.controller, ME)
    second.observe(before)
    assert second.heads == first.heads
    after = story(second, [outgoing(encoded(RUNS, ev.generation_started(1), ev.confirmed(1)))],
                  start=len(before))
    report = verify(cast_keys().records, logged(before + after))
    assert report.ok, report.problems
    assert [run.records for run in report.runs] == [5]


def test_an_altered_copy_of_a_fact_fails_where_it_is() -> None:
    ev, sub = a_run()
    records = logged(story(Chains(CAST.controller, ME), [
        outgoing(encoded(RUNS, sub), request_record(sub)),
        outgoing(encoded(RUNS, ev.queued(), ev.admitted()))]))
    assert verify(cast_keys().records, records).ok
    forged = records[0]
    records[0] = LoggedRecord(forged.topic, forged.partition, forged.offset,
                              forged.value.replace(b"alice", b"mallo"), forged.headers)
    report = verify(cast_keys().records, records)
    assert not report.ok
    assert report.problems[0].where == forged.where == f"{RUNS}[0]@0"
    assert report.problems[0].reason == "bad_signature"


def test_the_tail_moves_heads_past_other_writers_facts_only() -> None:
    ev, sub = a_run()
    mine = Chains(CAST.controller, ME)
    own = story(mine, [outgoing(encoded(RUNS, sub))])
    theirs = Chains(CAST.controller, "ctl-b")
    theirs.observe(own)
    other = story(theirs, [outgoing(encoded(RUNS, ev.queued()))], start=1)
    late = mine.heads["r1"]
    mine.observe(own, own=False)  # a lagging tail reads its own fact again: no move back
    assert mine.heads["r1"] == late
    mine.observe(other, own=False)
    assert mine.heads == theirs.heads != {"r1": late}
    unsigned = stored(sign(None, {}, outgoing(encoded(RUNS, ev.admitted())))[0], "ctl-c", 2)
    assert link(unsigned[0]) is None
    mine.observe(unsigned, own=False)
    assert mine.heads == theirs.heads
    mine.reset()
    assert mine.heads == {} and mine.head("r1") == GENESIS
