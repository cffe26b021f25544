"""events/kafka/delivery.py: a drain waits for the records sent before it, not for the heartbeats
sent meanwhile, and says how many it left at its bound."""

from __future__ import annotations

from typing import Any, cast

from events.kafka.clients import EventProducer
from events.kafka.delivery import FLUSH_TIMEOUT_S, REPORT_DELIVERY_S, drain, report_producer_config


class SlowQueue:
    """A producer whose queue completes one record per ``deliver_every`` polls, in order."""

    def __init__(self, before: int, deliver_every: int = 1) -> None:
        self.queue = [f"report/{i}" for i in range(before)]
        self.deliver_every = deliver_every
        self.polls = 0

    def poll(self, timeout_s: float = 0.0) -> int:
        self.polls += 1
        if self.queue and self.polls % self.deliver_every == 0:
            self.queue.pop(0)
        return 0

    def pending(self) -> int:
        return len(self.queue)

    def send_beat(self) -> None:
        self.queue.append(f"hb/{self.polls}")


def producer(q: SlowQueue) -> EventProducer:
    return cast(EventProducer, q)


def test_a_drain_ends_when_the_earlier_reports_are_done_though_beats_keep_the_queue_busy() -> None:
    q = SlowQueue(before=5, deliver_every=2)  # slower than the heartbeats: never empty
    beats = 0

    def beat() -> int:
        nonlocal beats
        q.send_beat()  # a beat every turn, sent before it is counted
        beats += 1
        return beats

    assert drain(producer(q), beat, timeout_s=60.0) == 0
    assert q.queue and all(r.startswith("hb/") for r in q.queue)  # only the beats are left
    assert beats >= 5  # it went on beating while it waited


def test_a_drain_that_reaches_its_bound_says_how_many_earlier_reports_are_left() -> None:
    q = SlowQueue(before=3, deliver_every=10**9)  # nothing is ever delivered
    assert drain(producer(q), lambda: 0, timeout_s=0.2) == 3
    empty = SlowQueue(before=0)
    assert drain(producer(empty), lambda: 0, timeout_s=0.0) == 0


def test_the_flush_bound_outlasts_librdkafkas_own_delivery_timeout() -> None:
    config: dict[str, Any] = report_producer_config()
    assert config == {"message.timeout.ms": int(REPORT_DELIVERY_S * 1000)}
    assert FLUSH_TIMEOUT_S > REPORT_DELIVERY_S >= 60.0  # a failover is not a failure
