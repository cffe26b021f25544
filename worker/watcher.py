"""Follows ``runledger.runs`` for this run: verdicts, interval changes, fencing.

"Latest" comes only from the log, and so does every answer the session waits
for: whether a proposed manifest was committed (``ManifestCommitted`` with its
digest) or refused (``WriteRejected`` naming the proposal), the checkpoint
interval the controller set, and whether this generation may still publish
(the fold's own answer, ``events.fence.fenced_by``: a newer generation, a
restart or requeue decision, a cancellation or the run's end fence it). The
watcher starts at the topic's end: everything it waits for comes later.

Tested in tests/e2e/test_checkpoint.py.
"""

from __future__ import annotations

import logging
import threading
import time

from events.codec import Codec, default_codec
from events.errors import EventsError
from events.fence import fenced_by
from events.fold import ACCEPTED, Verdict
from events.kafka.reader import END, LogReader
from events.model import CheckpointIntervalChanged, Event, ManifestCommitted, WriteRejected
from events.topics import RUNS

log = logging.getLogger("runledger.worker.watcher")

# The verdict's reason when the controller has not decided in time (not a fold verdict).
TIMEOUT = "timeout"


class Watcher:
    def __init__(self, bootstrap: str, run_id: str, generation: int, *,
                 codec: Codec | None = None) -> None:
        self.bootstrap = bootstrap
        self.run_id = run_id
        self.generation = generation
        self.codec = codec or default_codec()
        self._reader: LogReader | None = None
        self._cond = threading.Condition()
        self._committed: dict[str, ManifestCommitted] = {}
        self._rejected: dict[str, WriteRejected] = {}
        self.interval_steps: int | None = None
        # The fold's verdict on this generation's reports; ACCEPTED until a fact fences it.
        self.fence: Verdict = ACCEPTED
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rl-watcher", daemon=True)

    def start(self, timeout_s: float = 30.0) -> Watcher:
        # Only this run's records are decoded (every topic is keyed by run id).
        self._reader = LogReader(self.bootstrap, [RUNS], start=END, codec=self.codec,
                                 key=self.run_id, name=f"runledger-watch-{self.run_id}",
                                 timeout_s=timeout_s)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop following the log; never raises (the session stops its reporter after it)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        if self._reader is not None:
            try:
                self._reader.close()
            except Exception as exc:  # nothing is lost: the watcher only reads
                log.warning("closing the watcher of %s: %s", self.run_id, exc)

    def wait_verdict(self, proposal_id: str, digest: str, timeout_s: float) -> Verdict:
        """Block until the controller decides on a proposal, or time out."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if digest in self._committed:
                    return ACCEPTED
                if proposal_id in self._rejected:
                    r = self._rejected[proposal_id]
                    return Verdict(False, r.reason, r.detail)
                if not self.fence.accepted:
                    return self.fence
                left = deadline - time.monotonic()
                if left <= 0:
                    return Verdict(False, TIMEOUT, f"no verdict within {timeout_s}s")
                self._cond.wait(min(left, 0.5))

    def _run(self) -> None:
        assert self._reader is not None
        while not self._stop.is_set():
            try:
                records = self._reader.read_records(500, 0.2)
            except EventsError as exc:
                # Only a fatal consumer error gets here; waits then end by their timeout.
                log.error("the watcher of %s stopped: %s", self.run_id, exc)
                return
            for record in records:
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
                case _:
                    fence = fenced_by(e, self.generation)
                    if fence.accepted:
                        return
                    self.fence = fence
            self._cond.notify_all()
