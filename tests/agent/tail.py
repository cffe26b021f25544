"""Test helpers: follow a topic from "now" and kill processes a test started.

Reading the shared reports topic from offset 0 on every check would grow with
everything other tests ever wrote; a tail that starts at the end offsets seen
when it is created reads only what this test caused.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from events.codec import default_codec
from events.errors import DecodeError
from events.kafka.clients import decode_message
from events.kafka.connection import client_config
from events.model import Event
from events.topics import REPORTS

E = TypeVar("E", bound=Event)


class Tail:
    """Events written to ``topic`` after construction, collected as they arrive."""

    def __init__(self, bootstrap: str, topic: str = REPORTS) -> None:
        self.codec = default_codec()
        self.events: list[Event] = []
        self._consumer = Consumer(client_config(bootstrap, {
            "group.id": f"test-tail-{uuid.uuid4().hex}",  # never committed
            "enable.auto.commit": False,
        }))
        meta = self._consumer.list_topics(topic, timeout=10).topics[topic]
        start = [TopicPartition(topic, p, self._end(topic, p)) for p in sorted(meta.partitions)]
        self._consumer.assign(start)

    def _end(self, topic: str, partition: int) -> int:
        # A broker that just created the topic may not have elected leaders yet.
        deadline = time.monotonic() + 30
        while True:
            try:
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=10)
                return int(high)
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def pump(self, timeout_s: float = 0.2) -> None:
        msg = self._consumer.poll(timeout_s)
        while msg is not None:
            err = msg.error()
            if err is None:
                with contextlib.suppress(DecodeError):  # others' garbage is not our concern
                    self.events.append(decode_message(self.codec, msg).event)
            elif err.code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(f"tail: {err.str()}")
            msg = self._consumer.poll(0)

    def of(self, run_id: str, kind: type[E]) -> list[E]:
        return [e for e in self.events if e.run_id == run_id and isinstance(e, kind)]

    def wait_for(self, what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
            self.pump()

    def settle(self, seconds: float) -> None:
        """Keep collecting for ``seconds``: for asserting that something did not happen."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.pump(0.1)

    def close(self) -> None:
        self._consumer.close()


STARTED_PID = re.compile(r"started pid (\d+)")


def kill_tree(proc: subprocess.Popen[bytes], log_path: Path | None = None) -> None:
    """Stop a started agent (politely first) and every worker its log says it started.

    Workers run in their own sessions, so they would outlive a wedged agent;
    their pids come from the agent's log lines ``started pid N``.
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    if log_path is not None and log_path.exists():
        for pid in STARTED_PID.findall(log_path.read_text(errors="replace")):
            kill_worker_group(int(pid))


def kill_worker_group(pid: int) -> None:
    """SIGKILL a worker's process group, if that pid still is one of our test workers."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return  # gone
    if b"agent.testworker" in cmdline:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
