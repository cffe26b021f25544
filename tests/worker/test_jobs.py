"""The worker's job loop (worker.jobs): order, failures raised once on the caller's thread,
the queue dropped behind a failure, every item released once, waiting, and shutdown."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from worker.jobs import JobLoop

Loop = Callable[..., JobLoop[str]]


@pytest.fixture
def loop() -> Iterator[Loop]:
    made: list[JobLoop[str]] = []

    def make(run: Callable[[str], None], **kw: Any) -> JobLoop[str]:
        made.append(JobLoop("rl-test", run, **kw))
        return made[-1]

    yield make
    for m in made:
        m.close()


def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_items_run_in_submission_order_on_the_named_thread(loop: Loop) -> None:
    ran: list[tuple[str, str]] = []
    jobs = loop(lambda item: ran.append((item, threading.current_thread().name)))
    for item in "abcde":
        jobs.submit(item)
    jobs.drain()
    assert ran == [(item, "rl-test") for item in "abcde"]
    assert jobs.pending == 0 and jobs.items() == []


def test_items_lists_the_running_one_first_then_the_queue(loop: Loop) -> None:
    gate = threading.Event()
    jobs = loop(lambda item: gate.wait(10))
    for item in ("a", "b", "c"):
        jobs.submit(item)
    _until(lambda: jobs.items() == ["a", "b", "c"] and jobs.pending == 3)
    gate.set()
    jobs.drain()
    assert jobs.items() == [] and jobs.pending == 0


def test_a_failure_is_raised_once_drops_the_queue_and_releases_every_item(
        loop: Loop) -> None:
    gate = threading.Event()
    boom = OSError("disk full")
    ran: list[str] = []
    released: list[str] = []

    def run(item: str) -> None:
        gate.wait(10)
        ran.append(item)
        if item == "bad":
            raise boom

    jobs = loop(run, release=released.append)
    for item in ("ok", "bad", "after-1", "after-2"):
        jobs.submit(item)
    gate.set()
    with pytest.raises(OSError) as info:
        jobs.drain()
    assert info.value is boom
    assert ran == ["ok", "bad"]  # the queue behind the failure never ran
    # Each item released once: the one that ran, those dropped, then the one that failed.
    assert released == ["ok", "after-1", "after-2", "bad"]
    jobs.check()  # raised once
    jobs.submit("later")  # and the loop goes on
    jobs.drain()
    assert ran == ["ok", "bad", "later"] and released[-1] == "later"


def test_wait_below_blocks_until_there_is_room_and_raises_a_failure(loop: Loop) -> None:
    gates = {item: threading.Event() for item in ("a", "b", "bad")}

    def run(item: str) -> None:
        gates[item].wait(10)
        if item == "bad":
            raise RuntimeError("boom")

    jobs = loop(run)
    jobs.submit("a")
    jobs.submit("b")
    waited = threading.Thread(target=jobs.wait_below, args=(2,))
    waited.start()
    time.sleep(0.2)
    assert waited.is_alive()  # two pending: no room below 2
    gates["a"].set()
    waited.join(10)
    assert not waited.is_alive() and jobs.pending <= 1
    gates["b"].set()
    jobs.drain()
    # A failure ends the wait (and is raised) though there is no more room than before.
    jobs.submit("bad")
    raised: list[BaseException] = []

    def wait() -> None:
        try:
            jobs.wait_below(1)
        except RuntimeError as exc:
            raised.append(exc)

    waited = threading.Thread(target=wait)
    waited.start()
    time.sleep(0.2)
    assert waited.is_alive()
    gates["bad"].set()
    waited.join(10)
    assert [str(e) for e in raised] == ["boom"]


def test_drain_gives_up_at_its_timeout_on_the_loops_clock(loop: Loop) -> None:
    gate = threading.Event()
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0  # every look at the clock is a second
        return now[0]

    jobs = loop(lambda item: gate.wait(10), clock=clock)
    jobs.submit("slow")
    started = time.monotonic()
    jobs.drain(timeout_s=3.0)
    assert jobs.pending == 1 and time.monotonic() - started < 5.0
    gate.set()
    jobs.drain()
    assert jobs.pending == 0


def test_close_runs_what_is_queued_then_joins_and_keeps_a_failure_for_check(
        loop: Loop) -> None:
    ran: list[str] = []

    def run(item: str) -> None:
        time.sleep(0.02)
        ran.append(item)
        if item == "bad":
            raise ValueError("late")

    jobs = loop(run)
    for item in ("a", "b", "bad"):
        jobs.submit(item)
    jobs.close()
    assert ran == ["a", "b", "bad"] and not jobs.thread.is_alive()
    with pytest.raises(ValueError, match="late"):
        jobs.check()


def test_on_start_runs_on_the_thread_before_any_item(loop: Loop) -> None:
    seen: list[str] = []
    jobs = loop(lambda item: seen.append(item),
                on_start=lambda: seen.append(f"start on {threading.current_thread().name}"))
    jobs.submit("a")
    jobs.drain()
    assert seen == ["start on rl-test", "a"]


def test_a_failed_start_hook_is_raised_and_the_loop_still_runs(loop: Loop) -> None:
    def start() -> None:
        raise PermissionError("no nice here")

    ran: list[str] = []
    jobs = loop(ran.append, on_start=start)
    jobs.submit("a")
    with pytest.raises(PermissionError, match="no nice here"):
        jobs.drain()
    jobs.drain()
    assert ran == ["a"]


class _Payload:
    """Something an item is, or holds, that must not outlive its run."""


def test_a_done_item_is_not_kept_alive_by_the_loop() -> None:
    released: list[int] = []
    jobs: JobLoop[_Payload] = JobLoop("rl-test", lambda item: None,
                                      release=lambda item: released.append(id(item)))
    try:
        payload = _Payload()
        ref = weakref.ref(payload)
        jobs.submit(payload)
        del payload
        # drain returns once the item is released and dropped: the thread, now waiting
        # for the next one, holds no reference to it.
        jobs.drain()
        gc.collect()
        assert ref() is None and len(released) == 1
    finally:
        jobs.close()
