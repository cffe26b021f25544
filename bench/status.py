"""Benchmark: `runledger status RUN` and `runledger runs` from runledger.status vs folding the log.

Usage: ``.venv/bin/python bench/status.py [--quick]``

A throwaway single-broker stack (``runledger.stack.Stack``, secure like every
stack; purged at the end) gets the synthetic log of ``bench/controller.py``:
10^6 events of 1,000 runs (``--quick``: 2*10^4 / 40), interleaved by time,
written to ``runledger.runs`` with a plain producer (the controller would take
far longer to write them). While writing, each run is folded as the
controller folds it, and a summary goes to ``runledger.status`` whenever
``events.status.worth_writing`` says the controller would write one (log time
as the clock): the changelog a controller leaves, before compaction.

Then, in this process, what the commands do (``runledger.commands.runs``):
``status RUN`` for random runs and ``runs`` read the summaries; the baseline,
in the same run, is the refold every call made before (``--refold``: read and
fold ``requests``, ``runs`` and, for ``status``, ``reports``). Reported: p50
and p99 of each, and the ratio (baseline / summary: how many times faster).
Process start and imports (~1 s for any command) are not included. Nothing
asserts on a timing. Results go to ``bench/results/status.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import heapq
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path, where bench/events.py
    # would shadow the ``events`` package; use the repository root instead.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

from confluent_kafka import Producer

from bench.common import machine_info, percentile, print_table, ratio, write_results
from bench.controller import QUICK, FastEncoder, run_events, shapes
from events.codec import default_codec
from events.fold import apply
from events.kafka.connection import ENV_CREDENTIALS, client_config
from events.partition import PARTITIONER
from events.state import RunState
from events.status import (
    NO_NOTES,
    RunStatusChanged,
    StatusNotes,
    encode,
    note,
    summarize,
    worth_writing,
)
from events.topics import RUNS, STATUS
from runledger.commands.runs import _load, _status_doc, _summaries
from runledger.stack import Stack
from runledger.views import statusview
from runledger.views.runview import list_rows

NAME = "status"
SEED = 20240614
FULL = dataclasses.replace(QUICK, runs=1_000, events=1_000_000)
SMALL = dataclasses.replace(QUICK, runs=40, events=20_000)


@dataclasses.dataclass(frozen=True)
class Repeats:
    status: int
    runs: int
    refold_status: int
    refold_runs: int


def write_log(bootstrap: str, mode: Any) -> dict[str, Any]:
    """The synthetic log onto runs, and the controller's summaries onto status."""
    started = time.perf_counter()
    encoder = FastEncoder(default_codec())
    producer = Producer(client_config(bootstrap, {
        "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4",
        "queue.buffering.max.messages": 1_000_000, "partitioner": PARTITIONER}))
    states: dict[str, RunState | None] = {}
    notes: dict[str, StatusNotes] = {}
    written: dict[str, RunStatusChanged] = {}
    events = summaries = 0
    for at, _index, _seq, event in heapq.merge(*(run_events(s) for s in shapes(mode))):
        run = event.run_id
        t = apply(states.get(run), event)
        if t.verdict.accepted and t.state is not None:
            states[run] = t.state
            notes[run] = note(notes.get(run, NO_NOTES), event)
            record = summarize(t.state, notes[run], at)
            if worth_writing(written.get(run), record):
                written[run] = record
                _produce(producer, STATUS, run, encode(record))
                summaries += 1
        _produce(producer, RUNS, run, encoder.encode(event))
        events += 1
    producer.flush(120)
    return {"events": events, "runs": len(states), "summaries": summaries,
            "write_s": time.perf_counter() - started}


def _produce(producer: Producer, topic: str, key: str, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key)
            return
        except BufferError:
            producer.poll(0.1)


def timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def measure(bootstrap: str, runs: list[str], reps: Repeats) -> dict[str, Any]:
    rng = random.Random(SEED)
    picks = iter(rng.choice(runs) for _ in range(10 * reps.status + 10 * reps.refold_status))

    def fast_status() -> None:
        assert _status_doc(bootstrap, next(picks), refold=False)["source"] == statusview.SOURCE

    def slow_status() -> None:
        assert _status_doc(bootstrap, next(picks), refold=True)["source"] == statusview.REFOLD

    def fast_runs() -> None:
        found = _summaries(bootstrap, None, quiet=False)
        assert found is not None and len(statusview.rows(found.values())) == len(runs)

    def slow_runs() -> None:
        view = _load(bootstrap, None, with_reports=False)
        assert len(list_rows(view.requests, view.facts)) == len(runs)

    fast_status()  # warm: connections, the codec
    return {"status": timed(fast_status, reps.status),
            "status_refold": timed(slow_status, reps.refold_status),
            "runs": timed(fast_runs, reps.runs),
            "runs_refold": timed(slow_runs, reps.refold_runs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2*10^4 events / 40 runs")
    args = parser.parse_args(argv)
    mode = SMALL if args.quick else FULL
    reps = Repeats(20, 10, 3, 3) if args.quick else Repeats(100, 20, 5, 3)
    started = time.perf_counter()
    machine = machine_info(["confluent-kafka", "fastavro", "runledger"])
    print(f"bench/status.py ({'quick' if args.quick else 'full'}) on {machine['usable_cores']} "
          f"cores, load average {machine['load_average_1_5_15']}", flush=True)
    tmp = tempfile.TemporaryDirectory(prefix="runledger-bench-")
    stack = Stack(Path(tmp.name) / "stack")
    try:
        info = stack.up()
        os.environ[ENV_CREDENTIALS] = str(info.credentials or "")
        log = write_log(info.bootstrap, mode)
        print(f"   wrote {log['events']:,} events of {log['runs']:,} runs and "
              f"{log['summaries']:,} summaries in {log['write_s']:.1f} s", flush=True)
        run_ids = sorted(s.submitted.run_id for s in shapes(mode))
        times = measure(info.bootstrap, run_ids, reps)
    finally:
        gc.collect()
        stack.down(purge=True)
        tmp.cleanup()
    rows, figures = [], {}
    for what in ("status", "runs"):
        fast, slow = times[what], times[f"{what}_refold"]
        f50, f99 = percentile(fast, 50) * 1e3, percentile(fast, 99) * 1e3
        s50, s99 = percentile(slow, 50) * 1e3, percentile(slow, 99) * 1e3
        figures[what] = {"p50_ms": f50, "p99_ms": f99, "refold_p50_ms": s50,
                         "refold_p99_ms": s99, "speedup_p50": ratio(s50, f50),
                         "calls": len(fast), "refold_calls": len(slow)}
        rows.append([what, f"{f50:.0f}", f"{f99:.0f}", f"{s50:.0f}", f"{s99:.0f}",
                     f"{ratio(s50, f50):.0f}x"])
    print_table(["command", "p50 ms", "p99 ms", "refold p50 ms", "refold p99 ms",
                 "refold/summary p50"], rows,
                title=f"status and runs over {log['events']:,} events of {log['runs']:,} runs "
                      f"(in-process; imports not included)")
    results = {"benchmark": NAME, "mode": "quick" if args.quick else "full", "machine": machine,
               "log": log, "figures": figures, "raw_s": times,
               "elapsed_s": time.perf_counter() - started}
    path = write_results(NAME, results)
    print(f"wrote {path} in {results['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
