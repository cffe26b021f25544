"""Reports leave the training loop through a queue; one background thread sends them.

The step path only enqueues: producing, delivery reports and heartbeats
(every interval, carrying the last step: to the beat file the agent forwards,
``events.beatfile``, or as a ``HeartbeatRecorded`` of its own) happen on the
reporter's thread, so a slow broker never stalls an optimizer step. ``flush``
is the one blocking call, used where the protocol needs its reports on the
log before it goes on (shards before a proposal, everything before exit). A
delivery failure is kept and raised by the next ``flush``, never dropped.

The thread heartbeats while a flush waits (``events.kafka.delivery.drain``), for as
long as librdkafka keeps trying to deliver (``FLUSH_TIMEOUT_S``): a slow
broker delays a flush, only a failed delivery fails it. ``close`` stops the
thread, so the session closes its reporter last: a rank tearing down is alive.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from events import beatfile
from events.beatfile import Beat
from events.kafka import runkeys
from events.kafka.clients import EventProducer
from events.kafka.delivery import FLUSH_TIMEOUT_S, drain, report_producer_config
from events.kafka.runkeys import RunKey
from events.model import Event, Header, HeartbeatRecorded, StepTimesRecorded
from events.workerenv import WorkerEnv
from worker.comm import device_name
from worker.errors import WorkerError

_STOP = object()


# How much longer the caller of a flush waits than the thread's drain: it always answers.
ANSWER_MARGIN_S = 10.0


class ReportError(WorkerError):
    """A report could not be delivered to the log."""


@dataclass(frozen=True, slots=True)
class _Flush:
    done: threading.Event
    timeout_s: float


class Reporter:
    def __init__(self, env: WorkerEnv, producer: EventProducer,
                 clock: Callable[[], float] = time.time, run_key: RunKey | None = None) -> None:
        self.env = env
        self.producer = producer
        # What every report is signed with (events.kafka.runkeys); None: sent unsigned.
        self.run_key = run_key
        self.clock = clock
        self.step = 0
        self.identity = f"worker/{env.run_id}/{env.logical_id}"
        self._queue: queue.Queue[object] = queue.Queue()
        self._failures: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="rl-reporter", daemon=True)
        self._beats = 0  # heartbeats taken, numbering each (a beat file's or a record's)
        # Heartbeat records given to the producer: a drain subtracts these from its queue,
        # and a beat written to the agent's beat file is none (counting it let a flush
        # return with a report still queued, lost when the process then exited).
        self._beat_records = 0
        self._next_beat = 0.0  # time.monotonic() of the next heartbeat; 0: at once
        # Set by close: the beats from then on say the process is on its way out.
        self.closing = False
        # What this rank steps on (worker.comm.device_name), carried by its step times.
        self.device: str | None = None

    @classmethod
    def connect(cls, env: WorkerEnv) -> Reporter:
        """A reporter with a producer of its own, as a worker session uses, signing with
        the run key its agent named (``RUNLEDGER_WORKER_KEY``), and naming the device
        this rank steps on in its step times."""
        reporter = cls(env, EventProducer(env.bootstrap, client_id=f"worker/{env.run_id}/"
                                          f"{env.logical_id}", config=report_producer_config()),
                       run_key=runkeys.from_environ(os.environ))
        reporter.device = device_name(env.local_rank)
        return reporter

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
                input_wait_ms=tuple(w for _, _, w in run), device=self.device))

    def report(self, event: Event) -> None:
        """Enqueue; never blocks."""
        self._queue.put(event)

    def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Wait until everything reported so far is on the log (heartbeats go on
        meanwhile); raise on a failed delivery, or if it took over ``timeout_s``."""
        done = threading.Event()
        self._queue.put(_Flush(done, timeout_s))
        if not done.wait(timeout_s + ANSWER_MARGIN_S):
            raise ReportError(f"the reporter thread did not answer a flush within"
                              f" {timeout_s + ANSWER_MARGIN_S}s: it is stuck in the producer;"
                              " the worker's reports may be lost, see its log")
        with self._lock:
            if self._failures:
                failures, self._failures = self._failures, []
                raise ReportError("report delivery failed: " + "; ".join(failures[:3]) +
                                  " (check the broker and the worker's network to it)")

    def close(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Flush, then stop the thread (and its heartbeats), even when the flush fails.

        A closing heartbeat goes out first (``HeartbeatRecorded.closing``): after the
        flush the process tears down silent, and the controller judges it by its exit."""
        self.closing = True
        self._next_beat = 0.0
        try:
            self.flush(timeout_s)
        finally:
            self._queue.put(_STOP)
            self._thread.join(ANSWER_MARGIN_S)

    def _undelivered(self, reason: str) -> None:
        with self._lock:
            self._failures.append(reason)

    def _run(self) -> None:
        while True:
            self._beat_if_due()
            wait = self._next_beat - time.monotonic()
            try:
                item = self._queue.get(timeout=max(0.0, min(0.05, wait)))
            except queue.Empty:
                self.producer.poll(0)
                continue
            if item is _STOP:
                return
            if isinstance(item, _Flush):
                self._drain(item)
                continue
            assert isinstance(item, Event)
            try:
                runkeys.send_report(self.producer, item, self.run_key, self._undelivered)
            except Exception as exc:  # an encode error must surface, not kill the thread
                with self._lock:
                    self._failures.append(f"{item.event_type}: {exc}")
            self.producer.poll(0)

    def _drain(self, flush: _Flush) -> None:
        beats = self._beat_records

        def sent_since() -> int:  # this thread's own beat records, sent while it waits
            self._beat_if_due()
            return self._beat_records - beats

        try:
            left = drain(self.producer, sent_since, flush.timeout_s)
            if left:
                self._undelivered(f"{left} reports still queued after {flush.timeout_s}s")
        except Exception as exc:  # a producer error is a delivery failure too
            self._undelivered(str(exc))
        flush.done.set()

    def _beat_if_due(self) -> None:
        now = time.monotonic()
        if now >= self._next_beat:
            self._beat()
            self._next_beat = now + self.env.heartbeat_interval_s

    def _beat(self) -> None:
        self._beats += 1
        env = self.env
        if env.beat_file is not None:  # the agent sends it with its node's others
            try:
                beatfile.write(env.beat_file, Beat(self._beats, self.step, self.closing))
            except OSError as exc:
                with self._lock:
                    self._failures.append(f"heartbeat: {env.beat_file}: {exc}")
            return
        event = HeartbeatRecorded(header=self.header(f"hb/{self._beats}"),
                                  logical_id=env.logical_id, node=env.node, step=self.step,
                                  closing=self.closing)
        try:
            runkeys.send_report(self.producer, event, self.run_key, self._undelivered)
        except Exception as exc:
            with self._lock:
                self._failures.append(f"heartbeat: {exc}")
            return
        self._beat_records += 1  # counted once sent (events.kafka.delivery.drain)
