"""Benchmark: the common commands timed as a user waits for them, each a whole process.

Usage: ``.venv/bin/python bench/cli.py [--quick] [--bootstrap HOST:PORT]``

A throwaway single-broker stack (secure, purged at the end; ``--bootstrap``
uses an existing cluster with the credentials ``RUNLEDGER_CREDENTIALS``
names) gets the log of ``bench/status.py``: 10^6 events of 1,000 runs and
the controller's summaries (``--quick``: 2*10^4 / 40). Then every command
below runs as its own process, the installed ``runledger`` console script,
from exec to exit (interpreter start, imports, the broker connection and
the read included), round after round, the commands interleaved within each
round so that a change in the machine's load falls on all of them alike:

- ``python -c pass``: the floor any Python command pays;
- ``runledger --help``, ``--version``, ``submit SPEC --dry-run`` (no broker),
  ``cancel --help``;
- ``runledger status RUN`` (a random run each time), ``status RUN --json``,
  ``runs``, ``nodes``;
- the baselines: a bare confluent-kafka process (no runledger import) that
  reads what ``status`` reads (the run's partition of ``runledger.status`` to
  its end, the newest value of the run's key) and what ``runs`` reads (every
  partition to its end), with the same credentials.

Reported: p50 and p90 of each, and the ratio of each command to its baseline
(``status`` and ``runs`` to the bare reads, the rest to ``python -c pass``).
Issue #34's goals on a quiet machine: ``--help`` under 150 ms, ``status`` and
``runs`` p50 under 300 ms. Nothing asserts on a timing. Results go to
``bench/results/cli.json``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
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

import yaml

from bench.common import (
    REPO_ROOT,
    broker,
    machine_info,
    percentile,
    print_table,
    ratio,
    write_results,
)
from bench.status import FULL, SMALL, write_log
from events.kafka.connection import ENV_CREDENTIALS
from events.kafka.statuslog import read_status, status_partitions
from events.partition import partition_for
from events.topics import STATUS
from events.workerenv import ENV_BOOTSTRAP
from runledger.stack import Stack

NAME = "cli"
SEED = 20261206
QUICK_ROUNDS, FULL_ROUNDS = 5, 20
SPEC = REPO_ROOT / "examples" / "tiny.yaml"

# A bare client: confluent-kafka and the credentials file, nothing of runledger.
# argv: bootstrap, credentials file ("" for none), partitions ("all" or "p,p"), key.
BARE = f"TOPIC = {STATUS!r}\n" + """
import sys, uuid
from confluent_kafka import Consumer, TopicPartition
bootstrap, creds, parts, key = sys.argv[1:5]
conf = {"bootstrap.servers": bootstrap, "group.id": "bench-bare-" + uuid.uuid4().hex,
        "enable.auto.commit": False, "enable.partition.eof": True,
        "fetch.wait.max.ms": 5}  # as events.kafka.statuslog reads: no 500 ms wait at the end
if creds:
    for line in open(creds):
        name, _, value = line.strip().partition("=")
        if name and not name.startswith("#"):
            conf[name.strip()] = value.strip()
c = Consumer(conf)
meta = c.list_topics(TOPIC, timeout=10).topics[TOPIC]
wanted = sorted(meta.partitions) if parts == "all" else [int(p) for p in parts.split(",")]
due, assign = set(), []
for p in wanted:
    low, high = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
    if high > low:
        due.add(p)
        assign.append(TopicPartition(TOPIC, p, low))
c.assign(assign)
newest = {}
while due:
    for m in c.consume(10000, 1.0):
        if m.error():
            if m.error().code() == -191:  # _PARTITION_EOF
                due.discard(m.partition())
            continue
        newest[m.key()] = m.value()
c.close()
print(len(newest) if key == "*" else int(key.encode() in newest))
"""


def dry_run_spec(folder: Path) -> Path:
    """examples/tiny.yaml naming its dataset by manifest id: nothing to resolve in a catalog."""
    doc = yaml.safe_load(SPEC.read_text())
    doc["dataset"] = "sha256:" + "ab" * 32
    doc.setdefault("code", {})["workdir"] = str(SPEC.parent.resolve())
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def commands(runledger: str, bootstrap: str, creds: str, runs: list[str],
             partitions: int, spec: Path) -> dict[str, Any]:
    """Label -> a function giving the argv of one timed process (a run drawn each time)."""
    rng = random.Random(SEED)
    py = sys.executable

    def run_arg() -> str:
        return rng.choice(runs)

    def bare_status() -> list[str]:
        run = run_arg()
        return [py, "-c", BARE, bootstrap, creds, str(partition_for(run, partitions)), run]

    return {
        "python -c pass": lambda: [py, "-c", "pass"],
        "runledger --help": lambda: [runledger, "--help"],
        "runledger --version": lambda: [runledger, "--version"],
        "runledger submit SPEC --dry-run": lambda: [runledger, "submit", str(spec),
                                                    "--dry-run"],
        "runledger cancel --help": lambda: [runledger, "cancel", "--help"],
        "runledger status RUN": lambda: [runledger, "status", run_arg()],
        "runledger status RUN --json": lambda: [runledger, "status", run_arg(), "--json"],
        "runledger runs": lambda: [runledger, "runs"],
        "runledger nodes": lambda: [runledger, "nodes"],
        "bare: the status read": bare_status,
        "bare: the runs read": lambda: [py, "-c", BARE, bootstrap, creds, "all", "*"],
    }


# Each command's baseline in the ratio column.
BASELINE = {"runledger status RUN": "bare: the status read",
            "runledger status RUN --json": "bare: the status read",
            "runledger runs": "bare: the runs read",
            "runledger nodes": "bare: the runs read"}


def measure(table: dict[str, Any], env: dict[str, str], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {label: [] for label in table}
    failures: dict[str, str] = {}
    for round_ in range(rounds + 1):  # round 0 warms the page cache, not counted
        for label, argv_of in table.items():
            argv = argv_of()
            t0 = time.perf_counter()
            done = subprocess.run(argv, env=env, capture_output=True, text=True,
                                  timeout=300, check=False, cwd=REPO_ROOT)
            elapsed = time.perf_counter() - t0
            if done.returncode != 0:
                failures[label] = (done.stderr or done.stdout).strip()[-300:]
            if round_ > 0:
                times[label].append(elapsed)
    if failures:
        raise RuntimeError(f"commands failed: {failures}")
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2*10^4 events / 40 runs, "
                        f"{QUICK_ROUNDS} rounds")
    parser.add_argument("--bootstrap", default=None,
                        help="an existing cluster (its log gets the benchmark's runs too)")
    args = parser.parse_args(argv)
    mode, rounds = (SMALL, QUICK_ROUNDS) if args.quick else (FULL, FULL_ROUNDS)
    machine = machine_info(["confluent-kafka", "typer", "runledger"])
    print(f"bench/cli.py ({'quick' if args.quick else 'full'}) on {machine['usable_cores']} "
          f"cores, Python {machine['python']}, load average {machine['load_average_1_5_15']}")
    print("Shared machine: numbers are noisy; nothing here asserts on a timing.\n", flush=True)
    runledger = str(Path(sys.executable).parent / "runledger")
    tmp = Path(tempfile.mkdtemp(prefix="runledger-bench-cli-"))
    stack: Stack | None = None
    started = time.perf_counter()
    try:
        bootstrap, creds, where, stack = broker(args.bootstrap, tmp, "the log's writer")
        written = write_log(bootstrap, mode)
        partitions = status_partitions(bootstrap) or 1
        runs = sorted(read_status(bootstrap))
        print(f"   {where}: {written['events']:,} events of {written['runs']:,} runs, "
              f"{written['summaries']:,} summaries written in {written['write_s']:.0f} s; "
              f"{rounds} rounds\n", flush=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNLEDGER_")}
        env.update({ENV_BOOTSTRAP: bootstrap, ENV_CREDENTIALS: creds,
                    "RUNLEDGER_HOME": str(tmp / "home")})
        table = commands(runledger, bootstrap, creds, runs, partitions, dry_run_spec(tmp))
        times = measure(table, env, rounds)
    finally:
        if stack is not None:
            stack.down(purge=True)
    floor = statistics.median(times["python -c pass"])
    rows, summary, out = [], [], {}
    for label, samples in times.items():
        p50, p90 = statistics.median(samples), percentile(samples, 90)
        base_label = BASELINE.get(label, "python -c pass")
        base = statistics.median(times[base_label])
        r = ratio(p50, base) if label != base_label and not label.startswith("bare") else None
        rows.append([label, f"{p50 * 1e3:.0f}", f"{p90 * 1e3:.0f}",
                     f"{(p50 - floor) * 1e3:.0f}", f"{r:.2f}" if r is not None else "",
                     base_label if r is not None else ""])
        out[label] = {"p50_s": p50, "p90_s": p90, "samples_s": samples,
                      "baseline": base_label if r is not None else None, "ratio_p50": r}
        if r is not None and label.startswith("runledger"):
            summary.append([f"{label} p50 (ms)", f"{p50 * 1e3:.0f}", f"{base * 1e3:.0f}",
                            f"{r:.2f}"])
    print_table(["command (whole process)", "p50 ms", "p90 ms", "over the floor ms",
                 "ratio p50", "baseline"], rows,
                title=f"CLI as a user waits: {rounds} rounds on {where}; floor = python -c pass "
                f"({floor * 1e3:.0f} ms); ratio = command / its baseline")
    results = {"benchmark": NAME, "mode": "quick" if args.quick else "full",
               "machine": machine, "where": where, "log": written, "rounds": rounds,
               "commands": out, "summary": summary,
               "elapsed_s": time.perf_counter() - started}
    path = write_results(NAME, results)
    print(f"\nwrote {path} in {results['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
