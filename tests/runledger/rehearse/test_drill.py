"""runledger.rehearse.drillplan and .drilljudge: the catalog, what a spec can show, and the
judgement of a drill run's events (synthetic runs, told step by step)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.model import (
    AlertRaised,
    CheckpointRestored,
    CheckpointVerificationFailed,
    CursorAdvanced,
    DrillCompleted,
    Event,
    FailureClassified,
    GenerationStarted,
    Header,
    ManifestCommitted,
    Member,
    NodeQuarantined,
    PreflightCheck,
    RunFinished,
    ShardWritten,
    StepCommitted,
    WriteRejected,
)
from runledger.errors import UsageError
from runledger.rehearse import drilljudge, drillplan, drillview
from runledger.rehearse.drilljudge import FAIL, PASS, SKIP
from runledger.rehearse.drillplan import NAMES, Planned, Shape, Skipped

RUN = "drill-1"
DIGEST = "sha256:" + "ab" * 32
FIXED = Shape(members=2, elastic=False, can_shrink=False, rpo_s=600.0, rto_s=300.0,
              attempts={"default": 5})
ELASTIC = replace(FIXED, elastic=True, can_shrink=True)


def h(gen: int, at: int, name: str) -> Header:
    return Header(f"{RUN}/{name}", RUN, gen, at, "controller")


def member(i: int) -> Member:
    return Member(f"r{i}", "n1", i)


@dataclass
class Story:
    """A drill run told in order: the facts and the workers' reports."""

    facts: list[Event] = field(default_factory=list)
    reports: list[Event] = field(default_factory=list)
    clock: int = 1_000_000

    def tick(self, ms: int = 100) -> int:
        self.clock += ms
        return self.clock

    def start(self, gen: int, resume: int | None = None, replicas: int | None = None) -> None:
        self.facts.append(GenerationStarted(
            header=h(gen, self.tick(), f"g{gen}"), members=(member(0), member(1)),
            reason="admitted" if gen == 1 else "restart", resume_step=resume,
            replicas=replicas))

    def steps(self, gen: int, first: int, last: int, every: int, rate: int = 8) -> None:
        for s in range(first, last + 1):
            self.facts.append(StepCommitted(header=h(gen, self.tick(), f"g{gen}/s{s}"), step=s,
                                            tokens=10, loss_tokens=9, step_time_ms=100.0,
                                            input_wait_ms=1.0))
            if s % every == 0:
                self.commit(gen, s, rate)

    def commit(self, gen: int, s: int, rate: int = 8) -> None:
        self.facts.append(ManifestCommitted(header=h(gen, self.tick(1), f"g{gen}/c{s}"), step=s,
                                            manifest_path=f"/c/{s}/m.json",
                                            manifest_digest=DIGEST))
        self.facts.append(CursorAdvanced(header=h(gen, self.tick(1), f"g{gen}/cur{s}"), step=s,
                                         dataset_id="ds", epoch=0, position=s * rate,
                                         source_counts={"a": s * rate}))

    def fail(self, cls: str, action: str = "restart", attempt: int = 1) -> None:
        self.facts.append(FailureClassified(header=h(1, self.tick(), f"f{attempt}{cls}"),
                                            failure_class=cls, signature=f"{cls}:x",
                                            action=action, attempt=attempt, detail="d"))

    def restored(self, gen: int, s: int) -> None:
        self.reports.append(CheckpointRestored(
            header=h(gen, self.tick(), f"g{gen}/restored"), step=s, manifest_path="/c/m.json",
            manifest_digest=DIGEST, logical_id="r0", verify_ms=1.0, load_ms=1.0, fell_back=0))

    def finish(self, outcome: str = "succeeded") -> None:
        self.facts.append(RunFinished(header=h(2, self.tick(), "end"), outcome=outcome,
                                      reason="done"))


def recovered(plan: Planned, restored: int, last: int, cls: str = "worker_crash") -> Story:
    """The usual shape: generation 1 to ``last``, a failure, generation 2 from ``restored``."""
    s = Story()
    s.start(1)
    s.steps(1, 1, last, plan.interval)
    s.fail(cls)
    s.start(2, restored)
    s.restored(2, restored)
    s.tick(2000)
    s.steps(2, restored + 1, plan.steps, plan.interval)
    s.finish()
    return s


def planned(fault: str, shape: Shape = FIXED, steps: int = 20) -> Planned:
    p = drillplan.plan_one(shape, fault, steps)
    assert isinstance(p, Planned)
    return p


def rows(judged: drilljudge.Judged) -> dict[str, PreflightCheck]:
    return {r.check: r for r in judged.checks}


TERMINAL = (PreflightCheck("terminal.workers", "drill run", PASS, 0, 0, "processes", "none"),)


# -- the catalog and the plan --------------------------------------------------------------


def test_every_fault_named_in_the_event_schema_is_in_the_catalog() -> None:
    assert NAMES == ("kill_compute", "kill_checkpoint", "hang", "straggler", "storage_timeout",
                     "truncated_shard", "stale_worker", "missing_object", "topology_change")


def test_an_unknown_fault_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(UsageError, match=r"unknown fault 'explode'.*kill_compute, kill_checkpoint"):
        drillplan.chosen("hang,explode")


def test_faults_run_in_catalog_order_whatever_order_asked() -> None:
    assert drillplan.chosen("stale_worker, hang") == ("hang", "stale_worker")
    assert drillplan.chosen(None) == NAMES
    assert drillplan.chosen(" ") == NAMES


def test_a_topology_change_on_a_fixed_spec_is_skipped_with_its_reason() -> None:
    (entry,) = drillplan.plan(FIXED, ["topology_change"], 20)
    assert isinstance(entry, Skipped)
    assert "elastic" in entry.reason and "fixed" in entry.reason
    elastic_full = replace(FIXED, elastic=True, can_shrink=False)
    (entry,) = drillplan.plan(elastic_full, ["topology_change"], 20)
    assert isinstance(entry, Skipped) and "min equals its max" in entry.reason
    (entry,) = drillplan.plan(ELASTIC, ["topology_change"], 20)
    assert isinstance(entry, Planned)


def test_a_straggler_needs_two_members() -> None:
    (entry,) = drillplan.plan(replace(FIXED, members=1), ["straggler"], 20)
    assert isinstance(entry, Skipped) and "two" in entry.reason


def test_a_drill_too_short_for_two_checkpoints_is_refused() -> None:
    with pytest.raises(UsageError, match="at least 6 steps"):
        drillplan.plan(FIXED, NAMES, 5)


@given(st.integers(drillplan.MIN_STEPS, 400), st.sampled_from(NAMES),
       st.integers(1, 8))
def test_every_injection_lands_after_a_checkpoint_and_before_the_end(
        steps: int, fault: str, members: int) -> None:
    shape = replace(ELASTIC, members=members)
    entry = drillplan.plan_one(shape, fault, steps)
    if isinstance(entry, Skipped):
        assert fault == "straggler" and members == 1
        return
    assert entry.interval >= 2
    assert 1 <= entry.at_step < steps
    assert 0 <= entry.rank < members
    env = dict(entry.env)
    # First generation only: the restart runs clean.
    assert ":gen=1" in env.get("RUNLEDGER_FAULT", ":gen=1")
    if "RUNLEDGER_FAULT" in env and fault not in ("straggler", "stale_worker"):
        assert env["RUNLEDGER_FAULT"].split("@")[1].split(":")[0] == str(entry.at_step)
    if fault in ("kill_compute", "hang", "topology_change"):
        assert entry.interval < entry.at_step < 2 * entry.interval
    if fault in ("kill_checkpoint", "truncated_shard"):
        assert entry.at_step == 2 * entry.interval


def test_the_worker_parses_every_injection_the_planner_writes() -> None:
    from worker.faults import parse
    for fault in NAMES:
        entry = drillplan.plan_one(ELASTIC, fault, 20)
        assert isinstance(entry, Planned)
        text = dict(entry.env).get("RUNLEDGER_FAULT")
        if text:
            assert parse(text) is not None


# -- judgement -----------------------------------------------------------------------------


def test_a_kill_in_compute_recovered_from_the_last_checkpoint_passes_with_rpo_and_rto() -> None:
    p = planned("kill_compute")  # interval 6, the kill at step 9
    assert (p.interval, p.at_step) == (6, 9)
    s = recovered(p, restored=6, last=p.at_step)
    j = drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL)
    assert j.verdict == PASS, j.reason
    assert j.rpo_s == pytest.approx(0.3)  # 3 steps of 100 ms
    assert j.rto_s is not None and j.rto_s > 2.0
    r = rows(j)
    assert r["fallback"].figure == 6 and r["cursor"].verdict == PASS
    assert r["terminal.workers"].verdict == PASS


def test_a_restore_older_than_the_last_good_checkpoint_fails_fallback_naming_both() -> None:
    p = planned("kill_compute")
    s = recovered(p, restored=0, last=p.at_step)
    j = drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL)
    assert j.verdict == FAIL
    assert j.reason.startswith("fallback: restored step 0") and "was 6" in j.reason


def test_a_cursor_that_jumps_on_resume_fails_continuity() -> None:
    p = planned("kill_compute")
    s = recovered(p, restored=6, last=p.at_step)
    jumped = [replace(e, position=e.position + 3) if isinstance(e, CursorAdvanced)
              and e.generation == 2 else e for e in s.facts]
    j = drilljudge.judge(p, FIXED, jumped, s.reports, TERMINAL)
    assert rows(j)["cursor"].verdict == FAIL and rows(j)["cursor"].figure == 3


def test_restarts_beyond_the_specs_attempts_fail_bounded_retries() -> None:
    p = planned("kill_compute")
    s = recovered(p, restored=6, last=p.at_step)
    for attempt in range(2, 4):
        s.fail("worker_crash", attempt=attempt)
    tight = replace(FIXED, attempts={"worker_crash": 2, "default": 9})
    assert rows(drilljudge.judge(p, tight, s.facts, s.reports, TERMINAL))[
        "bounded_retries"].verdict == FAIL
    assert rows(drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL))[
        "bounded_retries"].verdict == PASS


def test_rpo_and_rto_beyond_the_spec_fail() -> None:
    p = planned("kill_compute")
    s = recovered(p, restored=6, last=p.at_step)
    strict = replace(FIXED, rpo_s=0.1, rto_s=1.0)
    r = rows(drilljudge.judge(p, strict, s.facts, s.reports, TERMINAL))
    assert r["rpo"].verdict == FAIL and r["rto"].verdict == FAIL


def test_a_checkpoint_cut_mid_shard_must_not_commit() -> None:
    p = planned("kill_checkpoint")  # the cut at step 12
    s = recovered(p, restored=6, last=11)
    assert drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL).verdict == PASS
    s.commit(1, 12)
    r = rows(drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL))
    assert r["no_partial_commit"].verdict == FAIL


def test_a_truncated_shard_is_refused_and_the_previous_checkpoint_restored() -> None:
    p = planned("truncated_shard")  # truncated after committing step 12
    s = recovered(p, restored=6, last=12)
    assert rows(drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL))[
        "verification_failed"].verdict == FAIL
    s.reports.append(CheckpointVerificationFailed(
        header=h(2, s.tick(), "refused"), step=12, manifest_path="/c/12/m.json",
        manifest_digest=DIGEST, logical_id="r0", reason="shard_size", detail="short"))
    j = drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL)
    assert j.verdict == PASS, j.reason
    # Restoring the truncated checkpoint itself is not a fallback.
    s2 = recovered(p, restored=12, last=12)
    s2.reports += [e for e in s.reports if isinstance(e, CheckpointVerificationFailed)]
    assert rows(drilljudge.judge(p, FIXED, s2.facts, s2.reports, TERMINAL))[
        "fallback"].verdict == FAIL


def test_a_hang_must_be_classified_as_a_hang() -> None:
    p = planned("hang")
    assert drilljudge.judge(p, FIXED, *_parts(recovered(p, 6, p.at_step, "hang"))).verdict \
        == PASS
    j = drilljudge.judge(p, FIXED, *_parts(recovered(p, 6, p.at_step, "worker_crash")))
    assert j.verdict == FAIL and "expected hang" in j.reason


def _parts(s: Story) -> tuple[list[Event], list[Event], tuple[PreflightCheck, ...]]:
    return s.facts, s.reports, TERMINAL


def test_a_missing_object_is_the_jobs_data_fault_not_the_nodes() -> None:
    p = planned("missing_object")
    s = Story()
    s.start(1)
    s.fail("data", action="escalate")
    s.facts.append(RunFinished(header=h(1, s.tick(), "end"), outcome="failed", reason="data"))
    j = drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL)
    assert j.verdict == PASS, j.reason
    assert j.rpo_s == 0.0 and j.rto_s is None
    s.facts.insert(-1, NodeQuarantined(header=h(1, s.tick(), "q"), node="n1", reason="x"))
    assert rows(drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL))[
        "not_node"].verdict == FAIL
    hang = Story()
    hang.start(1)
    hang.facts.append(FailureClassified(header=h(1, hang.tick(), "f-hang"),
                                        failure_class="hang", signature="hang:no_heartbeat",
                                        action="restart", attempt=1, detail="d", node="n2"))
    r = rows(drilljudge.judge(p, FIXED, hang.facts, hang.reports, TERMINAL))["not_node"]
    assert r.verdict == FAIL and "hang:no_heartbeat on n2" in r.reason
    # The drill's own hang, as the controller records it (the spec injects faults),
    # is not the node's.
    marked = Story()
    marked.start(1)
    marked.facts.append(FailureClassified(
        header=h(1, marked.tick(), "f-hang"), failure_class="hang",
        signature="hang:no_heartbeat:injected", action="restart", attempt=1, detail="d",
        node="n2"))
    assert rows(drilljudge.judge(p, FIXED, marked.facts, marked.reports, TERMINAL))[
        "not_node"].verdict == PASS


def test_a_straggler_needs_its_alert_and_a_finished_run() -> None:
    p = planned("straggler")
    s = Story()
    s.start(1)
    s.steps(1, 1, 20, p.interval)
    s.finish()
    assert drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL).verdict == FAIL
    def alert(subject: str) -> AlertRaised:
        return AlertRaised(header=h(1, s.tick(), f"alert-{subject}"), alert="straggler_rank",
                           severity="warning", owner="o", runbook="r", detail="d",
                           subject=subject)

    # An alert on another rank than the slowed one is no detection of it.
    s.facts.insert(3, alert("r0"))
    j = drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL)
    assert j.verdict == FAIL and "r1 was the one slowed" in j.reason
    s.facts.insert(3, alert(f"r{p.rank}"))
    assert drilljudge.judge(p, FIXED, s.facts, s.reports, TERMINAL).verdict == PASS


def stale_story(p: Planned, stale_shard: bool, woke: bool = True) -> Story:
    s = recovered(p, restored=6, last=8)
    gen2 = next(i for i, e in enumerate(s.facts)
                if isinstance(e, GenerationStarted) and e.generation == 2)
    at = s.facts[gen2].header.occurred_at
    s.facts.insert(gen2 + 1, WriteRejected(
        header=h(2, at + 5, "rej"), rejected_event_id="x", rejected_event_type="StepCommitted",
        reason="stale_generation", detail="g1", rejected_generation=1))
    if woke:
        s.reports.append(StepCommitted(header=h(1, at + 10, "stale-step"), step=9, tokens=1,
                                       loss_tokens=1, step_time_ms=1.0, input_wait_ms=0.0))
    if stale_shard:
        s.reports.append(ShardWritten(header=h(1, at + 20, "stale-shard"), step=12,
                                      logical_id="r0", path="/c/g1/12/r0", bytes=4,
                                      crc32c="0" * 8))
    return s


def test_a_stale_worker_that_honours_its_fence_passes() -> None:
    p = planned("stale_worker")
    j = drilljudge.judge(p, FIXED, *_parts(stale_story(p, stale_shard=False)))
    assert j.verdict == PASS, j.reason
    assert rows(j)["no_stale_writes"].verdict == PASS


def test_a_stale_worker_that_ignores_its_fence_fails_with_its_stale_shards() -> None:
    p = planned("stale_worker")
    j = drilljudge.judge(p, FIXED, *_parts(stale_story(p, stale_shard=True)))
    assert j.verdict == FAIL
    assert j.reason.startswith("no_stale_writes:") and "ignored its fence" in j.reason


def test_a_stale_worker_killed_before_it_woke_is_a_skipped_row_not_a_pass_of_it() -> None:
    p = planned("stale_worker")
    j = drilljudge.judge(p, FIXED, *_parts(stale_story(p, stale_shard=False, woke=False)))
    assert rows(j)["no_stale_writes"].verdict == SKIP and "--grace" in j.checks[2].reason


def test_a_stale_fact_accepted_after_the_new_generation_fails_fencing() -> None:
    p = planned("stale_worker")
    s = stale_story(p, stale_shard=False)
    s.facts.append(StepCommitted(header=h(1, s.tick(), "leak"), step=8, tokens=1,
                                 loss_tokens=1, step_time_ms=1.0, input_wait_ms=0.0))
    assert rows(drilljudge.judge(p, FIXED, *_parts(s)))["fenced"].verdict == FAIL


def test_a_first_generation_that_failed_before_its_first_checkpoint_is_named_not_the_fence(
        ) -> None:
    """Nothing was paused (the drill pauses after generation 1's first checkpoint): the row
    says why, naming that failure, instead of counting zero refusals against the fence."""
    p = planned("stale_worker")
    s = Story()
    s.start(1)
    s.fail("hang")  # before any step: a slow start, say
    s.start(2)
    s.steps(2, 1, p.steps, p.interval)
    s.finish()
    fenced = rows(drilljudge.judge(p, FIXED, *_parts(s)))["fenced"]
    assert fenced.verdict == FAIL
    assert "generation 1 ended before its first checkpoint (hang:x: d)" in fenced.reason
    assert "nothing stale could be fenced" in fenced.reason


def test_a_shrink_is_seen_in_the_replicas_of_a_later_generation() -> None:
    p = planned("topology_change", ELASTIC)
    s = Story()
    s.start(1, replicas=2)
    s.steps(1, 1, p.at_step, p.interval)
    s.fail("worker_crash")
    s.start(2, 6, replicas=1)
    s.restored(2, 6)
    s.steps(2, 7, 20, p.interval)
    s.finish()
    assert drilljudge.judge(p, ELASTIC, *_parts(s)).verdict == PASS
    grown = [replace(e, replicas=2) if isinstance(e, GenerationStarted) else e for e in s.facts]
    assert rows(drilljudge.judge(p, ELASTIC, grown, s.reports, TERMINAL))[
        "shrunk"].verdict == FAIL


def test_failed_terminal_rows_fail_the_drill_and_none_is_a_skip() -> None:
    p = planned("storage_timeout")
    s = Story()
    s.start(1)
    s.steps(1, 1, 20, p.interval)
    s.finish()
    bad = (replace(TERMINAL[0], verdict=FAIL, reason="pid 42 still runs"),)
    j = drilljudge.judge(p, FIXED, s.facts, s.reports, bad)
    assert j.verdict == FAIL and "pid 42" in j.reason
    j = drilljudge.judge(p, FIXED, s.facts, s.reports, ())
    assert j.verdict == PASS and rows(j)["terminal"].verdict == SKIP


@given(st.integers(0, 30), st.integers(1, 30), st.floats(1.0, 5000.0))
def test_rpo_is_the_steps_lost_times_the_step_time(restored: int, lost: int,
                                                   step_ms: float) -> None:
    t = drilljudge.Timeline(last_step=restored + lost, last_ms=1000, restored=restored,
                            first_after_ms=4000, second_start_ms=2000, step_ms=step_ms)
    rpo, rto = drilljudge.rpo_rto(t)
    assert rpo == pytest.approx(lost * step_ms / 1000.0)
    assert rto == pytest.approx(3.0)
    assert drilljudge.rpo_rto(replace(t, restored=None)) == (0.0, None)


# -- the report ----------------------------------------------------------------------------


def completed(fault: str, verdict: str, reason: str = "r<&>") -> DrillCompleted:
    return DrillCompleted(
        header=Header(f"spec/x/drill/{fault}", "spec/x", 0, 1, "cli/me"), spec_digest=DIGEST,
        principal="me", fault=fault, verdict=verdict, drill_run_id="" if verdict == SKIP
        else "tiny-drill-1", rpo_s=None if verdict == SKIP else 1.5, rto_s=None,
        reason=reason, checks=TERMINAL)


def test_the_matrix_shows_each_fault_with_rpo_rto_and_reason_and_skips_do_not_fail() -> None:
    results = [completed("kill_compute", PASS), completed("topology_change", SKIP, "fixed")]
    text = "\n".join(drillview.lines(results))
    assert "kill_compute" in text and "PASS" in text and "1.50" in text
    assert "topology_change  SKIP" in text and "-: fixed" in text
    assert drillview.verdict(results) == PASS
    assert drillview.verdict([*results, completed("hang", FAIL)]) == FAIL
    doc = drillview.document(DIGEST, results)
    assert [f["fault"] for f in doc["faults"]] == ["kill_compute", "topology_change"]
    assert doc["faults"][0]["checks"][0]["check"] == "terminal.workers"


def test_the_html_report_is_one_escaped_page() -> None:
    page = drillview.page(DIGEST, "tiny<b>", [completed("hang", FAIL)])
    assert page.startswith("<!doctype html>") and "<script" not in page
    assert "tiny&lt;b&gt;" in page and "r&lt;&amp;&gt;" in page and "r<&>" not in page


def test_the_missing_object_overlay_is_a_new_manifest_and_leaves_the_dataset_alone(
        tmp_path: Path) -> None:
    from dataplane.catalog import Catalog, build_manifest
    from dataplane.synth import template, write_corpus
    from runledger.rehearse.drillrun import hidden_overlay

    corpus = tmp_path / "corpus"
    write_corpus(str(corpus), seed=1)
    catalog = Catalog(str(tmp_path / "catalog"))
    original = catalog.put(build_manifest(template(str(corpus), seed=1), str(corpus)))
    files = sorted(p.name for p in corpus.rglob("*"))
    overlay = hidden_overlay(catalog, original)
    assert overlay != original
    assert sorted(p.name for p in corpus.rglob("*")) == files  # nothing moved or removed
    before, after = catalog.get(original), catalog.get(overlay)
    for old, new in zip(before.sources, after.sources, strict=True):
        assert new.objects[0].path == old.objects[0].path + ".drill-missing"
        assert not Path(after.url(new.objects[0])).exists()
        assert new.objects[1:] == old.objects[1:]


def test_terminal_rows_are_prefixed_and_a_live_worker_fails_them() -> None:
    from runledger.rehearse.drillrun import terminal_rows

    rows = terminal_rows([], [], [], "tiny-1", 0, [4242])
    assert [r.check for r in rows] == ["terminal", "terminal.processes"]
    assert rows[-1].verdict == FAIL and "4242" in rows[-1].reason
    assert terminal_rows([], [], [], "tiny-1", 0, [])[-1].verdict == PASS
