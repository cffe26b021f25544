"""Reports leave the training loop through a queue; one background thread sends them.

The step path only enqueues: producing, delivery reports and heartbeats
(``HeartbeatRecorded`` every interval, carrying the last step) happen on the
reporter's thread, so a slow broker never stalls an optimizer step. ``flush``
is the one blocking call, used where the protocol needs its reports on the
log before it goes on (shards before a proposal, everything before exit). A
delivery failure is kept and raised by the next ``flush``, never dropped.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from events.kafka import EventProducer
from events.model import Event, Header, HeartbeatRecorded, StepTimesRecorded
from events.topics import REPORTS
from events.workerenv import WorkerEnv
from worker.errors import WorkerError

_STOP = object()


class ReportError(WorkerError):
    """A report could not be delivered to the log."""


class Reporter:
    def __init__(self, env: WorkerEnv, producer: EventProducer,
                 clock: Callable[[], float] = time.time) -> None:
        self.env = env
        self.producer = producer
        self.clock = clock
        self.step = 0
        self.identity = f"worker/{env.run_id}/{env.logical_id}"
        self._queue: queue.Queue[object] = queue.Queue()
        self._failures: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="rl-reporter", daemon=True)
        self._beats = 0

    def start(self) -> Reporter:
        self._thread.start()
        return self

    def header(self, key: str, causation_id: str | None = None) -> Header:
        """A header whose event id is deterministic: run, generation, writer, ``key``."""
        env = self.env
        return Header(event_id=f"{env.run_id}/g{env.generation}/{env.logical_id}/{key}",
                      run_id=env.run_id, generation=env.generation,
                      occurred_at=int(self.clock() * 1000), producer=self.identity,
                      causation_id=causation_id)

    def step_times(self, times: list[tuple[int, float, float]]) -> None:
        """This rank's ``(step, step ms, input wait ms)``, as one ``StepTimesRecorded``
        per run of consecutive steps (a restart can leave a gap). Never blocks."""
        while times:
            n = 1
            while n < len(times) and times[n][0] == times[0][0] + n:
                n += 1
            run, times = times[:n], times[n:]
            self.report(StepTimesRecorded(
                header=self.header(f"steptimes/{run[0][0]}"), logical_id=self.env.logical_id,
                node=self.env.node, first_step=run[0][0],
                step_time_ms=tuple(t for _, t, _ in run),
                input_wait_ms=tuple(w for _, _, w in run)))

    def report(self, event: Event) -> None:
        """Enqueue; never blocks."""
        self._queue.put(event)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until everything reported so far is on the log; raise on a failed delivery."""
        done = threading.Event()
        self._queue.put(done)
        if not done.wait(timeout_s):
            raise ReportError(f"reports were not delivered within {timeout_s}s")
        with self._lock:
            if self._failures:
                failures, self._failures = self._failures, []
                raise ReportError("report delivery failed: " + "; ".join(failures[:3]))

    def close(self, timeout_s: float = 30.0) -> None:
        self.flush(timeout_s)
        self._queue.put(_STOP)
        self._thread.join(timeout_s)

    def _undelivered(self, reason: str) -> None:
        with self._lock:
            self._failures.append(reason)

    def _run(self) -> None:
        interval = self.env.heartbeat_interval_s
        next_beat = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= next_beat:
                self._beat()
                next_beat = now + interval
            try:
                item = self._queue.get(timeout=max(0.0, min(0.05, next_beat - now)))
            except queue.Empty:
                self.producer.poll(0)
                continue
            if item is _STOP:
                return
            if isinstance(item, threading.Event):
                try:
                    self.producer.flush(25.0)
                except Exception as exc:  # a flush timeout is a delivery failure too
                    with self._lock:
                        self._failures.append(str(exc))
                item.set()
                continue
            assert isinstance(item, Event)
            try:
                self.producer.send(REPORTS, item, on_failure=self._undelivered)
            except Exception as exc:  # an encode error must surface, not kill the thread
                with self._lock:
                    self._failures.append(f"{item.event_type}: {exc}")
            self.producer.poll(0)

    def _beat(self) -> None:
        self._beats += 1
        env = self.env
        event = HeartbeatRecorded(header=self.header(f"hb/{self._beats}"),
                                  logical_id=env.logical_id, node=env.node, step=self.step)
        try:
            self.producer.send(REPORTS, event, on_failure=self._undelivered)
        except Exception as exc:
            with self._lock:
                self._failures.append(f"heartbeat: {exc}")
