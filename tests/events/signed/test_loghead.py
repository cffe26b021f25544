"""events/signed/loghead.py: the signed heads of an exported copy, judged against the copy. Pure.

Heads are made from an audit of the whole log and signed by a live key of its
keys log; a copy whose run or keys log lost its last records fails against
them, as does a copy whose heads were altered or signed by a key that is not
live there.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from events.signed.audit import TRUNCATED, LoggedRecord, verify
from events.signed.loghead import (
    HEADS_UNSIGNED,
    WHERE,
    HeadsError,
    check,
    heads_of,
    parse,
    run_heads,
    sign,
)
from events.signed.signing import SigningKey
from tests.events.signed_log import CAST, cast_keys, story


def signed(key: SigningKey = CAST.alice) -> tuple[dict[str, Any], list[LoggedRecord],
                                                  list[LoggedRecord]]:
    """The story's log, and its heads as an export signs them."""
    keys_log, runs_log = story()
    keys, runs = keys_log.records, runs_log.records
    report = verify(keys, runs)
    assert report.ok
    return sign(key, heads_of(report, len(keys))), keys, runs


def test_heads_round_trip_and_hold_for_the_whole_copy() -> None:
    doc, keys, runs = signed()
    assert json.loads(json.dumps(doc)) == doc  # plain JSON
    back = parse(json.loads(json.dumps(doc)))
    assert back.key_id == CAST.alice.key_id
    assert back.heads.keys.records == len(keys)
    assert set(run_heads(back)) == {"r1", "r2", "ghost", "node/node-b"}
    report = verify(keys, runs, heads=run_heads(back))
    assert report.ok and check(back, report.ring) == []


def test_a_run_whose_last_facts_were_dropped_is_truncated_with_no_other_state() -> None:
    doc, keys, runs = signed()
    back = parse(doc)
    r2 = [r for r in runs if r.key == b"r2"]
    cut = [r for r in runs if r is not r2[-1]]
    report = verify(keys, cut, heads=run_heads(back))
    assert [(p.run_id, p.reason) for p in report.problems] == [("r2", TRUNCATED)]


def test_a_keys_log_whose_last_record_was_dropped_is_truncated() -> None:
    doc, keys, runs = signed()
    back = parse(doc)
    report = verify(keys[:-1], runs)
    [problem] = check(back, report.ring)
    assert (problem.where, problem.reason) == ("runledger.keys@end", TRUNCATED)
    assert "key records were removed from its end" in problem.detail


@pytest.mark.parametrize(("change", "reason"), [
    (lambda d: {**d, "runs": {}}, "heads_bad_signature"),  # a run's head taken out
    (lambda d: {**d, "keys": {**d["keys"], "records": 1}}, "heads_bad_signature"),
    (lambda d: {**d, "signature": ""}, HEADS_UNSIGNED),
])
def test_altered_heads_fail_their_signature(change: object, reason: str) -> None:
    doc, keys, _ = signed()
    assert callable(change)
    back = parse(change(doc))
    [problem] = check(back, verify(keys, []).ring)
    assert (problem.where, problem.reason) == (WHERE, reason)


def test_heads_signed_by_a_key_the_copy_does_not_hold_live_fail() -> None:
    doc, keys, _ = signed(key=CAST.stranger)
    [problem] = check(parse(doc), verify(keys, []).ring)
    assert problem.reason == "heads_unknown_key"
    # A key the copy's keys log revoked signs no heads either.
    log = cast_keys()
    log.revoke("alice", CAST.alice)
    report = verify(log.records, [])
    heads = sign(CAST.alice, heads_of(report, len(log.records)))
    assert [p.reason for p in check(parse(heads), report.ring)] == ["heads_revoked_key"]


@pytest.mark.parametrize(("doc", "needle"), [
    ([], "not a runledger-log-heads"),
    ({"format": "runledger-log-heads", "version": 7}, "version 7"),
    ({"format": "runledger-log-heads", "version": 1, "runs": []}, "runs is not"),
    ({"format": "runledger-log-heads", "version": 1, "runs": {},
      "keys": {"records": -1, "head": "0" * 64}}, "keys.records"),
    ({"format": "runledger-log-heads", "version": 1, "runs": {"r": {"records": 1,
                                                                    "head": "x"}},
      "keys": {"records": 1, "head": "0" * 64}}, "runs.r.head"),
    ({"format": "runledger-log-heads", "version": 1, "runs": {},
      "keys": {"records": 1, "head": "0" * 64}, "key_id": "alice"}, "key_id"),
    ({"format": "runledger-log-heads", "version": 1, "runs": {},
      "keys": {"records": 1, "head": "0" * 64}, "key_id": "0" * 16, "signature": "zz"},
     "signature is not hex"),
])
def test_what_is_no_heads_document_is_named(doc: object, needle: str) -> None:
    with pytest.raises(HeadsError, match=needle):
        parse(doc)


def test_an_empty_log_has_empty_heads_that_hold() -> None:
    report = verify([], [])
    heads = sign(CAST.alice, heads_of(report, 0))
    assert parse(heads).heads.runs == {} and parse(heads).heads.keys.records == 0
    # Nobody holds a key in an empty keys log: its heads cannot be checked, and say so.
    assert [p.reason for p in check(parse(heads), report.ring)] == ["heads_unknown_key"]
