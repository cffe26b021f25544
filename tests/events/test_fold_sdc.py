"""Silent data corruption in the run fold: the open suspicion refuses later checkpoints."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from events.fold import (
    CORRUPTION_SUSPECTED,
    ILLEGAL_TRANSITION,
    STALE_GENERATION,
    STEP_NOT_FORWARD,
    apply,
)
from events.model import Event, ManifestCommitted, ManifestProposed
from events.state import RunState, Suspicion
from tests.events.builders import Ev
from tests.events.test_fold import rejected, run_from, running


def test_a_suspicion_opens_refuses_later_checkpoints_and_a_verdict_closes_it() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.step(1, 11), ev.step(1, 12),
                               ev.suspected(1, 12, ranks=(1,), fingerprints=("aa", "bb"))])
    assert s.suspicion == Suspicion(step=12, generation=1, detector="agreement", ranks=(1,),
                                    fingerprints=("aa", "bb"), nodes=("node-a", "node-b"),
                                    part="params")
    for late in (ev.proposed(1, 12), ev.committed(1, 12), ev.proposed(1, 15),
                 ev.committed(1, 13)):
        t = rejected(s, late, CORRUPTION_SUSPECTED)
        assert "agreement at step 12 of generation 1 (ranks [1], part params)" in \
            t.verdict.detail
        assert "before step 12" in t.verdict.detail
    # A checkpoint before the suspect step still commits (the replay makes progress to it).
    early = run_from(s, [ev.committed(1, 11)])
    assert early.checkpoint is not None and early.checkpoint.step == 11
    # The replaying generation reports; the verdict closes the suspicion.
    s = run_from(s, [ev.failure(1, "restart"), ev.generation_started(2, resume_step=10),
                     ev.replayed(2, 12, 1)])
    assert s.suspicion is not None  # a replay alone changes nothing
    s = run_from(s, [ev.classified(2, 12, 1)])
    assert s.suspicion is None
    assert run_from(s, [ev.committed(2, 12)]).checkpoint is not None


def test_the_earliest_suspicion_is_the_one_held() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.suspected(1, 14)])
    later = run_from(s, [ev.suspected(1, 16, detector="spike")])
    assert later.suspicion == s.suspicion
    earlier = run_from(s, [ev.suspected(1, 12, detector="nonfinite", ranks=())])
    assert earlier.suspicion is not None
    assert (earlier.suspicion.step, earlier.suspicion.detector) == (12, "nonfinite")
    rejected(earlier, ev.committed(1, 12), CORRUPTION_SUSPECTED)
    # A verdict must name the open suspicion, by step and generation.
    rejected(earlier, ev.classified(1, 14, 1), ILLEGAL_TRANSITION)
    rejected(earlier, ev.classified(2, 12, 2), ILLEGAL_TRANSITION)
    rejected(running(ev), ev.classified(1, 12, 1), ILLEGAL_TRANSITION)
    assert run_from(earlier, [ev.classified(1, 12, 1)]).suspicion is None


def test_suspicions_and_replays_are_fenced() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.failure(1, "restart")])  # generation 1 is revoked
    rejected(s, ev.suspected(1, 12), STALE_GENERATION)
    s = run_from(s, [ev.generation_started(2, resume_step=10)])
    rejected(s, ev.suspected(1, 12), STALE_GENERATION)
    rejected(s, ev.replayed(1, 12, 1), STALE_GENERATION)
    assert run_from(s, [ev.suspected(2, 12)]).suspicion is not None


def test_a_generation_cannot_distrust_the_checkpoint_it_resumed_from_or_older_steps() -> None:
    ev = Ev()
    s = run_from(running(ev), [ev.step(1, 11), ev.step(1, 12), ev.committed(1, 12),
                               ev.failure(1, "restart"), ev.generation_started(2, resume_step=12)])
    for step in (0, 4, 12):  # would revoke history committed before generation 2 began
        t = rejected(s, ev.suspected(2, step), STEP_NOT_FORWARD)
        assert "resumed from the checkpoint at step 12" in t.verdict.detail
    assert run_from(s, [ev.suspected(2, 13)]).suspicion is not None


# --- whatever the interleaving, nothing commits at or after an open suspicion ---------

_KINDS = ("step", "committed", "proposed", "suspected", "classified", "restart", "replayed")


def _event(ev: Ev, kind: str, state: RunState, offset: int) -> Event:
    g, step = state.generation, state.step
    open_ = state.suspicion
    match kind:
        case "step":
            return ev.step(g, step + 1)
        case "committed":
            return ev.committed(g, step + offset)
        case "proposed":
            return ev.proposed(g, step + offset)
        case "suspected":
            return ev.suspected(g, max(1, step + offset - 2))
        case "classified":  # mostly the open one, sometimes a stale or unknown verdict
            at, gen = (open_.step, open_.generation) if open_ else (step, g)
            return ev.classified(g, at + (offset == 3), gen)
        case "restart":
            return ev.failure(g, "restart")
        case "replayed":
            return ev.replayed(g, open_.step if open_ else step, g - 1)
    return ev.generation_started(g + 1, resume_step=state.checkpoint.step
                                 if state.checkpoint else None)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from((*_KINDS, "gs")), st.integers(0, 3)), max_size=40))
def test_no_checkpoint_commits_at_or_after_an_open_suspicion(
        plan: list[tuple[str, int]]) -> None:
    ev = Ev()
    state = running(ev)
    for kind, offset in plan:
        event = _event(ev, kind, state, offset)
        t = apply(state, event)
        assert t.state is not None
        open_ = state.suspicion
        if isinstance(event, ManifestCommitted | ManifestProposed) and open_ is not None \
                and event.step >= open_.step:
            assert not t.verdict.accepted
            assert t.state is state
        if t.verdict.accepted and open_ is not None and t.state.suspicion is not None:
            # Only an earlier suspicion replaces the open one.
            assert t.state.suspicion.step <= open_.step
        if t.state.suspicion is None and open_ is not None:
            assert t.verdict.accepted and event.event_type == "CorruptionClassified"
        state = t.state
        # The committed checkpoint never sits at or after the open suspicion's step
        # unless it was committed before the suspicion opened.
        if isinstance(event, ManifestCommitted) and t.verdict.accepted \
                and state.suspicion is not None:
            assert event.step < state.suspicion.step
