"""bench/load_parts.py's watchers beside the fleet: the controller's lag, the user's
``runledger status``, and the projector.

- :class:`Lag` samples the controller group's lag on ``reports`` every second
  (end offsets minus the group's committed offsets).
- :class:`Status` runs ``runledger status RUN --json`` once, as a user does: the
  whole process, timed, and how many members its answer lists.
- :class:`Projection` runs ``runledger project --metrics`` beside the controller
  for the fleet's whole life and scrapes its lag every second
  (``cluster_watch_parts.ProjectorLag``); on stopping, its lag, CPU and peak
  memory. A projector is part of every deployment the README describes, and on
  this machine it takes its share of the same 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench.cluster_procs_parts import free_port
from bench.cluster_watch_parts import ProjectorLag
from bench.common import REPO_ROOT, proc_cpu_s, proc_hwm_mb
from events.kafka.connection import client_config
from events.topics import REPORTS
from projectors.snapshot import snapshot_path


class Lag(threading.Thread):
    """The controller group's lag on ``reports``, sampled every second."""

    def __init__(self, bootstrap: str, group: str) -> None:
        super().__init__(name="lag", daemon=True)
        self.stop = threading.Event()
        self.samples: list[tuple[float, int]] = []
        self.consumer = Consumer(client_config(bootstrap, {"group.id": group,
                                                           "enable.auto.commit": False}))
        meta = self.consumer.list_topics(REPORTS, timeout=10).topics[REPORTS]
        self.parts = [TopicPartition(REPORTS, p) for p in sorted(meta.partitions)]

    def run(self) -> None:
        try:
            while not self.stop.wait(1.0):
                committed = self.consumer.committed(self.parts, timeout=10)
                lag = 0
                for tp in committed:
                    _low, high = self.consumer.get_watermark_offsets(
                        TopicPartition(REPORTS, tp.partition), timeout=10, cached=False)
                    lag += max(0, high - max(tp.offset, 0))
                self.samples.append((time.monotonic(), lag))
        finally:
            self.consumer.close()


class Status(threading.Thread):
    """``runledger status RUN --json`` once the run is confirmed, as a user runs it: the
    whole process, timed, and how many members its answer lists."""

    def __init__(self, run_id: str, env: dict[str, str]) -> None:
        super().__init__(name="status", daemon=True)
        self.run_id, self.env = run_id, env
        self.took_s: float | None = None
        self.members: int | None = None

    def run(self) -> None:
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "runledger.cli", "status", self.run_id, "--json"],
            cwd=REPO_ROOT, env=self.env, capture_output=True, text=True, timeout=300,
            check=False)
        self.took_s = time.monotonic() - began
        if done.returncode == 0:
            self.members = len(json.loads(done.stdout).get("members", []))


class Projection:
    """``runledger project --metrics`` for the fleet's life, its lag scraped every second."""

    def __init__(self, env: dict[str, str], db: Path, log: Path) -> None:
        port = free_port()
        self.db = db
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runledger.cli", "project", "--db", str(db),
             "--metrics", f"127.0.0.1:{port}"],
            cwd=REPO_ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self.lag = ProjectorLag(f"http://127.0.0.1:{port}/metrics")
        self.lag.start()

    def stop(self, since: float | None) -> dict[str, Any]:
        """Stop it; its lag from ``since`` (monotonic) on, its CPU and peak memory."""
        self.lag.stop()
        alive = self.proc.poll() is None
        cpu = proc_cpu_s(self.proc.pid) if alive else float("nan")
        hwm = proc_hwm_mb(self.proc.pid) if alive else float("nan")
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()
        for path in (self.db, self.db.with_suffix(".duckdb.wal"), snapshot_path(self.db)):
            path.unlink(missing_ok=True)  # the log stays; the projection is throwaway
        lag = self.lag.quantiles(since)
        return {"projector_lag_p50": lag["p50"], "projector_lag_p99": lag["p99"],
                "projector_lag_max": lag["max"], "projector_cpu_s": cpu,
                "projector_peak_rss_mb": hwm, "projector_exit": self.proc.returncode}
