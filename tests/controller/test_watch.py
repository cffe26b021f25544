"""What the alert rules watch per run: bounded windows, reset by a new group, dropped at the end."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controller.watch import EMPTY, MAX_WINDOW, Watch, observe
from events.model import (
    EVENT_TYPES,
    Event,
    FailureClassified,
    GenerationStarted,
    Header,
    RunCancelled,
    StepCommitted,
    StepTimesRecorded,
)
from tests.events.strategies import event_of

WATCHED = {"StepCommitted", "StepTimesRecorded", "GenerationStarted", "CheckpointStaged",
           "ManifestCommitted", "CursorAdvanced", "FailureClassified", "AlertRaised",
           "RunFinished", "RunCancelled"}


def hdr(n: int) -> Header:
    return Header(f"e{n}", "run-1", 1, n, "test")


def step(n: int) -> StepCommitted:
    return StepCommitted(header=hdr(n), step=n, tokens=1, loss_tokens=1, step_time_ms=float(n),
                         input_wait_ms=0.0)


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
        watch = observe(watch, StepTimesRecorded(
            header=hdr(n), logical_id="r0", node="n", first_step=n, step_time_ms=times,
            input_wait_ms=(0.0,) * batch), None)
    assert list(watch.ranks["r0"].times) == reported[-MAX_WINDOW:]


def test_a_new_generation_forgets_the_old_group_and_the_end_keeps_only_counts() -> None:
    failed = FailureClassified(header=hdr(3), failure_class="hang", signature="hang:x",
                               action="restart", attempt=1, detail="d")
    watch = observe(observe(observe(EMPTY, step(1), None), failed, None), StepTimesRecorded(
        header=hdr(4), logical_id="r0", node="n", first_step=1, step_time_ms=(1.0,),
        input_wait_ms=(0.0,)), None)
    restarted = observe(watch, GenerationStarted(header=hdr(5), members=(), reason="restart"),
                        None)
    assert (restarted.steps, restarted.ranks, restarted.failures) == ((), {}, watch.failures)
    ended = observe(watch, RunCancelled(header=hdr(6), principal="p", reason="r"), None)
    assert ended == Watch(failures=watch.failures, raised=watch.raised, ended_by="e6")
