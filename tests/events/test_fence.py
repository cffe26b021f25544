"""events/fence.py: the fold's answer for a follower without the run's state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from events.fence import fenced_by
from events.fold import RUN_NOT_ACTIVE, RUN_TERMINAL, STALE_GENERATION, Verdict, apply
from events.model import EVENT_TYPES, Event
from tests.events.builders import Ev
from tests.events.sample_events import one_of_each
from tests.events.test_fold import running

# --- fenced_by: the fold's answer for a follower without the run's state ----------------

# Facts that take a generation's right to publish away, and the fold's reason for it
# (GenerationStarted only when newer; FailureClassified by its action, tested apart).
FENCING = {"GenerationStarted": STALE_GENERATION, "RunQueued": RUN_NOT_ACTIVE,
           "RunCancelled": RUN_TERMINAL, "RunFinished": RUN_TERMINAL}


@pytest.mark.parametrize("generation", [0, 1, 2, 5])
def test_fenced_by_every_event_type(generation: int) -> None:
    samples = {e.event_type: e for e in one_of_each("r1")}
    assert set(samples) == set(EVENT_TYPES)
    for name, sample in samples.items():
        if name == "FailureClassified":
            continue  # by its action: the next tests
        for written in (0, 1, 2, 5):
            e = replace(sample, header=replace(sample.header, generation=written))
            fences = name in FENCING and (name != "GenerationStarted" or written > generation)
            verdict = fenced_by(e, generation)
            assert verdict.accepted == (not fences), f"{name} of g{written}: {verdict}"
            if fences:
                assert verdict.reason == FENCING[name] and verdict.detail, str(verdict)
            else:
                assert verdict == Verdict(True), f"{name}: {verdict}"


def test_a_generation_is_fenced_only_by_a_newer_one() -> None:
    ev = Ev()
    assert fenced_by(ev.generation_started(1), 1).accepted  # its own start
    assert fenced_by(ev.generation_started(1), 2).accepted  # an older one's
    newer = fenced_by(ev.generation_started(3, resume_step=10), 2)
    assert (newer.accepted, newer.reason) == (False, STALE_GENERATION)
    assert "generation 3" in newer.detail


@pytest.mark.parametrize(("action", "reason"), [
    ("restart", STALE_GENERATION), ("requeue", RUN_NOT_ACTIVE),
    ("quarantine_node", ""), ("escalate", "")])
def test_a_failure_decision_fences_by_its_action(action: str, reason: str) -> None:
    ev = Ev()
    for failed, watched, counts in ((2, 2, True), (3, 2, True), (1, 2, False)):
        verdict = fenced_by(ev.failure(failed, action), watched)
        fences = bool(reason) and counts  # an older generation's failure is no news
        assert verdict.accepted == (not fences), f"{action} of g{failed} on g{watched}"
        assert verdict.reason == (reason if fences else ""), str(verdict)


def test_the_end_of_a_run_fences_every_generation() -> None:
    ev = Ev()
    for fact in (ev.cancelled(0), ev.finished(2, "succeeded"), ev.finished(0, "failed")):
        for generation in (1, 2, 3):
            verdict = fenced_by(fact, generation)
            assert (verdict.accepted, verdict.reason) == (False, RUN_TERMINAL)
    assert "succeeded" in fenced_by(ev.finished(2, "succeeded"), 2).detail
    queued = fenced_by(ev.queued(reason="placement lost"), 4)
    assert (queued.accepted, queued.reason) == (False, RUN_NOT_ACTIVE)
    assert "placement lost" in queued.detail


@pytest.mark.parametrize("fact", [
    "gs2", "restart", "requeue", "quarantine_node", "escalate", "cancelled", "succeeded",
    "failed", "cancel_requested", "heartbeat", "step", "committed", "interval", "alert",
    "rejected", "exited", "cursor"])
def test_fenced_by_is_the_verdict_the_fold_gives_the_generations_reports(fact: str) -> None:
    ev = Ev()
    s = running(ev)  # generation 1 is live, with a checkpoint at step 10
    build: dict[str, Callable[[], Event]] = {
        "gs2": lambda: ev.generation_started(2, resume_step=10),
        "restart": lambda: ev.failure(1, "restart"),
        "requeue": lambda: ev.failure(1, "requeue"),
        "quarantine_node": lambda: ev.failure(1, "quarantine_node"),
        "escalate": lambda: ev.failure(1, "escalate"),
        "cancelled": lambda: ev.cancelled(1),
        "succeeded": lambda: ev.finished(1, "succeeded"),
        "failed": lambda: ev.finished(1, "failed"),
        "cancel_requested": lambda: ev.cancel_requested(),
        "heartbeat": lambda: ev.heartbeat(1, "w0", 10),
        "step": lambda: ev.step(1, 11),
        "committed": lambda: ev.committed(1, 11),
        "interval": lambda: ev.interval(1, 5),
        "alert": lambda: ev.alert(1),
        "rejected": lambda: ev.rejected(1),
        "exited": lambda: ev.exited(1),
        "cursor": lambda: ev.cursor(1, 10),
    }
    e = build[fact]()
    t = apply(s, e)
    assert t.verdict.accepted, f"{fact} must be an accepted fact: {t.verdict}"
    assert t.state is not None
    probe = apply(t.state, ev.staged(1, 11)).verdict  # a report of generation 1
    verdict = fenced_by(e, 1)
    assert (verdict.accepted, verdict.reason) == (probe.accepted, probe.reason), (
        f"{fact}: fenced_by says {verdict}, the fold says {probe}")
    # Before the fact the probe is accepted: a refusal after it is the fence's alone.
    assert apply(s, ev.staged(1, 11)).verdict.accepted


def test_after_a_restart_decision_the_last_fence_is_the_one_that_counts() -> None:
    ev = Ev()
    s = running(ev)
    watched = s.generation
    last = Verdict(True)
    # A restart is decided, its placement is lost (back to the queue), the run is
    # admitted again and a new generation starts: the fold's reason changes on the way.
    for e in (ev.failure(1, "restart"), ev.queued(reason="placement lost"), ev.admitted(),
              ev.generation_started(2, resume_step=10)):
        t = apply(s, e)
        assert t.verdict.accepted and t.state is not None, f"{e.event_type}: {t.verdict}"
        s = t.state
        fence = fenced_by(e, watched)
        last = fence if not fence.accepted else last
        probe = apply(s, ev.staged(watched, 11)).verdict
        assert (probe.accepted, probe.reason) == (last.accepted, last.reason), e.event_type
    assert last.reason == STALE_GENERATION
