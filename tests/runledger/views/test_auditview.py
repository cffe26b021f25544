"""``runledger.views.auditview``: the verdict lines and JSON of ``audit verify``. No broker.

Built on the signed logs of ``tests/events/signed_log.py`` judged by the real
``events.signed.audit.verify``: a sound log prints the anchor and one ``ok`` line per
run; a tampered one prints ``FAILED`` with each problem's place and reason;
``--heads`` input is read from an earlier ``--json`` report.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from events.signed.audit import BAD_SIGNATURE, TRUNCATED, verify
from events.signed.signing import GENESIS
from runledger.errors import RunledgerError, UsageError
from runledger.views import auditview
from tests.events.signed_log import CAST, story


def test_a_sound_log_prints_the_anchor_and_one_ok_line_per_run() -> None:
    keys, runs = story()
    report = verify(keys.records, runs.records)
    chosen = auditview.selected(report, None)
    lines = auditview.lines(report, chosen, len(keys.records))
    assert lines[0] == (f"trust anchor {CAST.admin.key_id} (root's admin key); not pinned: "
                        f"--trust {CAST.admin.key_id} requires it")
    assert lines[1] == f"keys ok: {len(keys.records)} records, 5 keys"
    r1 = next(v for v in report.runs if v.run_id == "r1")
    assert f"run r1: ok, {r1.records} facts, head {r1.head[:16]}" in lines
    assert len(lines) == 2 + len(report.runs)
    assert auditview.passed(report, chosen)
    doc = auditview.document(report, chosen, len(keys.records), "here")
    assert doc["ok"] is True and doc["anchor"] == CAST.admin.key_id and doc["source"] == "here"
    assert {r["run_id"]: r["head"] for r in doc["runs"]}["r1"] == r1.head
    pinned = verify(keys.records, runs.records, trust=CAST.admin.key_id)
    assert auditview.lines(pinned, pinned.runs, 5)[0].endswith("; pinned by --trust")


def test_a_tampered_fact_fails_its_run_naming_where_and_why() -> None:
    keys, runs = story()
    records = list(runs.records)
    victim = records[5]  # one of r1's facts
    flipped = bytearray(victim.value)
    flipped[-1] ^= 0x01
    records[5] = replace(victim, value=bytes(flipped))
    report = verify(keys.records, records)
    lines = auditview.lines(report, report.runs, len(keys.records))
    assert "run r2: ok" in "\n".join(lines)
    [failed] = [line for line in lines if line.startswith("run r1:")]
    assert failed.startswith("run r1: FAILED,") and "problem" in failed
    problem = f"  {victim.where} r1: {BAD_SIGNATURE} ("
    assert any(line.startswith(problem) for line in lines), lines
    assert not auditview.passed(report, report.runs)
    error = auditview.failure(report, report.runs)
    assert str(error).startswith("the log does not verify: ") and "\n" not in str(error)
    # Only r2 asked for: r2 is sound, so the verdict passes.
    only = auditview.selected(report, "r2")
    assert [v.run_id for v in only] == ["r2"] and auditview.passed(report, only)


def test_a_run_that_is_not_in_the_log_is_an_error() -> None:
    keys, runs = story()
    report = verify(keys.records, runs.records)
    with pytest.raises(RunledgerError, match="run 'nope' has no facts"):
        auditview.selected(report, "nope")


def test_heads_come_back_from_an_earlier_json_report() -> None:
    keys, runs = story()
    report = verify(keys.records, runs.records)
    doc = auditview.document(report, report.runs, len(keys.records), "x")
    heads = auditview.heads_from(json.dumps(doc), "report.json")
    assert heads == {v.run_id: v.head for v in report.runs if v.head != GENESIS}
    # The last fact of r1 removed: the chain no longer reaches the recorded head.
    r1_last = max(i for i, r in enumerate(runs.records) if r.key == b"r1")
    shorter = [r for i, r in enumerate(runs.records) if i != r1_last]
    again = verify(keys.records, shorter, heads=heads)
    [r1] = [v for v in again.runs if v.run_id == "r1"]
    assert [p.reason for p in r1.problems] == [TRUNCATED]
    assert auditview.heads_from(json.dumps({"r1": heads["r1"]}), "f") == {"r1": heads["r1"]}


@pytest.mark.parametrize("text", ["[]", "nope", '{"r1": "short"}', '{"runs": [{"run_id": "r"}]}'])
def test_heads_that_are_not_heads_are_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--heads f"):
        auditview.heads_from(text, "f")
