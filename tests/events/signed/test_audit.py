"""signed/audit.py: offline verification of a signed log built with real keys, codec and fold.

Example tests name each problem; property tests (hypothesis) alter the log of
``tests.events.signed_log.story`` one way at a time (a byte of a value or a
signature flipped, a record removed, two records of a run swapped, a forged
fact inserted) and check that the first problem reported is where the log was
altered.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.signed.audit import (
    BAD_SIGNATURE,
    BROKEN_CHAIN,
    FOLD_REFUSED,
    KEY_REFUSED,
    NO_ANCHOR,
    NOT_CONTROLLER,
    REQUEST_BAD_SIGNATURE,
    REQUEST_REVOKED_KEY,
    REQUEST_UNKNOWN_KEY,
    REQUEST_UNSIGNED,
    REQUEST_WRONG_PRINCIPAL,
    REQUEST_WRONG_ROLE,
    REVOKED_KEY,
    TRUNCATED,
    UNATTRIBUTED,
    UNDECODABLE,
    UNKNOWN_KEY,
    UNSIGNED,
    UNTRUSTED_ANCHOR,
    AuditReport,
    LoggedRecord,
    Problem,
    verify,
)
from events.signed.signing import (
    GENESIS,
    KEY_HEADER,
    PREV_HEADER,
    SIG_HEADER,
    SigningKey,
    command_message,
    sign_fact,
    sign_request,
)
from events.topics import RUNS
from tests.events.builders import Ev
from tests.events.signed_log import (
    CAST,
    CODEC,
    START,
    KeysLog,
    RunsLog,
    cast_keys,
    digest_of,
    story,
)

KEYS, LOG = story()
RUNS_RECORDS = tuple(LOG.records)
KEYS_RECORDS = tuple(KEYS.records)
PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def audit(runs: Sequence[LoggedRecord] = RUNS_RECORDS,
          keys: Sequence[LoggedRecord] = KEYS_RECORDS, **kw: object) -> AuditReport:
    return verify(keys, runs, **kw)  # type: ignore[arg-type]


def reasons(report: AuditReport) -> list[tuple[str, str]]:
    return [(p.run_id, p.reason) for p in report.problems]


def run_of(record: LoggedRecord) -> str:
    return CODEC.decode(record.value).event.run_id


def renumbered(records: Sequence[LoggedRecord]) -> list[LoggedRecord]:
    """Offsets as a doctored copy of the log would have them: each partition counted again."""
    counts: dict[int, int] = {}
    out = []
    for r in records:
        offset = counts.get(r.partition, 0)
        counts[r.partition] = offset + 1
        out.append(LoggedRecord(r.topic, r.partition, offset, r.value, r.headers, r.key))
    return out


def first_problem_at(report: AuditReport, records: Sequence[LoggedRecord]) -> int:
    """The log position of the earliest problem (every problem must name a record)."""
    slots = {r.where: i for i, r in enumerate(records)}
    positions = [slots[p.where] for p in report.problems if p.where in slots]
    assert positions, [str(p) for p in report.problems]
    return min(positions)


def with_header(record: LoggedRecord, name: str, value: bytes | None) -> LoggedRecord:
    headers = tuple((k, v) for k, v in record.headers if k != name)
    if value is not None:
        headers += ((name, value),)
    return LoggedRecord(record.topic, record.partition, record.offset, record.value, headers,
                        record.key)


def header(record: LoggedRecord, name: str) -> bytes:
    return next(v for k, v in record.headers if k == name)


# --- an untouched log ---------------------------------------------------------------------


def test_an_untouched_log_verifies_and_names_its_anchor() -> None:
    report = audit()
    assert report.ok, [str(p) for p in report.problems]
    assert report.anchor == CAST.admin.key_id
    runs = {v.run_id: v for v in report.runs}
    assert {k: v.records for k, v in runs.items()} == {"r1": 9, "r2": 3, "node/node-b": 1,
                                                       "ghost": 1}
    assert runs["r1"].head == LOG.heads["r1"] and runs["r1"].head != GENESIS
    assert audit(trust=CAST.admin.key_id).ok


def test_a_pinned_anchor_that_differs_fails_the_audit() -> None:
    report = audit(trust=CAST.controller.key_id)
    assert not report.ok
    assert reasons(report) == [("", UNTRUSTED_ANCHOR)]
    assert CAST.admin.key_id in report.keys[0].detail


def test_without_keys_nothing_verifies() -> None:
    report = audit(keys=())
    assert report.anchor is None and not report.ok
    assert report.keys[0].reason == NO_ANCHOR
    # No fact verifies, so none moves its chain: every one after a run's first is unchained too.
    assert {p.reason for p in report.problems if p.run_id} == {UNKNOWN_KEY, BROKEN_CHAIN}
    assert sorted(p.where for p in report.problems if p.reason == UNKNOWN_KEY) == sorted(
        r.where for r in RUNS_RECORDS)


def test_a_refused_key_record_fails_the_audit_and_registers_nothing() -> None:
    keys = cast_keys()
    keys.register("mallory", "controller", CAST.stranger, signer=CAST.alice)
    report = audit(keys=keys.records)
    assert [(p.where, p.reason) for p in report.keys] == [(keys.records[-1].where, KEY_REFUSED)]
    assert "not_admin" in report.keys[0].detail
    assert CAST.stranger.key_id not in report.ring.keys


# --- facts ---------------------------------------------------------------------------------


def _one_run(*events_and_keys: tuple[object, SigningKey | None]) -> RunsLog:
    log = RunsLog()
    ev = Ev("r9", start=START, producer="controller")
    log.submit(ev.submitted(principal="alice"), CAST.alice)
    for make, key in events_and_keys:
        log.append(make(ev), key=key)  # type: ignore[operator]
    return log


def test_a_fact_signed_by_another_role_is_not_the_controllers() -> None:
    log = _one_run((lambda ev: ev.queued(), CAST.agent), (lambda ev: ev.admitted(), None))
    report = audit(log.records)
    assert reasons(report) == [("r9", NOT_CONTROLLER), ("r9", BROKEN_CHAIN)]
    assert report.problems[0].where == log.records[1].where
    # The next genuine fact chains from the forged one, which the audit never believes.
    assert report.problems[1].where == log.records[2].where


def test_unsigned_and_unknown_and_unchained_facts() -> None:
    log = _one_run((lambda ev: ev.queued(), CAST.stranger))
    assert reasons(audit(log.records)) == [("r9", UNKNOWN_KEY)]
    unsigned = with_header(with_header(log.records[1], SIG_HEADER, None), KEY_HEADER, None)
    assert reasons(audit([log.records[0], unsigned])) == [("r9", UNSIGNED)]
    unchained = with_header(LOG.records[0], PREV_HEADER, None)
    assert reasons(audit([unchained])) == [("r1", BROKEN_CHAIN)]
    doubled = LoggedRecord(RUNS, 0, 0, LOG.records[0].value,
                           LOG.records[0].headers + LOG.records[0].headers[:1])
    assert (("r1", UNSIGNED)) in reasons(audit([doubled]))


def test_a_signature_made_for_another_use_is_bad() -> None:
    record = LOG.records[0]
    as_command = with_header(record, SIG_HEADER, CAST.controller.sign(command_message(
        record.value)))
    assert reasons(audit([as_command])) == [("r1", BAD_SIGNATURE)]


def test_a_replayed_fact_breaks_its_chain_where_it_is_replayed() -> None:
    records = list(RUNS_RECORDS)
    replayed = renumbered([*records[:6], records[2], *records[6:]])
    report = audit(replayed)
    assert reasons(report) == [("r1", BROKEN_CHAIN), ("r1", BROKEN_CHAIN)]
    assert [p.where for p in report.problems] == [replayed[6].where] * 2
    assert "replay" in report.problems[1].detail


def test_a_fact_the_fold_refuses_is_named_with_the_folds_reason() -> None:
    log = _one_run((lambda ev: ev.finished(1, "succeeded"), None))
    report = audit(log.records)
    assert reasons(report) == [("r9", FOLD_REFUSED)]
    assert "illegal_transition" in report.problems[0].detail


def test_an_undecodable_fact_is_reported_and_its_chain_goes_on() -> None:
    log = _one_run()
    garbage = b"\xc3\x01" + b"\x00" * 20
    headers = sign_fact(CAST.controller, log.heads["r9"], garbage, keys_head=GENESIS)
    bad = LoggedRecord(RUNS, 0, 1, garbage, headers, b"r9")
    report = audit([log.records[0], bad])
    assert reasons(report) == [("r9", UNDECODABLE)]
    assert "unknown_fingerprint" in report.problems[0].detail
    keyless = LoggedRecord(RUNS, 0, 1, garbage, bad.headers)
    assert (UNATTRIBUTED, UNDECODABLE) in reasons(audit([log.records[0], keyless]))


def test_a_revoked_controller_key_verifies_what_it_signed_before() -> None:
    new = SigningKey.generate()
    ev = Ev("r9", start=START, producer="controller")
    keys = cast_keys()
    keys.register("controller", "controller", new)
    keys.revoke("controller", CAST.controller, at=START + 2_500)
    log = RunsLog()
    log.submit(ev.submitted(principal="alice"), CAST.alice)  # START + 1000
    log.append(ev.queued())  # START + 2000: before the revocation
    log.append(ev.admitted(), key=new)  # rotated
    assert audit(log.records, keys.records).ok
    log.append(ev.generation_started(1))  # START + 4000, the old key
    report = audit(log.records, keys.records)
    assert reasons(report) == [("r9", REVOKED_KEY)]


# --- requests copied onto runs --------------------------------------------------------------


def _submitted_with(request: tuple[tuple[str, bytes], ...] | None,
                    keys: KeysLog | None = None, principal: str = "alice") -> AuditReport:
    log = RunsLog()
    event = Ev("r9", start=START).submitted(principal=principal)
    value = CODEC.encode(event)
    log.append(event, request=request if request is not None else ())
    assert CODEC.encode(event) == value
    return audit(log.records, (keys or cast_keys()).records)


def test_requests_signed_for_another_principals_name_are_refused() -> None:
    value = CODEC.encode(Ev("r9", start=START).submitted(principal="alice"))
    assert _submitted_with(sign_request(CAST.alice, value)).ok
    report = _submitted_with(sign_request(CAST.bob, value))
    assert reasons(report) == [("r9", REQUEST_WRONG_PRINCIPAL)]
    assert "alice" in report.problems[0].detail


def test_every_request_signature_problem_is_named() -> None:
    value = CODEC.encode(Ev("r9", start=START).submitted(principal="alice"))
    other = CODEC.encode(Ev("r8", start=START).submitted(principal="alice"))
    assert reasons(_submitted_with(())) == [("r9", REQUEST_UNSIGNED)]
    assert reasons(_submitted_with(sign_request(CAST.alice, other))) == [
        ("r9", REQUEST_BAD_SIGNATURE)]
    assert reasons(_submitted_with(sign_request(CAST.stranger, value))) == [
        ("r9", REQUEST_UNKNOWN_KEY)]
    second = SigningKey.generate()
    keys = cast_keys()
    keys.register("alice", "agent", second)
    assert reasons(_submitted_with(sign_request(second, value), keys)) == [
        ("r9", REQUEST_WRONG_ROLE)]
    keys.revoke("alice", CAST.alice, at=START - 1)
    assert reasons(_submitted_with(sign_request(CAST.alice, value), keys)) == [
        ("r9", REQUEST_REVOKED_KEY)]


# --- the end of a chain ------------------------------------------------------------------------


def test_a_removed_last_fact_shows_only_against_a_recorded_head() -> None:
    heads = {v.run_id: v.head for v in audit().runs}
    shorter = RUNS_RECORDS[:-1]  # r1's RunFinished: the log alone cannot tell
    assert audit(shorter).ok
    report = audit(shorter, heads=heads)
    assert reasons(report) == [("r1", TRUNCATED)]
    assert audit(heads=heads).ok
    assert reasons(audit((), heads={"r1": heads["r1"]})) == [("r1", TRUNCATED)]


def test_problems_print_their_position() -> None:
    problem = Problem(LOG.records[3].where, "r1", BROKEN_CHAIN, "names prev 00")
    assert str(problem) == "runledger.runs[0]@2 r1: broken_chain (names prev 00)"


# --- properties: any alteration is reported where it is ---------------------------------------


def _flipped(data: bytes, at: int, mask: int) -> bytes:
    return data[:at] + bytes([data[at] ^ mask]) + data[at + 1:]


def _flip(record: LoggedRecord, draw: st.DrawFn) -> LoggedRecord:
    mask = draw(st.integers(1, 255))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(record.value) - 1))
        return LoggedRecord(record.topic, record.partition, record.offset,
                            _flipped(record.value, at, mask), record.headers, record.key)
    sig = header(record, SIG_HEADER)
    at = draw(st.integers(0, len(sig) - 1))
    return with_header(record, SIG_HEADER, _flipped(sig, at, mask))


@PROPERTY
@given(st.data())
def test_a_flipped_byte_of_a_fact_is_reported_at_its_position(data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(RUNS_RECORDS) - 1))
    records = list(RUNS_RECORDS)
    records[i] = _flip(records[i], data.draw)
    report = audit(records)
    assert not report.keys
    assert first_problem_at(report, records) == i


@PROPERTY
@given(st.data())
def test_a_flipped_byte_of_a_key_record_is_reported_at_its_position(data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(KEYS_RECORDS) - 1))
    keys = list(KEYS_RECORDS)
    keys[i] = _flip(keys[i], data.draw)
    report = audit(keys=keys)
    slots = {r.where: n for n, r in enumerate(keys)}
    refused = [slots[p.where] for p in report.keys if p.where in slots]
    assert refused and min(refused) == i, [str(p) for p in report.keys]
    assert not report.ok


def _last_of_each_run() -> set[int]:
    last: dict[str, int] = {}
    for i, r in enumerate(RUNS_RECORDS):
        last[run_of(r)] = i
    return set(last.values())


REMOVABLE = [i for i in range(len(RUNS_RECORDS)) if i not in _last_of_each_run()]


@PROPERTY
@given(st.sampled_from(REMOVABLE))
def test_a_removed_fact_is_reported_at_its_runs_next_fact(i: int) -> None:
    run = run_of(RUNS_RECORDS[i])
    following = next(j for j in range(i + 1, len(RUNS_RECORDS))
                     if run_of(RUNS_RECORDS[j]) == run)
    records = renumbered(RUNS_RECORDS[:i] + RUNS_RECORDS[i + 1:])
    report = audit(records)
    at = following - 1  # its slot once the removed record is gone
    assert first_problem_at(report, records) == at
    assert any(p.reason == BROKEN_CHAIN and p.where == records[at].where
               for p in report.problems)


def _slots_of_each_run() -> list[list[int]]:
    slots: dict[str, list[int]] = {}
    for i, r in enumerate(RUNS_RECORDS):
        slots.setdefault(run_of(r), []).append(i)
    return [s for s in slots.values() if len(s) > 1]


ADJACENT = [(s[k], s[k + 1]) for s in _slots_of_each_run() for k in range(len(s) - 1)]


@PROPERTY
@given(st.sampled_from(ADJACENT))
def test_two_swapped_facts_of_a_run_are_reported_at_the_first(pair: tuple[int, int]) -> None:
    a, b = pair
    records = list(RUNS_RECORDS)
    records[a], records[b] = records[b], records[a]
    records = renumbered(records)
    report = audit(records)
    assert first_problem_at(report, records) == a
    assert any(p.reason == BROKEN_CHAIN and p.where == records[a].where
               for p in report.problems)


FORGERS = {"agent": (CAST.agent, NOT_CONTROLLER), "operator": (CAST.alice, NOT_CONTROLLER),
           "stranger": (CAST.stranger, UNKNOWN_KEY)}
FORGED = {
    "finished": lambda ev: ev.finished(1, "failed", reason="forged"),
    "queued": lambda ev: ev.queued(reason="forged"),
    "cancelled": lambda ev: ev.cancelled(),
}


@PROPERTY
@given(st.integers(0, len(RUNS_RECORDS)), st.sampled_from(["r1", "r2"]),
       st.sampled_from(sorted(FORGERS)), st.sampled_from(sorted(FORGED)))
def test_a_forged_fact_is_reported_where_it_was_inserted(i: int, run: str, forger: str,
                                                         kind: str) -> None:
    key, reason = FORGERS[forger]
    before = [r for r in RUNS_RECORDS[:i] if run_of(r) == run]
    prev = digest_of(before[-1]) if before else GENESIS
    event = FORGED[kind](Ev(run, start=START + 100_000, producer="controller"))
    value = CODEC.encode(event)
    partition = 0 if run == "r1" else 1
    headers = sign_fact(key, prev, value, keys_head=GENESIS)
    forged = LoggedRecord(RUNS, partition, 0, value, headers, run.encode())
    records = renumbered([*RUNS_RECORDS[:i], forged, *RUNS_RECORDS[i:]])
    report = audit(records)
    # The forgery names the right prev: only its signature gives it away, and the
    # genuine facts after it still chain from the last genuine one.
    assert [(p.where, p.reason) for p in report.problems] == [(records[i].where, reason)]


def test_a_copied_cancel_request_is_checked_like_a_submission() -> None:
    log = RunsLog()
    ev = Ev("r9", start=START, producer="controller")
    log.submit(ev.submitted(principal="alice"), CAST.alice)
    cancel = ev.cancel_requested(principal="bob")
    log.append(cancel, request=sign_request(CAST.bob, CODEC.encode(cancel)))
    assert audit(log.records).ok
    forged = ev.cancel_requested(principal="bob")
    log.append(forged, request=sign_request(CAST.alice, CODEC.encode(forged)))
    report = audit(log.records)
    assert [(p.where, p.reason) for p in report.problems] == [
        (log.records[2].where, REQUEST_WRONG_PRINCIPAL)]
