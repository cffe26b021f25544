"""What status and runs show, from events alone (no broker): unseen runs, fencing of heartbeats."""

from __future__ import annotations

from events.model import Event
from runledger.views.runview import list_rows, status_document, status_lines
from tests.events.builders import Ev, members

RUN = "tiny-0123456789"
T0 = 1_700_000_000_000
MEMBERS = members("r0", "r1")
EV = Ev(RUN, start=T0, tick=1000, ids="{run}/e{n}")  # event n at T0 + n s

SUBMITTED = EV.submitted(spec_digest="sha256:" + "a" * 64, spec_json='{"name":"tiny"}',
                         principal="bob", world_size=2, dataset_id=None, n=0)


def test_a_run_only_on_requests_is_submitted_but_unseen() -> None:
    cancel = EV.cancel_requested(principal="ops", reason="oops", n=1)
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
        EV.admitted(members=MEMBERS, n=1),
        EV.generation_started(1, members=MEMBERS, reason="admitted", n=2),
        EV.confirmed(1, 2, n=3),
    ]
    reports = [
        EV.heartbeat(1, "r0", step=3, node="n", n=4),
        EV.heartbeat(0, "r1", step=1, node="n", n=5),  # stale
    ]
    doc = status_document(RUN, [SUBMITTED], facts, reports, T0 + 10_000)
    assert doc is not None
    assert (doc["state"], doc["generation"], doc["seen_by_controller"]) == ("Running", 1, True)
    ages = {m["logical_id"]: m["heartbeat_age_ms"] for m in doc["members"]}
    assert ages == {"r0": 6000, "r1": None}

    cancelled = status_document(
        RUN, [], [*facts, EV.cancelled(1, principal="bob", reason="done", n=6)], [], T0
    )
    assert cancelled is not None
    assert (cancelled["state"], cancelled["terminal"]) == ("Cancelled", True)
    assert [r["state"] for r in list_rows([SUBMITTED], facts)] == ["Running"]


def test_a_summary_says_once_where_heartbeat_ages_are_and_explains_rejections() -> None:
    """#34: every member line read `heartbeat age: status --refold reads the reports`,
    and `rejections 1` on a successful run explained nothing."""
    facts: list[Event] = [
        SUBMITTED,
        EV.admitted(members=MEMBERS, n=1),
        EV.generation_started(1, members=MEMBERS, reason="admitted", n=2),
        EV.rejected(1, n=3),
    ]
    doc = status_document(RUN, [SUBMITTED], facts, [], T0 + 10_000)
    assert doc is not None and doc["rejections"] == 1
    summarized = {**doc, "source": "runledger.status", "summarized_at": T0}
    lines = status_lines(summarized)
    member_lines = [x for x in lines if x.split()[:1] in (["members"], ["r1"])]
    assert member_lines and not any("refold" in x for x in member_lines)
    assert sum("heartbeat ages: `status --refold` reads the reports" in x for x in lines) == 1
    [rejected] = [x for x in lines if x.startswith("rejections")]
    assert rejected.startswith("rejections  1 (records the controller refused")
    assert f"`runledger query audit {RUN}`" in rejected
    clean = status_lines({**doc, "rejections": 0})
    assert "rejections  0" in clean
