"""The post-run manifest's builder (events.runmanifest): pure, deterministic, and its
token counts are goodput's (queries/goodput.sql), restated here over the steps."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import runmanifest
from events.model import Event, GenerationStarted, StepCommitted
from tests.events.builders import Ev

SPEC = json.dumps({"code_version": "git:abc123", "budget": {"price_per_gpu_hour": 2.5}})


def _goodput(events: list[Event]) -> tuple[int, int]:
    """(accepted, discarded) loss tokens as goodput.sql counts them: a step is lost
    when a later generation resumed from before it (from its resume_step, or from
    before its first step when its restore fell back further)."""
    first: dict[int, int] = {}
    for e in events:
        if isinstance(e, StepCommitted):
            first.setdefault(e.generation, e.step)
    resumes = {e.generation: min(e.resume_step or 0, first.get(e.generation, 1 << 62) - 1)
               for e in events if isinstance(e, GenerationStarted)}
    accepted = discarded = 0
    for e in events:
        if isinstance(e, StepCommitted):
            lost = any(g > e.generation and r < e.step for g, r in resumes.items())
            if lost:
                discarded += e.loss_tokens
            else:
                accepted += e.loss_tokens
    return accepted, discarded


def _restarted_run() -> tuple[Ev, list[Event]]:
    """Generation 1 trains steps 1-10 and commits step 5 after step 7 (async); it fails,
    generation 2 resumes from 5, trains 6-12, commits 10 and the run succeeds."""
    ev = Ev()
    log: list[Event] = [ev.submitted(spec_json=SPEC), ev.admitted(), ev.generation_started(1),
                        ev.confirmed(1)]
    for s in range(1, 11):
        log.append(ev.step(1, s, tokens=100 * s, loss_tokens=10 * s))
        if s == 5:
            log.append(ev.staged(1, 5))
        if s == 7:
            log += [ev.committed(1, 5), ev.cursor(1, 5)]
    log += [ev.failure(1, "restart"), ev.generation_started(2, resume_step=5), ev.confirmed(2)]
    for s in range(6, 13):
        log.append(ev.step(2, s, tokens=1000 * s, loss_tokens=1))
        if s == 10:
            log += [ev.staged(2, 10), ev.committed(2, 10), ev.cursor(2, 10)]
    log.append(ev.finished(2, "succeeded", "all steps done"))
    return ev, log


def test_a_restarted_run_keeps_its_lineage_and_discards_the_redone_steps() -> None:
    _, log = _restarted_run()
    doc = runmanifest.build(log)
    assert doc is not None
    assert (doc["status"], doc["reason"]) == ("Succeeded", "all steps done")
    # steps 1-5 of generation 1 and 6-12 of generation 2; 6-10 of generation 1 were redone
    assert doc["tokens"] == {
        "accepted_steps": 12, "accepted_tokens": 1500 + 63_000,
        "accepted_loss_tokens": 150 + 7, "discarded_tokens": 4000,
        "discarded_loss_tokens": 400}
    assert (doc["tokens"]["accepted_loss_tokens"], doc["tokens"]["discarded_loss_tokens"]) \
        == _goodput(log)
    assert doc["model"] == {"step": 10, "manifest_path": "ckpt/g2/s10/manifest.json",
                            "manifest_digest": "sha256:g2s10", "generation": 2}
    assert [c["step"] for c in doc["retained_checkpoints"]] == [5, 10]
    prov = doc["provenance"]
    assert (prov["dataset_id"], prov["code_version"], prov["cursor_step"], prov["position"]) \
        == ("ds-1", "git:abc123", 10, 640)
    assert prov["source_counts"] == {"code": 240, "web": 400}
    assert [(i["generation"], i["action"]) for i in doc["incidents"]] == [(1, "restart")]


def test_a_restore_that_fell_back_discards_the_steps_after_the_restored_one() -> None:
    """Generation 2 is told to resume from step 10, but step 10 fails verification and
    it restores step 5: generation 1's steps 6-10 are redone, not accepted twice."""
    ev = Ev()
    log: list[Event] = [ev.submitted(spec_json=SPEC), ev.admitted(), ev.generation_started(1),
                        ev.confirmed(1)]
    for s in range(1, 13):
        log.append(ev.step(1, s, tokens=10, loss_tokens=1))
        if s in (5, 10):
            log += [ev.staged(1, s), ev.committed(1, s)]
    # the controller revokes step 10 on the restore's verification failure (its
    # CheckpointRestored of step 5 stays a report: not among the facts)
    log += [ev.failure(1, "restart"), ev.generation_started(2, resume_step=10),
            ev.revoked(2, 10, committed_gen=1), ev.confirmed(2)]
    for s in range(6, 15):
        log.append(ev.step(2, s, tokens=10, loss_tokens=100))
    log.append(ev.finished(2))
    doc = runmanifest.build(log)
    assert doc is not None
    assert doc["tokens"] == {
        "accepted_steps": 5 + 9, "accepted_tokens": 140, "accepted_loss_tokens": 5 + 900,
        "discarded_tokens": 70, "discarded_loss_tokens": 7}
    assert _goodput(log) == (905, 7)


@pytest.mark.parametrize("checkpoint,steps", [
    ({}, [8, 10, 12]),  # the default keep_last 3
    ({"keep_last": 2}, [10, 12]),
    ({"keep_last": 1, "keep_every": 4}, [4, 8, 12]),
    ({"keep_last": 1, "keep_every": 8}, [8, 12]),
    ({"keep_last": 4, "tiers": [{"name": "a", "root": "/a", "protects": ["host"],
                                 "keep_last": 1}]}, [12]),  # the first tier's own
])
def test_retained_checkpoints_are_those_the_retention_keeps(
        checkpoint: dict[str, object], steps: list[int]) -> None:
    ev = Ev()
    log: list[Event] = [ev.submitted(spec_json=json.dumps({"checkpoint": checkpoint})),
                        ev.admitted(), ev.generation_started(1), ev.confirmed(1)]
    for s in range(1, 13):
        log.append(ev.step(1, s))
        if s % 2 == 0:
            log += [ev.staged(1, s), ev.committed(1, s)]
    log.append(ev.finished(1))
    doc = runmanifest.build(log)
    assert doc is not None
    assert [c["step"] for c in doc["retained_checkpoints"]] == steps
    assert doc["model"]["step"] == 12


def test_cost_is_price_times_world_size_times_the_allocated_hours() -> None:
    _, log = _restarted_run()
    doc = runmanifest.build(log)
    assert doc is not None and doc["cost"] is not None
    hours = 2 * (doc["ended_at"] - doc["admitted_at"]) / 3_600_000
    assert doc["cost"]["gpu_hours"] == round(hours, 6)
    assert doc["cost"]["total"] == round(2.5 * round(hours, 6), 6)
    ev = Ev()
    unpriced = runmanifest.build([ev.submitted(), ev.admitted(), ev.cancelled()])
    assert unpriced is not None and unpriced["cost"] is None
    assert unpriced["model"] is None and unpriced["status"] == "Cancelled"


def test_the_encoding_is_canonical_and_the_digest_its_sha256() -> None:
    _, log = _restarted_run()
    doc = runmanifest.build(log)
    assert doc is not None
    again = runmanifest.build(list(log))
    assert again is not None
    data = runmanifest.encode(doc)
    assert data == runmanifest.encode(json.loads(data)) == runmanifest.encode(again)
    assert b" " not in data.replace(b"all steps done", b"")
    assert runmanifest.digest(doc).startswith("sha256:") and len(runmanifest.digest(doc)) == 71
    changed = {**doc, "reason": "other"}
    assert runmanifest.digest(changed) != runmanifest.digest(doc)


def test_refused_facts_count_for_nothing() -> None:
    ev, log = _restarted_run()
    stale = ev.step(1, 13, loss_tokens=10**6)  # generation 1 was replaced
    doc = runmanifest.build([*log[:-1], stale, log[-1]])
    assert doc == runmanifest.build(log)
    assert runmanifest.build([ev.step(1, 1)]) is None  # no RunSubmitted


def test_rejections_and_alerts_after_the_end_change_nothing() -> None:
    """The document is published right after the end: the facts after it (a late
    report's rejection, a rejection window closed later, an alert) are not in it."""
    ev, log = _restarted_run()
    during = [ev.rejected(1, repeats=2), ev.alert(2)]
    doc = runmanifest.build([*log[:-1], *during, log[-1]])
    assert doc is not None and (doc["rejections"], doc["alerts_raised"]) == (3, 1)
    after = [ev.manifest_published(2), ev.rejected(2, reason="run_terminal"),
             ev.rejected(1, repeats=5), ev.alert(2, alert="late")]
    assert runmanifest.build([*log[:-1], *during, log[-1], *after]) == doc
    # a run that has not ended shows its counts so far
    going = runmanifest.build([*log[:-1], *during, ev.rejected(2)])
    assert going is not None and going["rejections"] == 4


def test_the_file_goes_under_the_first_checkpoint_root() -> None:
    assert runmanifest.path_for("s3://b/ckpt/", "r1") == "s3://b/ckpt/r1/run-manifest.json"
    assert runmanifest.path_for(None, "r1") == ""


@st.composite
def restarted_logs(draw: st.DrawFn) -> list[Event]:
    """Generations that train, checkpoint (committed at once or some steps later) and
    fail, each resuming from the latest committed step; then the run ends."""
    ev = Ev()
    log: list[Event] = [ev.submitted(), ev.admitted()]
    latest: int | None = None
    step = 0
    committed: list[int] = []
    gens: dict[int, int] = {}  # the generation that committed each step
    for gen in range(1, draw(st.integers(1, 4)) + 1):
        log += [ev.generation_started(gen, resume_step=latest), ev.confirmed(gen)]
        step = latest or 0
        if len(committed) > 1 and draw(st.booleans()):
            # the latest fails verification: the restore falls back to an older one
            step = draw(st.sampled_from(committed[:-1]))
            for gone in committed[committed.index(step) + 1:]:
                log.append(ev.revoked(gen, gone, committed_gen=gens[gone]))
            latest = step
            committed = committed[:committed.index(step) + 1]
        pending: list[int] = []
        for _ in range(draw(st.integers(0, 12))):
            step += 1
            log.append(ev.step(gen, step, tokens=draw(st.integers(0, 50)),
                               loss_tokens=draw(st.integers(0, 50))))
            if draw(st.booleans()) and (latest is None or step > latest) and not pending:
                log.append(ev.staged(gen, step))
                pending.append(step)
            if pending and draw(st.booleans()):  # the commit lands now or after later steps
                latest = pending.pop()
                committed.append(latest)
                gens[latest] = gen
                log.append(ev.committed(gen, latest))
        log.append(ev.failure(gen, "restart"))
    log.append(ev.finished(0, "failed", "gave up"))
    return log


@settings(max_examples=150, deadline=None)
@given(restarted_logs())
def test_token_counts_are_goodputs_whatever_the_restarts(log: list[Event]) -> None:
    doc = runmanifest.build(log)
    assert doc is not None
    tokens = doc["tokens"]
    assert (tokens["accepted_loss_tokens"], tokens["discarded_loss_tokens"]) == _goodput(log)
    assert doc["status"] == "Failed"
    assert len(doc["incidents"]) == sum(1 for e in log if type(e).__name__ == "FailureClassified")


@pytest.mark.parametrize("price", ["2.5", True, None, 1.7e308])
def test_a_price_that_is_no_finite_number_gives_no_cost(price: object) -> None:
    ev = Ev()
    spec = json.dumps({"budget": {"price_per_gpu_hour": price}})
    admitted = ev.admitted()
    end = ev.cancelled(at=admitted.header.occurred_at + 10 * 3_600_000)
    doc = runmanifest.build([ev.submitted(spec_json=spec), admitted, end])
    assert doc is not None and doc["cost"] is None
    runmanifest.encode(doc)  # canonical JSON holds it


@settings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=20), st.integers(1, 5),
       st.none() | st.integers(1, 6))
def test_retained_is_what_the_workers_collection_keeps(
        revokes: list[bool], keep_last: int, keep_every: int | None) -> None:
    """Commits at steps 1..n (some revoked right away): the manifest lists exactly the
    committed checkpoints worker.gc.plan never removes."""
    from worker.gc import Retention, history, plan

    ev = Ev()
    spec = {"checkpoint": {"keep_last": keep_last, "keep_every": keep_every}}
    log: list[Event] = [ev.submitted(spec_json=json.dumps(spec)), ev.admitted(),
                        ev.generation_started(1), ev.confirmed(1)]
    for s, revoke in enumerate(revokes, start=1):
        log += [ev.step(1, s), ev.staged(1, s), ev.committed(1, s)]
        if revoke:
            log.append(ev.revoked(1, s))
    log.append(ev.finished(1))
    doc = runmanifest.build(log)
    assert doc is not None
    hist = history(log)
    doomed = plan(hist.committed, hist, Retention(keep_last, keep_every, limit=1000))
    kept = [step for gen, step in hist.committed if (gen, step) not in doomed]
    assert [c["step"] for c in doc["retained_checkpoints"]] == kept
