"""What status and runs show, from events alone (no broker): unseen runs, fencing of heartbeats."""

from __future__ import annotations

from events.model import (
    CancelRequested,
    Event,
    GenerationStarted,
    Header,
    HeartbeatRecorded,
    Member,
    MembershipConfirmed,
    RunAdmitted,
    RunCancelled,
    RunSubmitted,
)
from runledger.runview import list_rows, status_document, status_lines

RUN = "tiny-0123456789"
T0 = 1_700_000_000_000
MEMBERS = (Member("r0", "n", 0), Member("r1", "n", 1))


def h(n: int, generation: int = 0) -> Header:
    return Header(f"{RUN}/e{n}", RUN, generation, T0 + n * 1000, "test")


SUBMITTED = RunSubmitted(header=h(0), spec_digest="sha256:" + "a" * 64,
                         spec_json='{"name":"tiny"}', principal="bob", world_size=2)


def test_a_run_only_on_requests_is_submitted_but_unseen() -> None:
    cancel = CancelRequested(header=h(1), principal="ops", reason="oops")
    doc = status_document(RUN, [SUBMITTED, cancel], [], [], T0 + 5000)
    assert doc is not None
    assert (doc["state"], doc["seen_by_controller"], doc["name"]) == ("Submitted", False, "tiny")
    assert doc["cancel_requested"] and not doc["terminal"]
    lines = status_lines(doc)
    assert "state       Submitted (not yet seen by the controller)" in lines
    [row] = list_rows([SUBMITTED], [])
    assert (row["run_id"], row["state"], row["seen_by_controller"]) == (RUN, "Submitted", False)
    assert status_document("other", [SUBMITTED], [], [], T0) is None


def test_facts_decide_the_state_and_only_current_heartbeats_count() -> None:
    facts: list[Event] = [
        SUBMITTED,
        RunAdmitted(header=h(1), members=MEMBERS),
        GenerationStarted(header=h(2, 1), members=MEMBERS, reason="admitted"),
        MembershipConfirmed(header=h(3, 1), members_joined=2),
    ]
    reports = [
        HeartbeatRecorded(header=h(4, 1), logical_id="r0", node="n", step=3),
        HeartbeatRecorded(header=h(5, 0), logical_id="r1", node="n", step=1),  # stale
    ]
    doc = status_document(RUN, [SUBMITTED], facts, reports, T0 + 10_000)
    assert doc is not None
    assert (doc["state"], doc["generation"], doc["seen_by_controller"]) == ("Running", 1, True)
    ages = {m["logical_id"]: m["heartbeat_age_ms"] for m in doc["members"]}
    assert ages == {"r0": 6000, "r1": None}

    cancelled = status_document(
        RUN, [], [*facts, RunCancelled(header=h(6, 1), principal="bob", reason="done")], [], T0
    )
    assert cancelled is not None
    assert (cancelled["state"], cancelled["terminal"]) == ("Cancelled", True)
    assert [r["state"] for r in list_rows([SUBMITTED], facts)] == ["Running"]
