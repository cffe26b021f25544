"""A stand-in for ``events.kafka.clients.EventProducer`` whose log is as slow as a test needs:
it records every send and delivers (or fails) only when told, so a test of a slow
flush waits on events, never on a clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from events.model import Event, HeartbeatRecorded


class SlowBroker:
    """An ``EventProducer`` stand-in: records every send, and delivers only when told."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[Event] = []
        self.queue: list[Callable[[str], None] | None] = []
        self.deliver = threading.Event()
        self.failing = ""  # non-empty: every queued record fails with this reason

    def send(self, topic: str, event: Event,
             on_failure: Callable[[str], None] | None = None) -> None:
        with self.lock:
            self.sent.append(event)
            self.queue.append(on_failure)

    def poll(self, timeout_s: float = 0.0) -> int:
        time.sleep(min(timeout_s, 0.01))
        with self.lock:
            done, self.queue = (self.queue, []) if self.deliver.is_set() or self.failing \
                else ([], self.queue)
        for on_failure in done:
            if self.failing and on_failure is not None:
                on_failure(self.failing)
        return len(done)

    def pending(self) -> int:
        with self.lock:
            return len(self.queue)

    def beats(self) -> int:
        with self.lock:
            return sum(isinstance(e, HeartbeatRecorded) for e in self.sent)

    def wait_beats(self, n: int, timeout_s: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.beats() < n:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True
