"""The live view's documents: pure functions of run summaries and projection rows."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from runledger.ui import views

NOW = 2_000_000


def doc(run_id: str, state: str = "Running", *, terminal: bool = False, step: int = 5,
        submitted: int = 1_000, updated: int = 1_500, members: tuple[str, ...] = ("node-a",),
        history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"run_id": run_id, "name": f"n-{run_id}", "principal": "alice", "state": state,
            "terminal": terminal, "generation": 2, "step": step, "tokens": 40,
            "world_size": len(members), "submitted_at": submitted, "updated_at": updated,
            "submitted_at_iso": "t", "failure_count": len(history or []), "alerts": 0,
            "checkpoint": {"step": 4, "generation": 2}, "cursor": {"epoch": 0, "position": 9},
            "members": [{"logical_id": f"r{i}", "node": n, "slot": i, "domain": "d"}
                        for i, n in enumerate(members)],
            "failure_history": history or []}


def test_the_projection_step_counts_only_when_newer_and_the_run_is_live() -> None:
    assert views.progress(doc("a", step=5), 9)["step"] == 9
    assert views.progress(doc("a", step=5), 9)["step_source"] == "projection"
    assert views.progress(doc("a", step=5), 3)["step"] == 5
    assert views.progress(doc("a", step=5), None)["step_source"] == "runledger.status"
    # An ended run's summary is final: a projection can only be behind it.
    ended = doc("a", "Succeeded", terminal=True, step=5)
    assert views.progress(ended, 9)["step"] == 5


def test_live_runs_come_first_newest_submission_first_then_ended_by_last_change() -> None:
    docs = [doc("old-live", submitted=1), doc("new-live", submitted=5),
            doc("ended-early", "Failed", terminal=True, updated=10),
            doc("ended-late", "Succeeded", terminal=True, updated=20)]
    table = views.runs_table(docs, {"new-live": 0.5}, {}, NOW)
    assert [r["run_id"] for r in table["runs"]] == ["new-live", "old-live", "ended-late",
                                                    "ended-early"]
    assert table["runs"][0]["ettr"] == 0.5 and table["runs"][1]["ettr"] is None
    assert table["by_state"] == {"Failed": 1, "Running": 2, "Succeeded": 1}
    assert table["runs"][0]["href"] == "/runs/new-live"


def test_only_the_newest_ended_runs_are_shown_and_the_rest_counted() -> None:
    docs = [doc(f"e{i}", "Succeeded", terminal=True, updated=i) for i in range(5)]
    table = views.runs_table(docs, {}, {}, NOW, recent_ended=2)
    assert [r["run_id"] for r in table["runs"]] == ["e4", "e3"]
    assert table["ended_left_out"] == 3


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 50), st.integers(0, 50)),
                max_size=30), st.integers(0, 10))
def test_every_live_run_is_shown_and_the_counts_cover_every_run(
        runs: list[tuple[bool, int, int]], keep: int) -> None:
    docs = [doc(f"r{i}", "Succeeded" if ended else "Running", terminal=ended,
                submitted=sub, updated=upd) for i, (ended, sub, upd) in enumerate(runs)]
    table = views.runs_table(docs, {}, {}, NOW, recent_ended=keep)
    shown = {r["run_id"] for r in table["runs"]}
    assert {d["run_id"] for d in docs if not d["terminal"]} <= shown
    assert sum(table["by_state"].values()) == len(docs)
    ended = sum(d["terminal"] for d in docs)
    assert table["ended_left_out"] == max(ended - keep, 0)
    assert len(shown) == len(docs) - table["ended_left_out"]


def test_failures_newest_first_each_with_a_link_to_its_workers_output() -> None:
    history = [{"generation": 1, "logical_id": "r1", "signature": "a"},
               {"generation": 2, "logical_id": "r/0 x", "signature": "b"},
               {"generation": 3, "logical_id": None, "signature": "c"}]
    out = views.failures(doc("run 1", history=history))
    assert [f["signature"] for f in out] == ["c", "b", "a"]
    # Quoted: a run id or member with odd characters still makes one link.
    assert out[1]["log_href"] == "/runs/run%201/logs?generation=2&rank=r%2F0%20x"
    assert out[0]["log_href"] is None  # a failure of the whole run names no member


def test_members_in_rank_order_with_their_node_and_output() -> None:
    out = views.members(doc("a", members=("node-a", "node-b")))
    assert [(m["rank"], m["node"]) for m in out] == [(0, "node-a"), (1, "node-b")]
    assert out[1]["log_href"] == "/runs/a/logs?generation=2&rank=r1"
    assert out[1]["node_href"] == "/nodes#node-b"


def test_an_alert_links_its_runbook_section() -> None:
    a = views.alert_row({"alert": "progress-stall", "severity": "page",
                         "runbook": "docs/runbooks.md#progress-stall", "resolved_at": None})
    assert a["runbook_href"] == "/runbooks#progress-stall" and a["open"]
    b = views.alert_row({"alert": "x", "runbook": "https://wiki/run#x", "resolved_at": 5})
    assert b["runbook_href"] == "https://wiki/run#x" and not b["open"]
    assert views.alert_row({"alert": "y", "runbook": None})["runbook_href"] is None


def test_each_node_lists_the_live_runs_with_a_member_on_it() -> None:
    rows = [{"node": "node-a", "state": "ready"}, {"node": "node-b", "state": "lost"}]
    docs = [doc("live", members=("node-a", "node-a")),
            doc("done", "Succeeded", terminal=True, members=("node-b",))]
    out = {r["node"]: r for r in views.nodes_table(rows, docs)}
    assert [r["run_id"] for r in out["node-a"]["runs"]] == ["live"]  # once, not per member
    assert out["node-b"]["runs"] == []  # an ended run holds no node
    assert out["node-b"]["state"] == "lost"


def test_the_run_page_carries_the_ettr_and_alerts_it_was_given() -> None:
    page = views.run_page(doc("a"), 7, {"ratio": 0.25, "allocated_s": 4.0, "parts": {}},
                          [{"alert": "straggler", "runbook": "docs/runbooks.md#straggler-rank"}],
                          NOW)
    assert page["run"]["step"] == 7 and page["run"]["ettr"] == 0.25
    assert page["alerts"][0]["runbook_href"] == "/runbooks#straggler-rank"
    assert page["checkpoint"] == {"step": 4, "generation": 2}
