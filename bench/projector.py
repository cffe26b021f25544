"""Benchmark: Kafka -> DuckDB projection throughput, replay, and ETTR query latency.

Usage: ``.venv/bin/python bench/projector.py [--quick] [--events N] [--runs N]
[--bootstrap HOST:PORT] [--keep-db PATH] [--explain]``

Setup (not measured): a synthetic, realistic log of 10^6 records (``--quick``:
10^5; ``--events N``) for 500 runs (``--quick``: 100), built by
``projector_parts``: mostly heartbeats and ``StepTimesRecorded`` on
``runledger.reports`` and ``StepCommitted`` reports with the controller's fact
copies on ``runledger.runs``, plus generations, checkpoints, cursors with
per-source counts, crashes and restarts, alerts, rejections, endings, and a few
corrupt records of every kind the projector quarantines. Run 0 is one big run:
25,000 steps (``--quick``: 2,500), 4 members, a crash every ~2,000 steps. The
bytes are pre-encoded (checked against ``Codec.encode``) and produced with a
plain confluent_kafka Producer into a throwaway single-broker stack
(``runledger.stack.Stack`` in a temporary directory, purged at the end;
``--bootstrap`` uses an existing cluster, whose older records are then read too).

1. Projection throughput. Each pass reads every partition of both topics from
   offset 0 to the end with ``Projector.run``'s consumer settings and loop:
   a. baseline: bare consume + ``Codec.decode`` of each value, no DuckDB
      (measured twice, before and after the projector passes; the faster one
      is the baseline);
   plus, to show where the time goes, bare consume (no decode), consume +
   ``decode_message`` + ``rows_for`` (the projector's Python work without
   DuckDB) and the same with each report judged by the report door first
   (its signatures, as the projector checks them); then
   b0. the projection below on the Python route (``compiled=False``) with
   ``verify_threads=0``: every record decoded by the codec and every signature
   verified by the door on the reader's thread (before ``events.kafka.ahead``);
   b1. the same on the Python route with the signatures verified ahead (before
   ``projectors.fastpath``: the before of (b), in the same run);
   b. ``Projector(db, bootstrap).run(until_caught_up=True)`` into a fresh file:
   the compiled route for every record it may take (``projectors.fastpath``),
   each batch's signatures verified ahead in one compiled call on one thread
   per core. The memo of verified signatures is emptied before every pass that
   judges signatures, so each verifies all of them itself.
   Ratio = (b) records/s / (a) records/s.
2. Replay: what ``runledger replay --db NEW`` does (a Projector into an empty
   file until caught up, then close), timed from construction to close; its
   ``table_digests`` must equal those of (b), and (b)'s those of (b1) (the two
   routes); a differing table gets its first differing row printed.
3. ETTR latency over (b)'s projection: ``queries.ettr.ettr(con, run_id)`` on the
   big run and on a sample of typical runs, median and p90; baseline
   ``SELECT count(*) FROM steps WHERE run_id = ?`` on the same connection and
   runs, interleaved with it. The big run's ETTR is then broken down per CTE
   of ``queries/ettr.sql`` (each CTE's time with its inputs) and, with
   ``--explain`` or when it takes over 0.25 s, by EXPLAIN ANALYZE's costliest
   operators (big run and one typical run).

4. Snapshot cost over (b)'s projection: what ``project --snapshot-every S``
   adds per published snapshot (``projectors.snapshot.publish``: CHECKPOINT,
   copy through the held descriptor, metadata, fsync, atomic rename, plus the
   watermark lookup the projector makes for it), median of 5; baseline: (b)'s
   mean batch (run time / transactions). Ratio = snapshot / batch, i.e. what
   ``--snapshot-every 0`` (a snapshot after every batch) would cost per batch.

5. Signatures in bulk: 20,000 report-sized signatures (``--quick``: 5,000)
   verified by ``events.signed.bulk.verify_many`` on 1, 2 and 4 threads, against
   ``PublicKey.verify`` one at a time: what more cores give the projector's
   verification.

Ratios are runledger / baseline from this run. Nothing asserts on a timing.
Results go to ``bench/results/projector.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path, where bench/events.py
    # would shadow the ``events`` package; use the repository root instead.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import duckdb

from bench.common import fmt_num, machine_info, print_table, ratio, write_results
from bench.projector_parts import (
    CONSUME_BATCH,
    CONSUMER_SETTINGS,
    Log,
    PassResult,
    build_log,
    consume_pass,
    decode_work,
    door_work,
    ettr_cte_profile,
    explain_analyze,
    latencies,
    produce_log,
    rows_work,
    summary_ms,
    touch_work,
    watermarks,
)
from bench.reportkeys import ReportKeys
from events.codec import Codec, default_codec
from events.kafka.ahead import DEFAULT_THREADS
from events.kafka.broker import check_broker
from events.kafka.connection import ENV_CREDENTIALS
from events.kafka.reader import Watermarks
from events.signed import bulk
from events.signed.seen import forget_verified
from events.signed.signing import SigningKey
from events.topics import replication_for, topic_specs
from projectors.projector import TOPICS, Projector, table_digests
from projectors.snapshot import publish, snapshot_path
from queries.ettr import ettr
from queries.runner import sql_text
from runledger.stack import Stack
from runledger.stack.admin import ensure_topics

NAME = "projector"
EXPLAIN_OVER_S = 0.25  # the big run's ETTR median above which EXPLAIN ANALYZE runs anyway


@dataclasses.dataclass(frozen=True, slots=True)
class Mode:
    events: int
    runs: int
    big_steps: int
    corrupt_each: int  # corrupt records of each kind
    ettr_sample: int  # typical runs timed
    ettr_repeats: int  # calls per typical run
    big_repeats: int  # calls on the big run


FULL = Mode(1_000_000, 500, 25_000, 2, 40, 3, 9)
QUICK = Mode(100_000, 100, 2_500, 1, 20, 3, 5)


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


# --- setup ----------------------------------------------------------------------


def setup(mode: Mode, codec: Codec, bootstrap: str,
          admin: SigningKey | None) -> tuple[Log, dict[str, Any]]:
    keys = ReportKeys(bootstrap, admin)
    log = build_log(codec, mode.events, mode.runs, mode.big_steps, mode.corrupt_each,
                    keys.headers)
    produced = produce_log(bootstrap, log)
    marks = watermarks(bootstrap)
    info = {"records": len(log.records), "bytes": log.size_bytes, "runs": log.runs,
            "big_run": log.big_run_id, "big_run_steps": log.big_steps,
            "per_topic": log.per_topic(), "mix": log.mix, "corrupt": log.corrupt,
            "build_s": log.build_s, "checked_with_codec": log.checked_with_codec,
            "produce": produced, "topic_records_after_produce": marks,
            "signed": keys.signing, "nodes_enrolled": len(keys.nodes),
            "run_keys": len(keys.runs), "enroll_s": keys.enroll_s}
    print(f"   log: {len(log.records):,} records ({mib(log.size_bytes)} MiB of values) for "
          f"{log.runs} runs, built in {log.build_s:.0f} s ({log.checked_with_codec:,} checked "
          f"byte-identical to Codec.encode); produced in {produced['seconds']:.0f} s "
          f"({fmt_num(produced['records_per_s'])}/s)", flush=True)
    top = ", ".join(f"{k} {v:,}" for k, v in list(log.mix.items())[:6])
    print(f"   mix: {top}, ... ({len(log.mix)} kinds); corrupt: {sum(log.corrupt.values())} "
          f"({', '.join(log.corrupt)})", flush=True)
    if keys.signing:
        print(f"   reports signed as their senders sign them: {len(keys.nodes)} node keys "
              f"enrolled in {keys.enroll_s:.1f} s, {len(keys.runs):,} run keys", flush=True)
    print(f"   on the broker now: {marks}\n", flush=True)
    return log, info


# --- 1 and 2: projection and replay ---------------------------------------------


@dataclasses.dataclass
class ProjectorRun:
    records: int
    construct_s: float
    run_s: float
    close_s: float
    batches: int
    quarantined: int
    file_bytes: int
    compiled: int = 0  # records the compiled route took (projectors.fastpath)

    @property
    def total_s(self) -> float:
        return self.construct_s + self.run_s + self.close_s

    @property
    def records_per_s(self) -> float:
        return self.records / self.run_s if self.run_s else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "total_s": self.total_s,
                "records_per_s_run": self.records_per_s,
                "records_per_s_total": self.records / self.total_s if self.total_s else None}


def project_into(cls: type[Projector], db: Path, bootstrap: str, codec: Codec,
                 verify_threads: int = DEFAULT_THREADS, compiled: bool = True) -> ProjectorRun:
    """Construct, run until caught up, close: each timed on its own."""
    gc.collect()
    t0 = time.perf_counter()
    projector = cls(db, bootstrap, codec=codec, verify_threads=verify_threads,
                    compiled=compiled)
    t1 = time.perf_counter()
    try:
        n = projector.run(until_caught_up=True)
        t2 = time.perf_counter()
    finally:
        projector.close()
    t3 = time.perf_counter()
    size = sum(p.stat().st_size for p in (db, db.with_name(db.name + ".wal")) if p.exists())
    return ProjectorRun(n, t1 - t0, t2 - t1, t3 - t2, projector.batches, projector.quarantined,
                        size, projector.compiled_records)


def diff_tables(a: Path, b: Path, tables: Sequence[str]) -> dict[str, Any]:
    """Per table: rows of ``a`` missing from ``b``, and the first such row's differing columns."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
        con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
        out: dict[str, Any] = {}
        for t in tables:
            cur = con.execute(f"SELECT * FROM a.{t} EXCEPT ALL SELECT * FROM b.{t} "
                              "ORDER BY topic, part, ofs")
            names = [d[0] for d in cur.description or []]
            missing = cur.fetchall()
            first: dict[str, Any] = {}
            if missing:
                row = dict(zip(names, missing[0], strict=True))
                other = con.execute(f"SELECT * FROM b.{t} WHERE topic = ? AND part = ? AND "
                                    "ofs = ?", [row["topic"], row["part"], row["ofs"]]).fetchone()
                theirs = dict(zip(names, other or [None] * len(names), strict=True))
                first = {"at": [row["topic"], row["part"], row["ofs"]],
                         "columns": {k: [str(v)[:120], str(theirs[k])[:120]]
                                     for k, v in row.items() if v != theirs[k]}}
            out[t] = {"rows_not_in_other": len(missing), "first": first}
        return out
    finally:
        con.close()


def projection_section(log: Log, codec: Codec, bootstrap: str, tmp: Path,
                       partial: Callable[[dict[str, Any]], None]) -> tuple[dict[str, Any], Path]:
    """Sections 1 and 2; ``partial`` saves section 1 before the (long) replay starts."""
    tag = uuid.uuid4().hex[:8]
    passes: dict[str, PassResult] = {}
    passes["consume"] = consume_pass(bootstrap, touch_work, f"bench-projector-raw-{tag}")
    passes["decode_1"] = consume_pass(bootstrap, decode_work(codec), f"bench-projector-a1-{tag}")
    passes["rows"] = consume_pass(bootstrap, rows_work(codec), f"bench-projector-rows-{tag}")
    forget_verified()  # every pass that judges signatures verifies them all itself
    passes["door"] = consume_pass(bootstrap, door_work(codec, bootstrap),
                                  f"bench-projector-door-{tag}")
    # The same projection with every signature verified by the door on the reader's
    # thread (what it was before events.kafka.ahead): the before of (b), in this run.
    forget_verified()
    alone = project_into(Projector, tmp / "alone.duckdb", bootstrap, codec, verify_threads=0,
                         compiled=False)
    print(f"   (b0) done: {alone.run_s:.0f} s", flush=True)
    # Every record on the Python route (what it was before projectors.fastpath), the
    # signatures verified ahead: the before of (b)'s compiled route, in this run.
    python_db = tmp / "python.duckdb"
    forget_verified()
    python = project_into(Projector, python_db, bootstrap, codec, compiled=False)
    print(f"   (b1) done: {python.run_s:.0f} s", flush=True)
    live_db = tmp / "live.duckdb"
    forget_verified()
    live = project_into(Projector, live_db, bootstrap, codec)
    print(f"   (b) done: {live.run_s:.0f} s", flush=True)
    passes["decode_2"] = consume_pass(bootstrap, decode_work(codec), f"bench-projector-a2-{tag}")
    print(flush=True)

    base_key = max(("decode_1", "decode_2"), key=lambda k: passes[k].records_per_s)
    base = passes[base_key].records_per_s
    rows: list[list[object]] = []
    labels = {"consume": "bare consume (no decode)",
              "decode_1": "(a) consume + Codec.decode, before",
              "decode_2": "(a) consume + Codec.decode, after",
              "rows": "consume + decode_message + rows_for",
              "door": "... + the report door (signatures)"}
    for key in ("consume", "decode_1", "decode_2", "rows", "door"):
        p = passes[key]
        rows.append([labels[key] + (" *" if key == base_key else ""), f"{p.records:,}",
                     f"{p.seconds:.1f}", fmt_num(p.records_per_s),
                     f"{ratio(p.records_per_s, base):.3f}"])
    rows.append(["(b0) Projector.run -> DuckDB, Python route, door verifying alone",
                 f"{alone.records:,}", f"{alone.run_s:.1f}", fmt_num(alone.records_per_s),
                 f"{ratio(alone.records_per_s, base):.3f}"])
    rows.append([f"(b1) ... Python route, {DEFAULT_THREADS} threads verifying ahead",
                 f"{python.records:,}", f"{python.run_s:.1f}", fmt_num(python.records_per_s),
                 f"{ratio(python.records_per_s, base):.3f}"])
    rows.append([f"(b) ... compiled route (projectors.fastpath), {DEFAULT_THREADS} threads ahead",
                 f"{live.records:,}", f"{live.run_s:.1f}",
                 fmt_num(live.records_per_s), f"{ratio(live.records_per_s, base):.3f}"])
    print_table(["pass (both topics, offset 0 to end)", "records", "seconds", "records/s",
                 "vs (a)"], rows,
                title=f"1. projection throughput: {len(log.records):,} records, consume batches "
                f"of {CONSUME_BATCH}, read_committed; * = the baseline (faster (a) pass)")
    # The passes above are the Python route with the door verifying on the reader's
    # thread: they take (b0) apart, not (b).
    duck_s = alone.run_s - passes["door"].seconds
    door_s = passes["door"].seconds - passes["rows"].seconds
    print(f"   (b) took {live.compiled:,} records ({live.compiled / max(live.records, 1):.0%}) "
          "down the compiled route, the rest down the Python route", flush=True)
    print(f"   (b) wrote {live.batches:,} transactions, quarantined {live.quarantined} "
          f"(corrupt records sent: {sum(log.corrupt.values())}); construct "
          f"{live.construct_s:.2f} s, close {live.close_s:.2f} s; projection file "
          f"{mib(live.file_bytes)} MiB ({live.file_bytes / max(live.records, 1):.0f} B/record)")
    print(f"   where (b0)'s time goes: consume {passes['consume'].seconds:.1f} s, + decode "
          f"{passes[base_key].seconds - passes['consume'].seconds:.1f} s, + rows_for "
          f"{passes['rows'].seconds - passes[base_key].seconds:.1f} s, + the report door "
          f"{door_s:.1f} s ({door_s / alone.run_s:.0%}), + DuckDB (inserts, commits) "
          f"~{duck_s:.1f} s = {duck_s / alone.run_s:.0%} of (b0)\n", flush=True)
    out: dict[str, Any] = {
        "passes": {k: p.to_json() for k, p in passes.items()}, "baseline_pass": base_key,
        "baseline_records_per_s": base, "projector": live.to_json(),
        "ratio": ratio(live.records_per_s, base), "duckdb_share_estimate_b0": duck_s / alone.run_s,
        "verify_threads": DEFAULT_THREADS, "projector_without_ahead": alone.to_json(),
        "ratio_without_ahead": ratio(alone.records_per_s, base),
        "ahead_speedup": alone.run_s / live.run_s if live.run_s else None,
        "projector_python_route": python.to_json(),
        "ratio_python_route": ratio(python.records_per_s, base),
        "compiled_speedup": python.run_s / live.run_s if live.run_s else None,
        "door_s": door_s, "door_share_b0": door_s / alone.run_s,
        "consumer_settings": CONSUMER_SETTINGS, "consume_batch": CONSUME_BATCH}
    partial(out)

    replay_db = tmp / "replay.duckdb"
    forget_verified()
    replay = project_into(Projector, replay_db, bootstrap, codec)

    t0 = time.perf_counter()
    digests = {"live": table_digests(live_db), "replay": table_digests(replay_db),
               "python_route": table_digests(python_db)}
    digest_s = (time.perf_counter() - t0) / 2
    differing = sorted(t for t in digests["live"] if digests["live"][t] != digests["replay"].get(t))
    diffs = diff_tables(live_db, replay_db, differing)
    counts = {t: int(d.split(":")[0]) for t, d in digests["live"].items()}
    verdict = "yes, every table" if not differing else "NO: " + ", ".join(
        f"{t} ({diffs[t]['rows_not_in_other']} rows)" for t in differing)

    print_table(
        ["replay (runledger replay --db NEW)", "value"],
        [["records", f"{replay.records:,}"],
         ["seconds (construct + run until caught up + close)", f"{replay.total_s:.1f}"],
         ["records/s over that", fmt_num(replay.records / replay.total_s)],
         ["table digests equal to (b)'s", verdict],
         ["(b)'s equal to (b1)'s, the Python route's",
          "yes, every table" if digests["live"] == digests["python_route"] else "NO"],
         ["table_digests() per file (s)", f"{digest_s:.2f}"],
         ["file size (MiB)", mib(replay.file_bytes)]],
        title=f"2. replay into an empty file: {replay.records:,} records")
    for t, d in diffs.items():
        cols = d["first"].get("columns", {})
        shown = "; ".join(f"{c}: {v[0]!r} vs {v[1]!r}" for c, v in cols.items())
        print(f"   replay vs (b), {t} at {d['first'].get('at')}: {shown}")
    big_tables = sorted(counts.items(), key=lambda kv: -kv[1])
    print("   rows: " + ", ".join(f"{t} {n:,}" for t, n in big_tables if n) + "\n", flush=True)
    out["replay"] = {**replay.to_json(), "digests_equal": not differing,
                     "python_route_digests_equal": digests["live"] == digests["python_route"],
                     "differing_tables": differing, "digest_s": digest_s, "differences": diffs}
    out.update(table_rows=counts, digests=digests)
    return out, live_db


# --- 5. signatures verified in bulk ----------------------------------------------

VERIFY_SIGNATURES = 20_000


def verify_section(quick: bool) -> dict[str, Any]:
    """What ``events.signed.bulk.verify_many`` gives per thread count (what more cores
    would give the projector's verification), against ``PublicKey.verify`` one at a
    time; 300-byte messages like a report's, the memo emptied before each pass."""
    n = VERIFY_SIGNATURES // (4 if quick else 1)
    key = SigningKey.generate()
    messages = [random.randbytes(300) for _ in range(n)]
    work = [(key.public, m, key.sign(m)) for m in messages]
    forget_verified()
    t0 = time.perf_counter()
    assert all(public.verify(m, sig) for public, m, sig in work)
    alone = time.perf_counter() - t0
    rows: list[list[object]] = [["PublicKey.verify, one at a time", f"{alone / n * 1e6:.1f}",
                                 "1.00"]]
    out: dict[str, Any] = {"signatures": n, "one_at_a_time_us": alone / n * 1e6,
                           "native": bulk.native is not None, "threads": {}}
    for threads in (1, 2, 4):
        forget_verified()
        t0 = time.perf_counter()
        assert all(bulk.verify_many(work, threads))
        took = time.perf_counter() - t0
        rows.append([f"bulk.verify_many, {threads} thread(s)", f"{took / n * 1e6:.1f}",
                     f"{alone / took:.2f}"])
        out["threads"][threads] = {"us": took / n * 1e6, "speedup": alone / took}
    forget_verified()
    print_table(["verification", "µs a signature (wall)", "vs one at a time"], rows,
                title=f"5. {n:,} report signatures verified, {os.cpu_count()} cores")
    return out


# --- 4. snapshots -----------------------------------------------------------------


def snapshot_section(db: Path, bootstrap: str, codec: Codec,
                     live: dict[str, Any]) -> dict[str, Any]:
    """What one published snapshot costs, against (b)'s mean batch."""
    batch_s = live["run_s"] / max(live["batches"], 1)
    projector = Projector(db, bootstrap, codec=codec, snapshot_every_s=0.0)
    marks = Watermarks(bootstrap, TOPICS, name="bench-projector-snapshot")
    publish_s, marks_s = [], []
    try:
        assert projector._live is not None
        for i in range(5):
            t0 = time.perf_counter()
            ends = marks.get(2.0)
            t1 = time.perf_counter()
            done = publish(projector.con, projector._live, positions=projector.offsets(),
                           ends=ends, taken_at=time.time())
            t2 = time.perf_counter()
            assert done is not None, f"snapshot {i} not published"
            marks_s.append(t1 - t0)
            publish_s.append(t2 - t1)
    finally:
        marks.close()
        projector.close()
    size = snapshot_path(db).stat().st_size
    pub, wm = statistics.median(publish_s), statistics.median(marks_s)
    total = pub + wm
    print_table(["snapshot (project --snapshot-every S)", "value"],
                [["file copied (MiB)", mib(size)],
                 ["publish: checkpoint, copy, meta, fsync, rename (s, median of 5)", f"{pub:.3f}"],
                 ["watermarks of both topics (s, median of 5)", f"{wm:.3f}"],
                 ["baseline: (b)'s mean batch (s)", f"{batch_s:.3f}"],
                 ["ratio: snapshot / batch", f"{ratio(total, batch_s):.2f}"],
                 ["share of the loop at the default --snapshot-every 5",
                  f"{total / (5.0 + total):.1%}"]],
                title="4. snapshot cost, over (b)'s projection")
    return {"file_bytes": size, "publish_s": publish_s, "watermarks_s": marks_s,
            "publish_median_s": pub, "watermarks_median_s": wm, "batch_mean_s": batch_s,
            "ratio_to_batch": ratio(total, batch_s), "share_at_5s": total / (5.0 + total)}


# --- 3. ETTR --------------------------------------------------------------------


def ettr_section(db: Path, log: Log, mode: Mode, explain: bool) -> dict[str, Any]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return _ettr(con, log, mode, explain)
    finally:
        con.close()


def _step_rows(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    row = con.execute("SELECT count(*) FROM steps WHERE run_id = ?", [run_id]).fetchone()
    return int(row[0]) if row else 0


def _ettr(con: duckdb.DuckDBPyConnection, log: Log, mode: Mode, explain: bool
          ) -> dict[str, Any]:
    big = log.big_run_id
    runs = [r for (r,) in con.execute("SELECT run_id FROM runs WHERE run_id <> ? ORDER BY run_id",
                                      [big]).fetchall()]
    sample = random.Random(7).sample(runs, min(mode.ettr_sample, len(runs)))
    steps_of = {r: _step_rows(con, r) for r in [big, *sample]}  # also warms the count path
    ettr(con, big)  # warm-up: the query text, the tables' pages

    contenders: dict[str, Callable[[str], object]] = {
        "ettr": lambda r: ettr(con, r), "count": lambda r: _step_rows(con, r)}
    samples: dict[str, dict[str, list[float]]] = {"big": {k: [] for k in contenders},
                                                  "typical": {k: [] for k in contenders}}
    for _ in range(mode.big_repeats):  # interleaved: a load burst hits all alike
        for name, fn in contenders.items():
            samples["big"][name] += latencies(functools.partial(fn, big), 1)
    for run_id in sample:
        for _ in range(mode.ettr_repeats):
            for name, fn in contenders.items():
                samples["typical"][name] += latencies(functools.partial(fn, run_id), 1)
    stats = {group: {k: summary_ms(v) for k, v in by.items()} for group, by in samples.items()}
    result = ettr(con, big)
    typical_steps = statistics.median(steps_of[r] for r in sample)
    labels = {"big": f"big run ({steps_of[big]:,} step rows)",
              "typical": f"typical runs ({len(sample)} x {mode.ettr_repeats}, median "
                         f"{typical_steps:,.0f} step rows)"}
    rows: list[list[object]] = []
    for group, label in labels.items():
        e, c = stats[group]["ettr"], stats[group]["count"]
        rows.append([label, f"{e['median_ms']:.1f}", f"{e['p90_ms']:.1f}",
                     f"{c['median_ms']:.2f}", f"{c['p90_ms']:.2f}",
                     f"{ratio(e['median_ms'], c['median_ms']):.0f}"])
    print_table(["ETTR latency", "ettr() p50 ms", "p90 ms", "count(*) p50 ms", "p90 ms",
                 "ratio p50"], rows,
                title="3. ETTR over (b)'s projection: queries.ettr.ettr(con, run_id) vs "
                "SELECT count(*) FROM steps WHERE run_id = ? (same connection, interleaved)")
    parts = ", ".join(f"{k} {v:,.0f}" for k, v in result.parts_s.items() if v)
    print(f"   big run: ETTR {result.ratio:.3f} of {result.allocated_s:,.0f} s allocated "
          f"({parts} s; unexplained {result.unexplained_s:.3f} s)", flush=True)
    profile = ettr_cte_profile(con, big, repeats=3)
    prof_rows = [[p["cte"], ", ".join(p["depends_on"]) or "-", f"{p['median_ms']:.1f}",
                  f"{max(p['own_ms'], 0.0):.1f}",
                  f"{p['rows']:,}" if p["rows"] is not None else "-"] for p in profile]
    print(flush=True)
    print_table(["ettr.sql CTE (big run)", "uses", "ms with inputs", "own ms (est.)", "rows"],
                prof_rows,
                title="   per CTE: SELECT count(*), sum(hash(x)) FROM <cte>, with everything "
                "it needs; own = that minus its slowest input (0 when noise makes it negative)")
    out: dict[str, Any] = {
        "big_run": {"run_id": big, "step_rows": steps_of[big], **stats["big"],
                    "ratio_p50": ratio(stats["big"]["ettr"]["median_ms"],
                                       stats["big"]["count"]["median_ms"]),
                    "result": {"ratio": result.ratio, "allocated_s": result.allocated_s,
                               "parts_s": result.parts_s,
                               "unexplained_s": result.unexplained_s}},
        "typical": {"runs": sample, "repeats": mode.ettr_repeats,
                    "median_step_rows": typical_steps, **stats["typical"],
                    "ratio_p50": ratio(stats["typical"]["ettr"]["median_ms"],
                                       stats["typical"]["count"]["median_ms"])},
        "cte_profile_big": profile,
    }
    if explain or stats["big"]["ettr"]["median_ms"] > EXPLAIN_OVER_S * 1e3:
        out["explain_analyze"] = {}
        for label, run_id in (("big", big), ("typical", sample[0])):
            analyzed = explain_analyze(con, sql_text("ettr"), run_id)
            out["explain_analyze"][label] = analyzed
            op_rows = [[o["operator"], o["cte"] or "-", f"{o['seconds'] * 1e3:.1f}",
                        f"{o['rows']:,}" if isinstance(o["rows"], int) else "-",
                        o["info"][:70]] for o in analyzed["top"]]
            print_table(["operator", "in CTE", "ms", "rows", "detail"], op_rows,
                        title=f"   EXPLAIN ANALYZE of ettr.sql, {label} run {run_id}: "
                        f"{analyzed['wall_s'] * 1e3:.1f} ms wall with profiling, planning "
                        f"{analyzed['planning_s'] * 1e3:.1f} ms; operator ms are summed over "
                        f"threads")
    return out


# --- main -----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="10^5 records, 100 runs, a 2,500-step big run")
    parser.add_argument("--events", type=int, default=None, help="records in the log")
    parser.add_argument("--runs", type=int, default=None, help="runs in the log (with the big one)")
    parser.add_argument("--bootstrap", default=None,
                        help="use this Kafka cluster instead of a throwaway stack (its existing "
                        "runledger.runs/reports records are projected too)")
    parser.add_argument("--admin-key", default=None,
                        help="with --bootstrap: the cluster's admin key, to enroll the nodes "
                        "whose reports the log holds (a secure cluster refuses unsigned ones)")
    parser.add_argument("--insecure", action="store_true",
                        help="a plaintext throwaway stack: reports unsigned, nothing verified "
                        "(what the projection costs without the signatures' bound)")
    parser.add_argument("--keep-db", type=Path, default=None,
                        help="copy (b)'s projection file here before the temp dir goes")
    parser.add_argument("--explain", action="store_true",
                        help="EXPLAIN ANALYZE the big run's ETTR even when it is fast")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    # Its own results file: a plaintext run never overwrites the secure one.
    name = f"{NAME}-insecure" if args.insecure else NAME
    if args.events is not None:
        mode = dataclasses.replace(mode, events=args.events)
    if args.runs is not None:
        mode = dataclasses.replace(mode, runs=args.runs)

    started = time.perf_counter()
    machine = machine_info(["confluent-kafka", "duckdb", "fastavro", "runledger"])
    print(f"bench/projector.py ({'quick' if args.quick else 'full'}: {mode.events:,} records, "
          f"{mode.runs} runs) on {machine['usable_cores']} cores, Python {machine['python']}, "
          f"load average {machine['load_average_1_5_15']}")
    print("Shared machine: numbers are noisy; nothing here asserts on a timing.\n", flush=True)
    codec = default_codec()
    results: dict[str, Any] = {
        "benchmark": name, "mode": "quick" if args.quick else "full",
        "insecure": args.insecure,
        "sizes": dataclasses.asdict(mode), "machine": machine,
        "notes": [
            "every pass reads both topics from offset 0 to the end with Projector.run's "
            "consumer settings and consume(num_messages=CONSUME_BATCH, timeout=0.5) loop",
            "ratio = Projector.run records/s / the faster of two bare consume + Codec.decode "
            "passes (before and after), measured in this run",
            "replay seconds: Projector construction + run(until_caught_up=True) + close, "
            "as `runledger replay --db NEW` without the process start",
            "ETTR latency: one call = queries.ettr.ettr(con, run_id) on a read-only connection "
            "to (b)'s file; baseline count(*) FROM steps WHERE run_id = ?, interleaved",
            "shared machine: other engineers run tests at the same time; numbers are noisy",
        ],
    }
    tmp = Path(tempfile.mkdtemp(prefix="runledger-bench-projector-"))
    stack: Stack | None = None
    status = 0
    try:
        t0 = time.perf_counter()
        if args.bootstrap:
            bootstrap = args.bootstrap
            brokers = check_broker(bootstrap)
            ensure_topics(bootstrap, topic_specs(brokers), replication_for(brokers))
            where = f"existing cluster {bootstrap}"
            admin = SigningKey.load(args.admin_key) if args.admin_key else None
        else:
            stack = Stack(tmp / "stack", secure=False if args.insecure else None)
            info = stack.up()
            bootstrap = info.bootstrap
            # Its clients act as this stack's admin, whatever $RUNLEDGER_CREDENTIALS says.
            os.environ[ENV_CREDENTIALS] = str(info.credentials or "")
            where = f"throwaway stack {bootstrap}"
            admin = SigningKey.load(info.keys / "admin.key") if info.keys else None
        print(f"   broker: {where} ({time.perf_counter() - t0:.0f} s)", flush=True)
        results["broker"] = {"where": where, "up_s": time.perf_counter() - t0}
        log, results["log"] = setup(mode, codec, bootstrap, admin)
        section = time.perf_counter()

        def partial(section_1: dict[str, Any]) -> None:
            write_results(name, {**results, "projection": section_1, "partial": True})

        results["projection"], live_db = projection_section(log, codec, bootstrap, tmp, partial)
        results["projection"]["elapsed_s"] = time.perf_counter() - section
        if args.keep_db is not None:
            shutil.copyfile(live_db, args.keep_db)
            print(f"   kept (b)'s projection at {args.keep_db}\n", flush=True)
        section = time.perf_counter()
        try:
            results["ettr"] = ettr_section(live_db, log, mode, args.explain)
        except Exception as exc:  # keep sections 1-2 when the query part fails
            print(f"3. ETTR: FAILED: {exc!r}", flush=True)
            results["ettr"] = {"failed": repr(exc)}
            status = 1
        results["ettr"]["elapsed_s"] = time.perf_counter() - section
        results["snapshot"] = snapshot_section(live_db, bootstrap, codec,
                                               results["projection"]["projector"])
        results["verify"] = verify_section(args.quick)
        if not results["projection"]["replay"]["digests_equal"]:
            status = 1
    finally:
        gc.collect()  # close the Kafka clients before their broker goes away
        if stack is not None:
            stack.down(purge=True)
        shutil.rmtree(tmp, ignore_errors=True)
    results["elapsed_s"] = time.perf_counter() - started
    path = write_results(name, results)
    print(f"\nwrote {path} in {results['elapsed_s']:.0f} s")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
