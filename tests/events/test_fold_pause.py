"""Pause and resume in the run fold: a pause revokes the generation and holds the run."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from events.fold import ILLEGAL_TRANSITION, RUN_NOT_ACTIVE, apply
from events.state import Status
from tests.events.builders import Ev
from tests.events.test_fold import rejected, run_from, running


def test_a_pause_revokes_the_generation_and_a_resume_only_follows_a_pause() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.paused(1)])
    assert (s.status, s.paused) == (Status.QUEUED, True)
    assert s.queue_reason.startswith("paused by alert non_finite_loss: loss nan")
    assert "`runledger resume r1`" in s.queue_reason
    for zombie in (ev.step(1, 11), ev.heartbeat(1), ev.committed(1, 11)):
        rejected(s, zombie, RUN_NOT_ACTIVE)
    rejected(s, ev.paused(1), ILLEGAL_TRANSITION)  # not active any more
    resumed = run_from(s, [ev.resumed(1)])
    assert (resumed.status, resumed.paused) == (Status.QUEUED, False)
    assert resumed.queue_reason == "resumed by bob: fixed"
    assert resumed.checkpoint == s.checkpoint  # it goes on from what it had committed
    rejected(resumed, ev.resumed(1), ILLEGAL_TRANSITION)
    rejected(running(ev), ev.resumed(1), ILLEGAL_TRANSITION)
    rejected(s, ev.resume_requested(1), ILLEGAL_TRANSITION)  # a request: no fold rule


@given(st.lists(st.sampled_from(["pause", "resume"]), max_size=8))
def test_paused_is_set_by_an_accepted_pause_and_cleared_only_by_a_resume(
        seq: list[str]) -> None:
    ev = Ev()
    s = running(ev)
    expected = False
    for what in seq:
        event = ev.paused(1) if what == "pause" else ev.resumed(1)
        t = apply(s, event)
        legal = (not expected and s.status.active) if what == "pause" else expected
        assert t.verdict.accepted == legal
        if legal:
            expected = what == "pause"
        assert t.state is not None
        s = t.state
        assert s.paused == expected
