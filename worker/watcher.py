"""Follows ``runledger.runs`` for this run: verdicts, interval changes, fencing.

"Latest" comes only from the log, and so does every answer the session waits
for: whether a proposed manifest was committed (``ManifestCommitted`` with its
digest) or refused (``WriteRejected`` naming the proposal), the checkpoint
interval the controller set, and whether this generation is still current (a
newer ``GenerationStarted``, a cancellation or the run's end fence it). The
watcher starts at the topic's end: everything it waits for comes later.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_END, Consumer, KafkaError, TopicPartition

from events.codec import Codec, default_codec
from events.errors import DecodeError
from events.kafka import decode_message
from events.model import (
    CheckpointIntervalChanged,
    Event,
    GenerationStarted,
    ManifestCommitted,
    RunCancelled,
    RunFinished,
    WriteRejected,
)
from events.topics import RUNS


@dataclass(frozen=True, slots=True)
class Verdict:
    committed: bool
    reason: str = ""
    detail: str = ""


class Watcher:
    def __init__(self, bootstrap: str, run_id: str, generation: int, *,
                 codec: Codec | None = None) -> None:
        self.run_id = run_id
        self.generation = generation
        self.codec = codec or default_codec()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"runledger-watch-{run_id}",
            "enable.auto.commit": False, "isolation.level": "read_committed",
        })
        self._cond = threading.Condition()
        self._committed: dict[str, ManifestCommitted] = {}
        self._rejected: dict[str, WriteRejected] = {}
        self.interval_steps: int | None = None
        self.fenced: str = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rl-watcher", daemon=True)

    def start(self, timeout_s: float = 30.0) -> Watcher:
        meta = self._consumer.list_topics(RUNS, timeout=timeout_s)
        parts = sorted(meta.topics[RUNS].partitions)
        ends = []
        for p in parts:
            _, high = self._consumer.get_watermark_offsets(TopicPartition(RUNS, p),
                                                           timeout=timeout_s)
            ends.append(TopicPartition(RUNS, p, high if high >= 0 else OFFSET_END))
        self._consumer.assign(ends)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def wait_verdict(self, proposal_id: str, digest: str, timeout_s: float) -> Verdict:
        """Block until the controller decides on a proposal, or time out."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if digest in self._committed:
                    return Verdict(True)
                if proposal_id in self._rejected:
                    r = self._rejected[proposal_id]
                    return Verdict(False, r.reason, r.detail)
                if self.fenced:
                    return Verdict(False, "stale_generation", self.fenced)
                left = deadline - time.monotonic()
                if left <= 0:
                    return Verdict(False, "timeout", f"no verdict within {timeout_s}s")
                self._cond.wait(min(left, 0.5))

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                continue  # transient: librdkafka retries; the session's timeout bounds waits
            try:
                record = decode_message(self.codec, msg)
            except DecodeError:
                continue  # the controller quarantines; a watcher only skips what it cannot read
            self._absorb(record.event)

    def _absorb(self, e: Event) -> None:
        if e.run_id != self.run_id:
            return
        with self._cond:
            match e:
                case ManifestCommitted():
                    self._committed[e.manifest_digest] = e
                case WriteRejected():
                    self._rejected[e.rejected_event_id] = e
                case CheckpointIntervalChanged():
                    self.interval_steps = e.interval_steps
                case GenerationStarted() if e.generation > self.generation:
                    self.fenced = f"generation {e.generation} started"
                case RunCancelled():
                    self.fenced = "the run was cancelled"
                case RunFinished():
                    self.fenced = f"the run finished ({e.outcome})"
                case _:
                    return
            self._cond.notify_all()
