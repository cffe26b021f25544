"""What the alert rules watch per run: bounded windows, reset by a new group, dropped at the end."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controller.watch import EMPTY, MAX_WINDOW, Watch, observe
from events.model import (
    EVENT_TYPES,
    Event,
    StepCommitted,
)
from tests.events.builders import Ev
from tests.events.strategies import event_of

WATCHED = {"StepCommitted", "StepTimesRecorded", "GenerationStarted", "CheckpointStaged",
           "ManifestCommitted", "CursorAdvanced", "FailureClassified", "AlertRaised",
           "RunFinished", "RunCancelled", "CheckpointReplicated", "CheckpointRevoked"}


EV = Ev("run-1", start=0, tick=1, ids="e{n}")  # event n at n ms


def step(n: int) -> StepCommitted:
    return EV.step(1, n, tokens=1, loss_tokens=1, step_time_ms=float(n), input_wait_ms=0.0,
                   loss=None, n=n)


@given(st.sampled_from(sorted(set(EVENT_TYPES) - WATCHED)).flatmap(
    lambda name: event_of(EVENT_TYPES[name])))
def test_records_no_rule_looks_at_leave_the_watch_as_it_was(event: Event) -> None:
    # controller.model skips observe for heartbeats on this ground.
    watch = observe(observe(EMPTY, step(1), None), step(2), None)
    assert observe(watch, event, None) is watch


@given(st.integers(1, 3 * MAX_WINDOW), st.integers(1, 40))
def test_windows_keep_the_newest_max_window_samples(steps: int, batch: int) -> None:
    watch = EMPTY
    for n in range(1, steps + 1):
        watch = observe(watch, step(n), None)
    assert [s.step for s in watch.steps] == list(range(1, steps + 1))[-MAX_WINDOW:]
    reported: list[float] = []
    for n in range(0, steps, batch):
        times = tuple(float(n + k) for k in range(batch))
        reported += times
        watch = observe(watch, EV.step_times(1, n, "r0", times=times, node="n",
                                             input_wait_ms=(0.0,) * batch, n=n), None)
    assert list(watch.ranks["r0"].times) == reported[-MAX_WINDOW:]


def test_a_new_generation_forgets_the_old_group_and_the_end_keeps_only_counts() -> None:
    failed = EV.failure(1, failure_class="hang", signature="hang:x", detail="d",
                        logical_id=None, node=None, n=3)
    times = EV.step_times(1, 1, "r0", times=(1.0,), node="n", input_wait_ms=(0.0,), n=4)
    watch = observe(observe(observe(EMPTY, step(1), None), failed, None), times, None)
    restarted = observe(watch, EV.generation_started(1, members=(), reason="restart", n=5),
                        None)
    assert (restarted.steps, restarted.ranks, restarted.failures) == ((), {}, watch.failures)
    ended = observe(watch, EV.cancelled(1, principal="p", reason="r", n=6), None)
    assert ended == Watch(failures=watch.failures, raised=watch.raised, ended_by="e6")
