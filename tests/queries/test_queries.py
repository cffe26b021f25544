"""The queries against projections of hand-timed logs (no broker: the SQL is the subject)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import runmanifest
from events.topics import RUNS
from queries.errors import QueryError
from queries.runner import names, run_query
from tests.queries.timeline import Timeline, crash_and_recover, project, sdc_run


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


def parts(con: duckdb.DuckDBPyConnection, run: str) -> dict[str, float]:
    return {r["part"]: r["seconds"] for r in run_query(con, "ettr", run).records()}


def test_ettr_assigns_every_millisecond_to_the_part_worked_out_by_hand(con) -> None:
    tl = Timeline()
    expected = crash_and_recover(tl)
    project(con, tl)
    got = parts(con, tl.run_id)
    for part, ms in expected.items():
        assert got[part] == pytest.approx(ms / 1000), part
    assert got["allocated"] == pytest.approx(sum(expected.values()) / 1000)
    assert sum(v for k, v in got.items() if k != "allocated") == pytest.approx(got["allocated"])


def test_ettr_of_a_run_without_failures_has_no_lost_work(con) -> None:
    tl = Timeline()
    tl.submit()
    tl.admit()
    tl.start(1)
    tl.advance(200)
    for s in range(1, 6):
        tl.step(1, s, ms=100, wait=0)
    tl.finish(1)
    project(con, tl)
    got = parts(con, tl.run_id)
    assert got["productive"] == pytest.approx(0.5)
    assert got["idle"] == pytest.approx(0.2)
    assert got["lost_work"] == got["detection"] == got["recovery"] == 0


def test_goodput_counts_only_steps_that_survived(con) -> None:
    tl = Timeline()
    crash_and_recover(tl)
    project(con, tl)
    (row,) = run_query(con, "goodput", tl.run_id).records()
    assert row["accepted_steps"] == 30
    assert row["accepted_loss_tokens"] == 30 * 4000
    assert row["discarded_loss_tokens"] == 5 * 4000
    submitted = tl.events[0].header.occurred_at
    end = tl.events[-1].header.occurred_at
    assert row["end_to_end_s"] == pytest.approx((end - submitted) / 1000)
    assert row["loss_tokens_per_s"] == pytest.approx(120000 / ((end - submitted) / 1000), rel=1e-3)
    assert row["price_per_gpu_hour"] == 2.5
    assert row["cost_per_loss_token"] == pytest.approx(
        2.5 * row["gpu_hours"] / (30 * 4000), rel=1e-3)


def test_goodput_and_the_manifest_agree_when_a_restore_fell_back(con) -> None:
    """Generation 2 is told to resume from 20 but restores 10 (20 failed verification)
    and trains 11-30: generation 1's steps 11-25 were redone, so they are discarded,
    both by goodput.sql and by the post-run manifest (built from the facts alone)."""
    tl = Timeline()
    tl.submit()
    tl.admit()
    tl.start(1)
    for s in range(1, 26):
        tl.step(1, s)
        if s in (10, 20):
            tl.checkpoint(1, s)
    tl.exit(1)
    tl.fail(1)
    tl.start(2, resume=20)
    tl.add(tl.ev.revoked(2, 20, committed_gen=1))  # 20 failed the restore's verification
    tl.restore(2, 10, "local")
    for s in range(11, 31):
        tl.step(2, s)
    tl.finish(2)
    project(con, tl)
    (row,) = run_query(con, "goodput", tl.run_id).records()
    assert (row["accepted_steps"], row["accepted_loss_tokens"], row["discarded_loss_tokens"]) \
        == (30, 30 * 4000, 15 * 4000)
    doc = runmanifest.build(r.event for r in tl.records() if r.topic == RUNS)
    assert doc is not None
    assert (doc["tokens"]["accepted_steps"], doc["tokens"]["accepted_loss_tokens"],
            doc["tokens"]["discarded_loss_tokens"]) == (30, 30 * 4000, 15 * 4000)
    assert (doc["cost"]["gpu_hours"], doc["cost"]["per_loss_token"]) == (
        row["gpu_hours"], row["cost_per_loss_token"])  # the same arithmetic, to the bit
    lost = {r["part"]: r["seconds"] for r in run_query(con, "ettr", tl.run_id).records()}
    assert lost["lost_work"] == pytest.approx(15 * 0.1)


def test_incidents_report_detection_rto_and_rpo(con) -> None:
    tl = Timeline()
    crash_and_recover(tl)
    project(con, tl)
    (inc,) = run_query(con, "incidents", tl.run_id).records()
    assert inc["detection_s"] == pytest.approx(0.030)
    assert inc["rto_s"] == pytest.approx(0.030 + 0.500)
    assert (inc["last_step"], inc["resumed_from"], inc["rpo_steps"]) == (25, 20, 5)
    # Since step 20 ended: its 50 ms checkpoint, steps 21-25 (500 ms), 20 ms to the kill.
    assert inc["rpo_s"] == pytest.approx(0.570)
    assert inc["member"] == "r1" and inc["failure_class"] == "worker_crash"
    assert inc["log_path"] == "/agent/run/g1/r1.log"
    assert inc["stderr_tail"] == "Fatal Python error: Segmentation fault\n"
    assert inc["restored_tier"] is None  # no rank reported a restore


def test_an_incident_counts_from_the_step_the_restore_loaded_and_names_its_tier(con) -> None:
    """A host loss: the controller's latest commit (step 20) was on the lost host's
    tier; the ranks restored step 10 from the remote tier, so 15 steps were lost."""
    tl = Timeline()
    tl.submit()
    tl.admit()
    tl.start(1)
    for s in range(1, 26):
        tl.step(1, s)
        if s in (10, 20):
            tl.checkpoint(1, s)
    tl.exit(1)
    tl.fail(1)
    tl.start(2, resume=20)
    tl.restore(2, 10, "remote")
    tl.step(2, 11)
    project(con, tl)
    (inc,) = run_query(con, "incidents", tl.run_id).records()
    assert (inc["last_step"], inc["resumed_from"], inc["rpo_steps"]) == (25, 10, 15)
    assert inc["restored_tier"] == "remote"
    # RPO in time from when step 10 was trained: 15 steps of 100 ms, two 50 ms checkpoints
    assert inc["rpo_s"] == pytest.approx(15 * 0.1 + 2 * 0.05)


def test_a_suspicion_is_an_incident_with_its_verdict_and_rollback(con) -> None:
    tl = Timeline()
    sdc_run(tl)
    project(con, tl)
    (inc,) = run_query(con, "incidents", tl.run_id).records()
    assert (inc["generation"], inc["failure_class"], inc["sdc_detector"]) == (
        1, "silent_corruption", "agreement")
    assert (inc["sdc_step"], json.loads(inc["sdc_ranks"]), json.loads(inc["sdc_nodes"])) == (
        22, [1], ["node-a"])
    assert (inc["verdict"], inc["verdict_detail"]) == ("node_fault", "node_fault by replay")
    # 20 was committed but revoked before the suspicion: 15 is the newest one kept.
    assert (inc["rollback_step"], inc["rollback_manifest"]) == (15, "sha256:g1s15")
    assert (inc["steps_lost"], inc["revoked_checkpoints"]) == (7, 0)
    # The fault is the suspicion, 10 ms before the exits: detection counts from it.
    assert inc["detection_s"] == pytest.approx(0.010)
    assert (inc["last_step"], inc["resumed_from"], inc["rpo_steps"]) == (21, 15, 6)


def test_an_open_suspicion_is_an_incident_and_later_checkpoints_count_as_revoked(
        con) -> None:
    tl = Timeline()
    tl.submit()
    tl.admit()
    tl.start(1)
    for s in range(1, 9):
        tl.step(1, s)
        if s in (4, 8):
            tl.checkpoint(1, s)  # 8: an async commit that raced the detector
    tl.suspect(1, 8, ranks=(), detector="nonfinite")
    tl.add(tl.ev.revoked(1, 8, reason="corruption_suspected"))
    project(con, tl)
    (inc,) = run_query(con, "incidents", tl.run_id).records()
    # Not classified yet, no failure: the open suspicion is an incident of its own.
    assert (inc["failure_class"], inc["action"], inc["verdict"]) == (
        "silent_corruption", None, None)
    assert inc["detail"] == "nonfinite at step 8" and inc["fault_at"] is not None
    assert json.loads(inc["sdc_nodes"]) == ["node-a", "node-a"]
    assert (inc["rollback_step"], inc["revoked_checkpoints"], inc["steps_lost"]) == (4, 1, 4)


def test_a_suspicion_without_an_earlier_checkpoint_rolls_back_to_the_start(con) -> None:
    tl = Timeline()
    tl.submit()
    tl.admit()
    tl.start(1)
    for s in range(1, 4):
        tl.step(1, s)
    tl.suspect(1, 3, detector="spike")
    tl.sdc_exit(1)
    tl.start(2)
    tl.classify(2, 1, 3, "transient")
    project(con, tl)
    (inc,) = run_query(con, "incidents", tl.run_id).records()
    assert (inc["rollback_step"], inc["rollback_manifest"], inc["steps_lost"]) == (0, None, 3)
    assert (inc["sdc_detector"], inc["verdict"]) == ("spike", "transient")


@st.composite
def _histories(draw: st.DrawFn) -> tuple[int, set[int], set[int], set[int], set[int], bool]:
    """(suspect step, commits before it, revoked before it, commits landing after it
    (below the step), revoked after it, restarted)."""
    step = draw(st.integers(1, 12))
    early = draw(st.sets(st.integers(1, 12)))
    revoked = draw(st.sets(st.sampled_from(sorted(early)))) if early else set()
    late = draw(st.sets(st.integers(1, step - 1))) - early if step > 1 else set()
    later = draw(st.sets(st.sampled_from(sorted(early)))) if early else set()
    return step, early, revoked, late, later, draw(st.booleans())


@settings(max_examples=40, deadline=None)
@given(_histories())
def test_the_rollback_is_the_newest_checkpoint_a_restart_may_resume_from(
        history: tuple[int, set[int], set[int], set[int], set[int], bool]) -> None:
    """Oracle: below the suspect step, commits and revocations up to the restart count;
    at or after it, commits before the suspicion not revoked by then are revoked by it;
    nothing after the restart changes either."""
    step, early, revoked, late, later, restarted = history
    tl = Timeline()
    tl.submit()
    tl.admit()
    tl.start(1)
    for s in sorted(early):
        tl.add(tl.ev.committed(1, s, manifest_digest=f"sha256:g1s{s}"))
    for s in sorted(revoked):
        tl.add(tl.ev.revoked(1, s))
    tl.suspect(1, step)
    for s in sorted(late):
        tl.add(tl.ev.committed(1, s, manifest_digest=f"sha256:g1s{s}"))
    for s in sorted(later):
        tl.add(tl.ev.revoked(1, s))
    if restarted:
        tl.start(2, resume=0)
        for s in sorted(early | late):  # after the restart: too late to matter
            tl.add(tl.ev.revoked(1, s))
    con = duckdb.connect()
    project(con, tl)
    (inc,) = run_query(con, "incidents", tl.run_id).records()
    usable = [s for s in (early | late) - revoked - later if s < step]
    expected = max(usable, default=0)
    assert inc["rollback_step"] == expected
    assert inc["rollback_manifest"] == (f"sha256:g1s{expected}" if usable else None)
    assert inc["steps_lost"] == step - expected
    assert inc["revoked_checkpoints"] == len({s for s in early - revoked if s >= step})


def test_an_ordinary_failure_has_no_sdc_columns(con) -> None:
    tl = Timeline()
    crash_and_recover(tl)
    project(con, tl)
    (inc,) = run_query(con, "incidents", tl.run_id).records()
    assert all(inc[k] is None for k in ("sdc_detector", "sdc_step", "verdict",
                                        "rollback_step", "steps_lost"))


def test_provenance_follows_the_lineage_through_the_restart(con) -> None:
    tl = Timeline()
    crash_and_recover(tl)
    project(con, tl)
    chain = run_query(con, "provenance", tl.run_id).records()
    assert [(c["generation"], c["step"], c["step_from"]) for c in chain] == [
        (2, 30, 20), (1, 20, 10), (1, 10, 0)]
    assert [(c["position_from"], c["position_to"]) for c in chain] == [
        (160, 240), (80, 160), (0, 80)]
    assert json.loads(chain[0]["source_counts"]) == {"code": 90, "web": 150}
    assert json.loads(chain[0]["source_delta"]) == {"code": 30, "web": 50}
    assert chain[0]["code_version"] == "3f1c2a9b7d4e5f60718293a4b5c6d7e8f9012345"
    assert chain[-1]["parent_digest"] is None
    older = run_query(con, "provenance", tl.run_id, checkpoint_step=20).records()
    assert [c["step"] for c in older] == [20, 10]


def test_audit_lists_every_fact_in_log_order(con) -> None:
    tl = Timeline()
    crash_and_recover(tl)
    project(con, tl)
    rows = run_query(con, "audit", tl.run_id).records()
    facts = [e for e in tl.events if type(e).__name__ not in
             ("StepTimesRecorded", "HeartbeatRecorded", "CheckpointRestored")]
    assert [r["event_type"] for r in rows] == [type(e).__name__ for e in facts]
    assert [r["log_offset"] for r in rows] == sorted(r["log_offset"] for r in rows)
    (gen2,) = [r for r in rows if r["event_type"] == "GenerationStarted" and r["generation"] == 2]
    assert gen2["summary"] == "restart from step 20"


def test_stragglers_flag_the_slow_rank(con) -> None:
    tl = Timeline()
    tl.submit()
    tl.admit()
    tl.start(1)
    for s in range(1, 21):
        tl.step(1, s, rank_ms=(100.0, 100.0 + 20 * (s % 3 == 0)))
    tl.start(2, resume=None)  # the latest generation is the one reported
    for s in range(1, 21):
        tl.step(2, s, rank_ms=(100.0, 190.0))
    project(con, tl)
    rows = {r["member"]: r for r in run_query(con, "stragglers", tl.run_id).records()}
    assert rows["r1"]["straggler"] and not rows["r0"]["straggler"]
    assert rows["r1"]["p50_ms"] == 190.0 and rows["r1"]["generation"] == 2
    relaxed = run_query(con, "stragglers", tl.run_id, straggler_ratio=2.0).records()
    assert not any(r["straggler"] for r in relaxed)


def test_mixture_compares_counts_with_targets(con) -> None:
    tl = Timeline()
    tl.submit()
    tl.admit()
    tl.start(1)
    tl.step(1, 1)
    tl.checkpoint(1, 1, counts={"web": 6, "code": 2})
    project(con, tl)
    rows = {r["source"]: r for r in run_query(con, "mixture", tl.run_id).records()}
    assert rows["web"]["target_count"] == 5.0 and rows["web"]["drift"] == 1.0
    assert rows["code"]["drift"] == -1.0 and rows["code"]["drift_share"] == 0.125


def test_unknown_names_and_runs_list_what_exists(con) -> None:
    tl = Timeline()
    crash_and_recover(tl)
    project(con, tl)
    with pytest.raises(QueryError, match="unknown query 'etr'; queries: alerts, audit"):
        run_query(con, "etr", tl.run_id)
    with pytest.raises(QueryError, match=r"unknown run 'run-b'; .*run-a"):
        run_query(con, "ettr", "run-b")
    assert {"ettr", "goodput", "provenance", "audit", "incidents", "stragglers"} <= set(names())


# What each query must answer for the crash-and-recover run (plus one alert raised
# and resolved): a check per ``.sql`` file, so a new query without one fails below.
_EXPECTED: dict[str, Callable[[list[dict[str, Any]]], bool]] = {
    "alerts": lambda rows: [(r["alert"], r["subject"]) for r in rows]
    == [("straggler_rank", "r1")] and rows[0]["resolved_at"] is not None,
    "audit": lambda rows: rows[0]["event_type"] == "RunSubmitted"
    and rows[-1]["event_type"] == "RunFinished"
    and [r["log_offset"] for r in rows] == sorted(r["log_offset"] for r in rows),
    "ettr": lambda rows: {r["part"] for r in rows} >= {"allocated", "productive", "lost_work"}
    and sum(r["seconds"] for r in rows if r["part"] != "allocated")
    == pytest.approx(next(r["seconds"] for r in rows if r["part"] == "allocated")),
    "goodput": lambda rows: len(rows) == 1 and rows[0]["accepted_steps"] == 30
    and rows[0]["devices"] == "2 x cpu",
    # Steps 1-25 of g1 (21-25 redone by g2) and 21-30 of g2, with the falling loss.
    "curves": lambda rows: [(r["generation"], r["step"], r["lost"]) for r in rows]
    == [(1, s, s > 20) for s in range(1, 26)] + [(2, s, False) for s in range(21, 31)]
    and [r["loss"] for r in rows] == [4.0 / (1 + s / 10) for s in
                                      [*range(1, 26), *range(21, 31)]],
    "incidents": lambda rows: [(r["generation"], r["action"], r["rpo_steps"]) for r in rows]
    == [(1, "restart", 5)],
    "mixture": lambda rows: bool(rows) and all(r["count"] >= 0 for r in rows),
    "provenance": lambda rows: [r["step"] for r in rows] == [30, 20, 10],
    # The facts `runledger query recovery` folds (tests/queries/test_recovery.py).
    "recovery": lambda rows: rows[0]["event_type"] == "RunSubmitted"
    and [r["step"] for r in rows if r["event_type"] == "ManifestCommitted"] == [10, 20, 30],
    "stragglers": lambda rows: {r["member"] for r in rows} == {"r0", "r1"},
    "timeline": lambda rows: {"generation", "step"} <= {r["kind"] for r in rows},
}


def test_every_query_answers_the_same_in_the_duckdb_cli_form(con) -> None:
    """Each file is plain SQL over getvariable(): what the DuckDB CLI runs after SET
    VARIABLE gives the rows ``run_query`` gives, and those rows are the right answer."""
    from queries.runner import sql_text

    tl = Timeline()
    crash_and_recover(tl)
    raised = tl.add(tl.ev.alert(2, alert="straggler_rank", owner="oncall",
                                runbook="docs/runbooks.md#straggler_rank", detail="r1 is slow",
                                subject="r1", threshold="1.5", value=2.0))
    tl.add(tl.ev.alert_resolved(2, alert="straggler_rank", subject="r1",
                                raised_event_id=raised.header.event_id, detail="back to normal"))
    tl.events.append(tl.events.pop(-3))  # the run's end stays its last fact
    project(con, tl)
    assert set(_EXPECTED) == set(names()), "every query needs an expected answer here"
    con.execute("SET VARIABLE run_id = 'run-a'")
    for name in names():
        result = run_query(con, name, tl.run_id)
        cli = con.execute(sql_text(name))
        assert [d[0] for d in cli.description or []] == result.columns, name
        assert cli.fetchall() == result.rows, name
        assert _EXPECTED[name](result.records()), (name, result.records()[:3])


def test_the_python_oracle_agrees_with_the_hand_worked_parts() -> None:
    from events.topics import RUNS
    from tests.queries.ettr_oracle import ettr_parts

    tl = Timeline()
    expected = crash_and_recover(tl)
    facts = [r.event for r in tl.records() if r.topic == RUNS]
    got = ettr_parts(facts)
    for part, ms in expected.items():
        assert got[part] == pytest.approx(ms / 1000), part


def _one_step_runs(ended: tuple[bool, ...]) -> list[Timeline]:
    """Runs ``run-0``, ``run-1``, .. of one step each, 10 s apart; those marked ended
    finished."""
    runs = []
    for i, end in enumerate(ended):
        tl = Timeline(run_id=f"run-{i}", start_ms=1_000_000 + i * 10_000)
        tl._n = 0
        tl.submit()
        tl.admit()
        tl.start(1)
        tl.step(1, 1)
        if end:
            tl.finish(1)
        runs.append(tl)
    return runs


def test_ettr_all_covers_live_runs_and_the_latest_ended_ones(con) -> None:
    from queries.ettr import ettr_all

    project(con, *_one_step_runs((True, True, False)))
    assert set(ettr_all(con)) == {"run-0", "run-1", "run-2"}
    assert set(ettr_all(con, recent_ended=1)) == {"run-1", "run-2"}  # run-1 ended last
    assert all(0 < v <= 1 for v in ettr_all(con).values())


def test_an_ettr_book_spends_its_budget_on_the_runs_computed_longest_ago(con) -> None:
    """A scrape's ETTR work is bounded (bench/cluster.py: 1,000 live runs took 30 s a
    scrape): each call computes runs until its budget is spent, oldest first, answers
    the rest from before, and forgets a run no longer listed."""
    from queries.ettr import EttrBook, ettr_all

    project(con, *_one_step_runs((False,) * 5))
    now = [0.0]

    def clock() -> float:  # every reading of the clock is a tenth of a second later
        now[0] += 0.1
        return now[0]

    book = EttrBook(budget_s=0.25, clock=clock)
    first = book(con)
    assert 1 <= len(first) < 5  # the budget ran out before every run was computed
    assert first.items() <= ettr_all(con).items()
    second = book(con)
    assert second.keys() > first.keys()  # the ones not computed yet came next
    while len(book(con)) < 5:
        pass
    assert book(con) == ettr_all(con)  # once round, every live run, same values
    before = dict(book.book)
    book(con)
    redone = {r for r in before if book.book[r][1] != before[r][1]}
    by_age = sorted(before, key=lambda r: before[r][1])
    assert redone and redone == set(by_age[:len(redone)]) and len(redone) < 5
    # A budget of nothing still computes one run per call: the page never stands still.
    assert len(EttrBook(budget_s=0.0, clock=clock)(con)) == 1
