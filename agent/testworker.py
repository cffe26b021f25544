"""A stand-in training worker (no torch) with deterministic failures, for tests.

``python -m agent.testworker [--steps N] [--step-time S] [--fail-mode M] [--exit-code N]
[--fail-at-step K] [--fail-generation G|any] [--fail-rank R|any]
[--slow-rank R --slow-ms MS] [--input-wait-ms MS] [--nan-from-step K]
[--step-times-every N]``

Reads its place from the environment (``events.workerenv``), sends
``HeartbeatRecorded`` every heartbeat interval from a background thread, and
runs steps ``resume_step + 1 .. N`` (``--steps`` is the run's last step, so a
resumed generation moves forward instead of starting over), each a
``time.sleep(step_time)``. Rank 0 reports ``StepCommitted`` after each step and
flushes it, so steps before a crash are in the log. Exit 0 after step N, once
its reports are on the log. A flush waits, heartbeating, for as long as
librdkafka tries to deliver (``events.kafka.delivery``: a slow broker is not a
failure); only a failed delivery fails it (exit 1, naming the reports).

Failure modes, applied when step K is about to run (steps before K commit):

======== =================================================================
crash    ``os._exit(13)``: no cleanup, like a segfaulting extension
kill     SIGKILL to itself: ended by a signal, as by the OOM killer (a node fault)
fail     raises, so Python exits with code 1 and a traceback in the log
exit     ``sys.exit(--exit-code)`` from the loop: Python's own orderly exit
hang     heartbeats stop and steps stop; the process sleeps until killed
stall    heartbeats go on, steps stop: alive but making no progress
corrupt  rank 0 reports ``CorruptionSuspected`` (rank 1 disagrees at step K;
         every rank on this node) and flushes it; every rank exits 87
======== =================================================================

A generation started with ``RUNLEDGER_SDC_REPLAY`` (``events.sdcenv``) has
rank 0 report ``StepReplayed`` when it reaches the replayed step: every rank
recomputed what rank 0 held, so a ``corrupt`` of one generation is transient.

``--fail-generation G`` fails only in generation G, so the restarted generation
succeeds; ``any`` (the default) fails every time. ``--fail-rank`` likewise
picks the rank that fails. On SIGTERM or SIGINT the worker flushes what it
has sent (at most 2 s) and exits with code 143 (128 + SIGTERM) for either
signal, promptly, in every mode. ``--ignore-sigterm`` makes it ignore SIGTERM
instead (a zombie that goes on reporting until SIGKILL, for fencing tests).
It writes nothing but its reports (and, for ``fail``, the traceback on stderr).

Observations for the alert rules (``controller.alerts``), all off by default:
``--slow-rank R --slow-ms MS`` makes rank R's steps MS longer (a straggler);
``--input-wait-ms MS`` makes every step wait MS for input first (reported as
``input_wait_ms``, inside ``step_time_ms``); ``--nan-from-step K`` reports a
NaN loss from step K on; ``--step-times-every N`` makes every rank report its
own ``StepTimesRecorded`` every N steps (and the rest before exiting).

Event ids are deterministic: ``<run>/g<gen>/<logical id>/hb/<n>``,
``<run>/g<gen>/<logical id>/step/<step>`` and ``.../steptimes/<first step>``;
producer ``worker/<run>/<logical id>``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

from events import beatfile
from events.kafka import runkeys
from events.kafka.clients import EventProducer
from events.kafka.delivery import drain, report_producer_config
from events.model import (
    CorruptionSuspected,
    Event,
    Header,
    HeartbeatRecorded,
    StepCommitted,
    StepReplayed,
    StepTimesRecorded,
)
from events.sdcenv import SdcReplay
from events.workerenv import WorkerEnv, WorkerEnvError

MODES = ("none", "crash", "kill", "hang", "fail", "exit", "stall", "corrupt")
CRASH_EXIT_CODE = 13
CORRUPTION_EXIT_CODE = 87  # controller.policy: silent_corruption
TERM_EXIT_CODE = 143
TOKENS_PER_STEP = 1024
LOSS_TOKENS_PER_STEP = 1000


class InjectedFailure(RuntimeError):
    """The ``fail`` mode's exception: an ordinary Python error in the training loop."""


class ReportsUndelivered(RuntimeError):
    """Reports that librdkafka could not deliver: the one way a flush fails."""


@dataclass(frozen=True, slots=True)
class Plan:
    steps: int
    step_time_s: float
    fail_mode: str
    fail_at_step: int
    fail_generation: int | None  # None: every generation
    fail_rank: int | None  # None: every rank
    ignore_sigterm: bool = False
    slow_rank: int | None = None
    slow_ms: float = 0.0
    input_wait_ms: float = 0.0
    nan_from_step: int | None = None
    step_times_every: int = 0  # 0: no StepTimesRecorded
    exit_code: int = 3  # the ``exit`` mode's code

    def extra_s(self, env: WorkerEnv) -> float:
        """This rank's slowdown per step, beyond the step time."""
        return self.slow_ms / 1000 if self.slow_rank == env.rank else 0.0

    def loss(self, step: int) -> float:
        if self.nan_from_step is not None and step >= self.nan_from_step:
            return math.nan
        return loss_at(step)

    def fails(self, env: WorkerEnv, step: int) -> bool:
        return (
            self.fail_mode != "none"
            and step == self.fail_at_step
            and self.fail_generation in (None, env.generation)
            and self.fail_rank in (None, env.rank)
        )


def loss_at(step: int) -> float:
    """A deterministic, decreasing loss curve, so projections have something to show."""
    return round(2.0 + 8.0 / (1.0 + 0.1 * step), 6)


def _now_ms() -> int:
    return int(time.time() * 1000)


class Worker:
    def __init__(self, env: WorkerEnv, plan: Plan, producer: EventProducer) -> None:
        self.env = env
        self.plan = plan
        self.producer = producer
        self.step = env.resume_step or 0  # last completed step, reported in heartbeats
        self.producer_id = f"worker/{env.run_id}/{env.logical_id}"
        self._prefix = f"{env.run_id}/g{env.generation}/{env.logical_id}"
        self._heartbeats_off = threading.Event()
        # Heartbeat records sent, counted after each send (events.kafka.delivery.drain); a
        # beat written to the agent's beat file is no record: counting it let a flush end
        # with a step report still queued, which the exit of a failing step then lost.
        self._beaten = 0
        self._seq = 0  # beats written to the beat file (events.beatfile), when there is one
        self._closing = False
        self._beat_lock = threading.Lock()
        self._undelivered: list[str] = []  # delivery failures, appended by the producer
        self._times: list[tuple[int, float, float]] = []  # (step, ms, input wait ms) unsent
        self.replay = SdcReplay.from_environ(os.environ)
        self.run_key = runkeys.from_environ(os.environ)  # what its reports are signed with

    def _header(self, suffix: str) -> Header:
        return Header(f"{self._prefix}/{suffix}", self.env.run_id, self.env.generation,
                      _now_ms(), self.producer_id)

    def heartbeat_loop(self) -> None:
        beat = 0
        # The first beat goes out at once: it is how the controller sees the member join.
        while not self._heartbeats_off.is_set():
            beat += 1
            if self._beat(beat):
                self._beaten += 1
            self.producer.poll(0)
            if self._heartbeats_off.wait(self.env.heartbeat_interval_s):
                return

    def _beat(self, beat: int, closing: bool = False) -> bool:
        """One heartbeat: to the beat file its agent named (events.beatfile), or a record;
        True when it was a record."""
        if self.env.beat_file is not None:
            with self._beat_lock:  # the heartbeat thread and the closing beat of run()
                self._closing = self._closing or closing  # a closed session stays closed
                self._seq += 1
                beatfile.write(self.env.beat_file,
                               beatfile.Beat(self._seq, self.step, self._closing))
            return False
        self._send(HeartbeatRecorded(
            header=self._header("hb/closing" if closing else f"hb/{beat}"),
            logical_id=self.env.logical_id, node=self.env.node, step=self.step,
            closing=closing))
        return True

    def run(self) -> int:
        beats = threading.Thread(target=self.heartbeat_loop, name="heartbeat", daemon=True)
        beats.start()
        try:
            code = self._steps()
            self._beat(0, closing=True)  # what follows is teardown, judged by the exit
            self._flush()  # the last reports, heartbeating: a slow flush is not a silence
        finally:
            # Out of the producer before anything tears it down: ``fail`` raises out of the
            # loop, and librdkafka destroyed under a live poll dies of SIGSEGV instead of
            # exiting 1 with the traceback (seen once in CI).
            self._heartbeats_off.set()
            beats.join(5)
        return code

    def _send(self, event: Event) -> None:
        runkeys.send_report(self.producer, event, self.run_key, self._undelivered.append)

    def _flush(self) -> None:
        """Wait until every report sent so far is delivered (the heartbeats go on);
        raise if librdkafka failed one or still held one at the bound."""
        beaten = self._beaten
        left = drain(self.producer, lambda: self._beaten - beaten)
        if left or self._undelivered:
            raise ReportsUndelivered(
                f"testworker: {left} reports still queued, delivery failures:"
                f" {self._undelivered[:3] or 'none'}; check the broker at {self.env.bootstrap}")

    def _steps(self) -> int:
        for step in range(self.step + 1, self.plan.steps + 1):
            if self.replay is not None and step == self.replay.step and self.env.rank == 0:
                self._replayed(self.replay)
            if self.plan.fails(self.env, step):
                self._fail(step)
            started = time.monotonic()
            wait_s = self.plan.input_wait_ms / 1000
            time.sleep(wait_s + self.plan.step_time_s + self.plan.extra_s(self.env))
            self.step = step
            took_ms = round((time.monotonic() - started) * 1000, 3)
            wait_ms = min(took_ms, self.plan.input_wait_ms)
            if self.env.rank == 0:
                self._send(StepCommitted(
                    header=self._header(f"step/{step}"), step=step, tokens=TOKENS_PER_STEP,
                    loss_tokens=LOSS_TOKENS_PER_STEP, step_time_ms=took_ms,
                    input_wait_ms=wait_ms, loss=self.plan.loss(step)))
                self._flush()
            if self.plan.step_times_every:
                self._times.append((step, took_ms, wait_ms))
                if len(self._times) >= self.plan.step_times_every:
                    self._send_times()
        self._send_times()
        return 0

    def _send_times(self) -> None:
        if not self._times:
            return
        times, self._times = self._times, []
        self._send(StepTimesRecorded(
            header=self._header(f"steptimes/{times[0][0]}"), logical_id=self.env.logical_id,
            node=self.env.node, first_step=times[0][0], step_time_ms=tuple(t[1] for t in times),
            input_wait_ms=tuple(t[2] for t in times)))
        self.producer.poll(0)

    def _replayed(self, replay: SdcReplay) -> None:
        n = self.env.world_size
        self._send(StepReplayed(
            header=self._header(f"replayed/{replay.step}"), step=replay.step,
            suspected_generation=replay.generation, fingerprints=(replay.fingerprints[0],) * n,
            nodes=(self.env.node,) * n))
        self._flush()

    def _corrupt(self, step: int) -> None:
        if self.env.rank == 0:
            n = self.env.world_size
            self._send(CorruptionSuspected(
                header=self._header(f"suspected/{step}"), step=step, detector="agreement",
                ranks=(1,) if n > 1 else (), fingerprints=tuple(f"{r:016x}" for r in range(n)),
                nodes=(self.env.node,) * n, part="params",
                detail="testworker: rank 1's parameters disagree"))
            self._flush()
        os.write(2, f"testworker: corruption suspected at step {step}\n".encode())
        os._exit(CORRUPTION_EXIT_CODE)

    def _fail(self, step: int) -> None:
        mode = self.plan.fail_mode
        if mode == "corrupt":
            self._corrupt(step)
        if mode == "crash":
            # The last words an exit report carries (its stderr tail), then no cleanup.
            os.write(2, f"testworker: crash at step {step}\n".encode())
            os._exit(CRASH_EXIT_CODE)
        if mode == "kill":
            os.write(2, f"testworker: killed at step {step}\n".encode())
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "fail":
            raise InjectedFailure(f"injected failure at step {step} "
                                  f"(generation {self.env.generation}, rank {self.env.rank})")
        if mode == "exit":
            os.write(2, f"testworker: sys.exit({self.plan.exit_code}) at step {step}\n".encode())
            sys.exit(self.plan.exit_code)
        if mode == "hang":
            self._heartbeats_off.set()
        # hang and stall: the main loop never returns; only a signal ends the process.
        while True:
            time.sleep(3600)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._heartbeats_off.set()
        # Exiting promptly matters more than the last heartbeat.
        with contextlib.suppress(Exception):
            self.producer.flush(2)
        os._exit(TERM_EXIT_CODE)


def _generation_or_any(raw: str) -> int | None:
    if raw == "any":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'any', got {raw!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> Plan:
    p = argparse.ArgumentParser(prog="python -m agent.testworker",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--steps", type=int, default=10, help="the run's last step (default 10)")
    p.add_argument("--step-time", type=float, default=0.1, help="seconds per step")
    p.add_argument("--fail-mode", choices=MODES, default="none")
    p.add_argument("--fail-at-step", type=int, default=2,
                   help="the step that fails (steps before it commit; default 2)")
    p.add_argument("--fail-generation", type=_generation_or_any, default=None,
                   help="fail only in this generation, or 'any' (default)")
    p.add_argument("--fail-rank", type=_generation_or_any, default=None,
                   help="fail only on this rank, or 'any' (default)")
    p.add_argument("--ignore-sigterm", action="store_true",
                   help="keep running on SIGTERM (only SIGKILL or SIGINT ends it)")
    p.add_argument("--slow-rank", type=int, default=None, help="this rank is a straggler")
    p.add_argument("--slow-ms", type=float, default=0.0,
                   help="how much longer the slow rank's steps take (ms)")
    p.add_argument("--input-wait-ms", type=float, default=0.0,
                   help="every step first waits this long for input (ms)")
    p.add_argument("--nan-from-step", type=int, default=None,
                   help="rank 0 reports a NaN loss from this step on")
    p.add_argument("--step-times-every", type=int, default=0,
                   help="every rank reports StepTimesRecorded every N steps (default 0: never)")
    p.add_argument("--exit-code", type=int, default=3,
                   help="the code the exit mode passes to sys.exit (default 3)")
    a = p.parse_args(argv)
    if a.steps < 0 or a.step_time < 0 or a.fail_at_step < 1:
        p.error("--steps and --step-time must be >= 0, --fail-at-step >= 1")
    if not 0 <= a.exit_code <= 255:
        p.error("--exit-code must be in 0..255")
    if a.slow_ms < 0 or a.input_wait_ms < 0 or a.step_times_every < 0:
        p.error("--slow-ms, --input-wait-ms and --step-times-every must be >= 0")
    return Plan(a.steps, a.step_time, a.fail_mode, a.fail_at_step, a.fail_generation,
                a.fail_rank, a.ignore_sigterm, a.slow_rank, a.slow_ms, a.input_wait_ms,
                a.nan_from_step, a.step_times_every, a.exit_code)


def main(argv: Sequence[str] | None = None) -> int:
    plan = parse_args(argv)
    try:
        env = WorkerEnv.from_environ(os.environ)
    except WorkerEnvError as exc:
        print(f"testworker: {exc}", file=sys.stderr)
        return 2
    producer = EventProducer(env.bootstrap, client_id=f"worker/{env.run_id}/{env.logical_id}",
                             config=report_producer_config())
    worker = Worker(env, plan, producer)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if plan.ignore_sigterm else worker.on_signal)
    signal.signal(signal.SIGINT, worker.on_signal)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
