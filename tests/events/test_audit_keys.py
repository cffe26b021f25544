"""events/signed/audit.py on the keys log: its chain, and the keys head every fact names. Pure.

The issue's attack (#33, item 4): a controller key is revoked, a fact signed by
it after the revocation rewrites a run's outcome, and the revocation's line is
deleted from the keys log. Whole, the log fails on the forged fact
(``revoked_key``); with the revocation deleted from the middle of the keys log
the next key record's link is broken; deleted from its end, every fact the
controller signed after it names a keys head that is gone. Either way the
audit fails, naming where, with or without a pinned anchor or earlier heads.
"""

from __future__ import annotations

from events.signed.audit import (
    BROKEN_CHAIN,
    KEYS_HEAD_MISSING,
    REVOKED_KEY,
    UNANCHORED,
    AuditReport,
    LoggedRecord,
    verify,
)
from events.signed.signing import GENESIS, sign_fact, sign_request
from tests.events.builders import Ev
from tests.events.signed_log import CAST, CODEC, START, Rotated, rotated_story


def without(records: list[LoggedRecord], gone: LoggedRecord) -> list[LoggedRecord]:
    return [r for r in records if r is not gone]


def problems(report: AuditReport) -> list[tuple[str, str]]:
    return [(p.where, p.reason) for p in report.problems]


def heads_of(story: Rotated) -> dict[str, str]:
    """Run heads an auditor kept from before: those of the whole log."""
    return {v.run_id: v.head for v in verify(story.keys.records, story.runs.records).runs}


def test_the_whole_log_names_the_fact_signed_with_the_revoked_key() -> None:
    story = rotated_story(trailing=False)
    report = verify(story.keys.records, story.runs.records, trust=CAST.admin.key_id)
    assert problems(report) == [(story.forged.where, REVOKED_KEY)]


def test_a_revocation_deleted_from_the_middle_breaks_the_keys_chain_where_it_was() -> None:
    story = rotated_story(trailing=False)
    keys = without(story.keys.records, story.revocation)
    nxt = story.keys.records[story.keys.records.index(story.revocation) + 1]
    for trust, heads in ((None, None), (CAST.admin.key_id, heads_of(story))):
        report = verify(keys, story.runs.records, trust=trust, heads=heads)
        assert not report.ok
        # The forged end now verifies (its key looks live) but the keys log does not.
        assert (nxt.where, BROKEN_CHAIN) in [(p.where, p.reason) for p in report.keys]
        detail = next(p.detail for p in report.keys if p.reason == BROKEN_CHAIN)
        assert "removed, reordered or inserted" in detail


def test_a_trailing_revocation_deleted_is_named_by_every_fact_signed_after_it() -> None:
    story = rotated_story(trailing=True)
    assert story.keys.records[-1] is story.revocation
    keys = without(story.keys.records, story.revocation)
    for trust, heads in ((None, None), (CAST.admin.key_id, heads_of(story))):
        report = verify(keys, story.runs.records, trust=trust, heads=heads)
        assert not report.ok and not report.keys  # the shorter keys chain is sound
        assert sorted(problems(report)) == sorted((r.where, KEYS_HEAD_MISSING)
                                                  for r in story.after)
        assert all("key records were removed" in p.detail for p in report.problems)


def test_reordered_or_inserted_key_records_break_the_chain() -> None:
    story = rotated_story(trailing=False)
    records = story.keys.records
    swapped = [*records[:-2], records[-1], records[-2]]
    report = verify(swapped, story.runs.records)
    assert (records[-1].where, BROKEN_CHAIN) in [(p.where, p.reason) for p in report.keys]
    doubled = [*records[:2], records[1], *records[2:]]
    assert BROKEN_CHAIN in [p.reason for p in verify(doubled, []).keys]


def test_a_fact_without_a_keys_head_is_unanchored_and_refused() -> None:
    story = rotated_story(trailing=False)
    event = Ev("r9", start=START, producer="controller").submitted(principal="alice")
    value = CODEC.encode(event)
    old = LoggedRecord("runledger.runs", 2, 0, value,
                       sign_fact(CAST.controller, GENESIS, value,  # v1: no keys head
                                 request=sign_request(CAST.alice, value)), b"r9")
    report = verify(story.keys.records, [old])
    assert (old.where, UNANCHORED) in problems(report)
    assert problems(report) == [(old.where, UNANCHORED)]
    assert "make a new stack" in report.problems[0].detail
    # Its signature is judged all the same (as v1): one altered is named for that too.
    bent = LoggedRecord(old.topic, 2, 0, value + b"x", old.headers, b"r9")
    assert ("runledger.runs[2]@0", "bad_signature") in problems(verify(story.keys.records,
                                                                      [bent]))
