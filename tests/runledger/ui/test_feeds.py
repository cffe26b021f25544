"""A feed keeps its last answer and says how old it is and what went wrong since."""

from __future__ import annotations

import threading

from runledger.errors import RunledgerError
from runledger.ui.feeds import Feed, Reading


def test_a_failed_read_keeps_the_last_answer_and_names_the_error() -> None:
    answers: list[object] = [{"a": 1}, RunledgerError("broker down"), {"a": 2}]
    now = [10.0]

    def read() -> object:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    feed = Feed("t", read, 1.0, clock=lambda: now[0])
    feed.once()
    now[0] = 15.0
    feed.once()
    r = feed.reading()
    assert r.value == {"a": 1} and r.read_at == 10.0
    assert r.error == "RunledgerError: broker down" and r.failed_at == 15.0
    assert r.health(15.0, 30.0)["state"] == "ok"  # still fresh enough to trust
    assert r.health(45.0, 30.0)["state"] == "unreachable"
    feed.once()
    r = feed.reading()
    assert r.value == {"a": 2} and r.error is None and r.tries == 3


def test_a_bug_in_a_read_is_not_swallowed() -> None:
    feed = Feed("t", lambda: 1 // 0, 1.0)
    try:
        feed.once()
    except ZeroDivisionError:
        return
    raise AssertionError("a ZeroDivisionError must propagate: it is no broker trouble")


def test_health_before_the_first_answer_says_starting() -> None:
    assert Reading().health(0.0, 30.0)["state"] == "starting"
    stale = Reading(value=1, read_at=0.0)
    assert stale.health(100.0, 30.0)["state"] == "behind"


def test_the_thread_reads_again_when_poked_and_stops_when_closed() -> None:
    reads = threading.Semaphore(0)
    feed = Feed("t", lambda: reads.release(), 3600.0).start()
    assert reads.acquire(timeout=30)  # the first read, at start
    feed.poke()
    assert reads.acquire(timeout=30)  # read again at once, not after an hour
    feed.close()
