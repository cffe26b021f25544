"""Benchmark: the live view's first render in headless Chromium, against the static report.

Usage: ``.venv/bin/python bench/ui.py [--quick] [--bootstrap HOST:PORT] [--loads N]
[--steps N]``

Setup (not measured): one finished run, written by hand with exact times
(``tests/queries/timeline.py``, as the report's browser test writes its runs):
``--steps`` (1,000) steps of two ranks, a checkpoint every tenth of them, rank
1 killed between two checkpoints, generation 2 restored from the last one and
run to the end. Its facts are projected through the projector's own mapping
(``projectors.tables.rows_for``, inserted as Arrow batches, as the projector
does) into a projection file, and the summary a controller would have left
(``events.status.summarize`` of the folded run) goes onto ``runledger.status``
of a broker: ``--bootstrap`` (an existing cluster, with the credentials
``RUNLEDGER_CREDENTIALS`` names, as ``make bench-smoke`` hands it the throwaway
one of scripts/with-broker.sh) or a throwaway single-broker stack of its own.
``runledger ui --port 0 --db PROJECTION`` then runs as a subprocess (the case
of the demo's epilogue: a finished projection, no projector running) and is
warmed up (its feeds have read the run; every page asked once).

Measured, in Debian's Chromium (``/usr/bin/chromium``, ``$CHROMIUM``) driven by
Playwright, each load in a fresh browser context (an empty cache, as a first
visit), the three pages taking turns load by load (``--loads``: 20, ``--quick``
3, after one load each not counted), at 1366x900:

- the runs page ``/``: navigation start to the run's row in ``table#runs``;
- the run page ``/runs/RUN``: navigation start to ``#run-step`` (the live
  status, from ``/api/runs/RUN``), and to the report's sections
  (``#charts #timeline``, from ``/api/runs/RUN/sections``);
- the baseline: the static HTML report of the same run (``queries.report``, as
  ``runledger report --html`` writes it) from a ``file://`` URL: navigation start
  to its ``#run-id`` header, and to DOMContentLoaded (the whole page parsed).

Times are ``performance.now()`` in the page (its origin is the navigation's
start) when a MutationObserver, installed before any of the page's own script,
first sees the element. Bytes: the navigation's and every resource's
``transferSize`` (headers and the gzip-compressed bodies as sent) up to that
moment; for the report, its file's size. The server's own time per API call
(``urllib``, no browser) is printed beside them. Ratios: the live view's page
over the report. Issue goals (warm server): first render under 500 ms and under
200 KB transferred; PASS/FAIL is printed, nothing asserts on a timing (the exit
status is 0 whatever the figures). Results go to ``bench/results/ui.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path, where bench/events.py
    # would shadow the ``events`` package; use the repository root instead.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import duckdb
from confluent_kafka import Producer

from bench.common import (
    REPO_ROOT,
    broker,
    machine_info,
    percentile,
    print_table,
    ratio,
    write_results,
)
from events.fold import apply
from events.kafka.connection import ENV_CREDENTIALS, client_config
from events.partition import PARTITIONER
from events.state import RunState
from events.status import NO_NOTES, encode, note, summarize
from events.topics import RUNS, STATUS
from events.workerenv import ENV_BOOTSTRAP
from projectors.tables import DDL, TABLE_OF, rows_for
from queries.report import report
from runledger.stack import Stack
from tests.queries.timeline import Timeline

NAME = "ui"
QUICK_LOADS, FULL_LOADS = 3, 20
STEPS = 1_000
GOAL_MS, GOAL_KB = 500.0, 200.0
VIEWPORT = {"width": 1366, "height": 900}
CHROMIUM = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]

# Before any script of the page: the time each selector first matches (and
# DOMContentLoaded), in ms since the navigation started.
MARKS = """(() => {
  const want = %s;
  const marks = window.__rlMarks = {};
  const check = () => {
    for (const [name, sel] of Object.entries(want)) {
      if (!(name in marks) && document.querySelector(sel)) marks[name] = performance.now();
    }
  };
  new MutationObserver(check).observe(document, {childList: true, subtree: true});
  document.addEventListener('DOMContentLoaded', () => {
    marks.dcl = performance.now(); check(); });
})();"""

# What was sent up to now: the navigation and every resource, headers and bodies as
# sent (gzip included); file:// pages report 0.
SENT = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const res = performance.getEntriesByType('resource');
  const fcp = performance.getEntriesByName('first-contentful-paint')[0];
  return {marks: window.__rlMarks,
          transfer: nav.transferSize + res.reduce((s, r) => s + r.transferSize, 0),
          decoded: nav.decodedBodySize + res.reduce((s, r) => s + r.decodedBodySize, 0),
          requests: 1 + res.length,
          resources: res.map((r) => [r.name.replace(location.origin, ''), r.transferSize,
                                     Math.round(r.startTime), Math.round(r.responseEnd)]),
          html: [Math.round(nav.responseStart), Math.round(nav.responseEnd),
                 Math.round(nav.domContentLoadedEventEnd)],
          fcp: fcp ? fcp.startTime : null};
}"""


# -- the run: a timeline, its projection, its summary --------------------------------


def timeline(run_id: str, steps: int) -> Timeline:
    """``steps`` steps of two ranks, a checkpoint every tenth, rank 1 killed between two
    checkpoints past the middle, generation 2 from the last checkpoint to the end."""
    tl = Timeline(run_id=run_id, start_ms=int(time.time() * 1000) - 3_600_000)
    every = max(steps // 10, 2)
    kill = steps * 9 // 20 + 1
    kill += 1 if kill % every == 0 else 0
    tl.submit()
    tl.advance(500)
    tl.admit()
    tl.start(1)
    tl.confirm(1)
    tl.advance(1000)
    for s in range(1, kill + 1):
        tl.step(1, s, ms=100 + s % 7)
        if s % every == 0:
            tl.checkpoint(1, s)
    tl.exit(1)
    tl.advance(30)
    tl.fail(1)
    tl.advance(200)
    resume = kill - kill % every
    tl.start(2, resume=resume, reason="restart after worker_crash")
    tl.confirm(2)
    tl.restore(2, resume, "local")
    for s in range(resume + 1, steps + 1):
        tl.step(2, s, ms=100 + s % 5)
        if s % every == 0:
            tl.checkpoint(2, s)
    tl.finish(2)
    return tl


def project(tl: Timeline, db: Path) -> duckdb.DuckDBPyConnection:
    """The run's projection in ``db``, each table's rows as one Arrow batch."""
    con = duckdb.connect(str(db))
    for table, columns in DDL.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")
    rows: dict[type, list[tuple[Any, ...]]] = defaultdict(list)
    for record in tl.records():
        for row in rows_for(record):
            rows[type(row)].append(tuple(row))
    for kind, batch in rows.items():
        into = TABLE_OF[kind]
        con.from_arrow(into.batch(batch)).insert_into(into.name)
    return con


def publish_summary(bootstrap: str, tl: Timeline) -> int:
    """The summary a controller leaves on ``runledger.status`` for the folded run."""
    state: RunState | None = None
    notes = NO_NOTES
    for record in tl.records():
        if record.topic != RUNS:
            continue
        t = apply(state, record.event)
        if t.verdict.accepted and t.state is not None:
            state, notes = t.state, note(notes, record.event)
    assert state is not None
    producer = Producer(client_config(bootstrap, {"partitioner": PARTITIONER}))
    producer.produce(STATUS, key=tl.run_id, value=encode(summarize(state, notes,
                                                                   int(time.time() * 1000))))
    if producer.flush(60) != 0:
        raise RuntimeError(f"the run's summary did not reach {STATUS} on {bootstrap}")
    return state.step


# -- the server ---------------------------------------------------------------------


def start_ui(db: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    runledger = str(Path(sys.executable).parent / "runledger")
    with log.open("wb") as err:
        proc = subprocess.Popen([runledger, "ui", "--port", "0", "--db", str(db), "--json"],
                                env=env, stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.DEVNULL, cwd=REPO_ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()  # {"url": ...} once it listens
    if not line.startswith("{"):
        proc.kill()
        raise RuntimeError(f"runledger ui did not start: {line!r}\n{log.read_text()[-3000:]}")
    return proc, str(json.loads(line)["url"])


def get(url: str) -> tuple[float, int, Any]:
    """Seconds, bytes (gzip, as a browser asks) and the JSON of one GET."""
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as res:
        body = res.read()
        gz = res.headers.get("Content-Encoding") == "gzip"
    elapsed = time.perf_counter() - t0
    text = gzip.decompress(body) if gz else body
    return elapsed, len(body), json.loads(text) if text[:1] in (b"{", b"[") else None


def warm(base: str, run_id: str, timeout_s: float = 90.0) -> None:
    """Until the server's feeds have read the run, then every page's API once."""
    deadline = time.monotonic() + timeout_s
    while True:
        _, _, doc = get(f"{base}/api/runs")
        if any(r["run_id"] == run_id for r in doc["runs"]):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the live view never listed {run_id}: {doc.get('health')}")
        time.sleep(0.5)
    for path in ("", "/sections"):
        get(f"{base}/api/runs/{run_id}{path}")


def api_times(base: str, run_id: str, n: int) -> dict[str, dict[str, float]]:
    out = {}
    for label, path in (("/api/runs", "/api/runs"), ("/api/runs/RUN", f"/api/runs/{run_id}"),
                        ("/api/runs/RUN/sections", f"/api/runs/{run_id}/sections")):
        samples = [get(base + path) for _ in range(n)]
        out[label] = {"p50_ms": 1e3 * statistics.median(s[0] for s in samples),
                      "bytes": float(samples[-1][1])}
    return out


# -- the browser --------------------------------------------------------------------


def load(browser: Any, url: str, marks: dict[str, str], done: str) -> dict[str, Any]:
    """One first visit in a fresh context: its marks (ms) and what it transferred."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        context.add_init_script(MARKS % json.dumps(marks))
        page = context.new_page()
        page.goto(url, wait_until="commit", timeout=60_000)
        page.wait_for_function(f"() => window.__rlMarks && {done!r} in window.__rlMarks",
                               timeout=60_000, polling=10)
        seen: dict[str, Any] = page.evaluate(SENT)
        return seen
    finally:
        context.close()


def pages(base: str, run_id: str, report_path: Path) -> dict[str, tuple[str, dict[str, str], str]]:
    """Page label -> (URL, {mark: selector}, the mark that ends the load)."""
    return {
        "runs page": (f"{base}/", {"first": f'table#runs tr[data-run="{run_id}"]'}, "first"),
        "run page": (f"{base}/runs/{run_id}",
                     {"first": "#run-step[data-step]",
                      "sections": "#charts #timeline"}, "sections"),
        "report (file://)": (report_path.as_uri(), {"first": "#run-id"}, "dcl"),
    }


def measure(browser: Any, table: dict[str, tuple[str, dict[str, str], str]],
            loads: int) -> dict[str, list[dict[str, Any]]]:
    seen: dict[str, list[dict[str, Any]]] = {label: [] for label in table}
    for round_ in range(loads + 1):  # round 0 warms Chromium and the server, not counted
        for label, (url, marks, done) in table.items():
            got = load(browser, url, marks, done)
            if round_ > 0:
                seen[label].append(got)
    return seen


def stats(samples: list[dict[str, Any]], mark: str) -> dict[str, float]:
    values = [float(s["marks"][mark]) for s in samples]
    return {"p50_ms": statistics.median(values), "p90_ms": percentile(values, 90)}


# -- main ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_LOADS} loads per page")
    parser.add_argument("--loads", type=int, default=None,
                        help=f"loads per page (default {FULL_LOADS}, --quick {QUICK_LOADS})")
    parser.add_argument("--steps", type=int, default=STEPS, help="steps of the run")
    parser.add_argument("--bootstrap", default=None,
                        help="an existing cluster (the run's summary goes onto its status topic)")
    args = parser.parse_args(argv)
    loads = args.loads or (QUICK_LOADS if args.quick else FULL_LOADS)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("bench/ui.py needs Playwright for Python: .venv/bin/pip install -e '.[dev]'",
              file=sys.stderr)
        return 2
    if not os.access(CHROMIUM, os.X_OK):
        print(f"bench/ui.py needs Chromium at {CHROMIUM} ($CHROMIUM names another):"
              " scripts/chromium.sh", file=sys.stderr)
        return 2
    machine = machine_info(["playwright", "duckdb", "runledger"])
    print(f"bench/ui.py ({'quick' if args.quick else 'full'}) on {machine['usable_cores']} "
          f"cores, Python {machine['python']}, load average {machine['load_average_1_5_15']}")
    print("Shared machine: numbers are noisy; nothing here asserts on a timing.\n", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="runledger-bench-ui-"))
    report_path = tmp / "report.html"
    stack: Stack | None = None
    ui: subprocess.Popen[bytes] | None = None
    started = time.perf_counter()
    try:
        bootstrap, creds, where, stack = broker(args.bootstrap, tmp, "the summary's writer")
        run_id = f"bench-ui-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        tl = timeline(run_id, args.steps)
        db = tmp / "projection.duckdb"
        con = project(tl, db)
        report_path.write_text(report(con, run_id), encoding="utf-8")
        con.close()
        final_step = publish_summary(bootstrap, tl)
        setup_s = time.perf_counter() - t0
        print(f"   {where}: run {run_id}, {args.steps} steps (final step {final_step}),"
              f" {len(tl.events):,} facts projected, report {report_path.stat().st_size:,}"
              f" bytes; set up in {setup_s:.1f} s; {loads} loads per page\n", flush=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNLEDGER_")}
        env.update({ENV_BOOTSTRAP: bootstrap, ENV_CREDENTIALS: creds,
                    "RUNLEDGER_HOME": str(tmp / "home")})
        ui, base = start_ui(db, env, tmp / "ui.log")
        warm(base, run_id)
        _, _, runs_doc = get(f"{base}/api/runs")
        shown = len(runs_doc["runs"])
        server = api_times(base, run_id, max(loads, 3))
        table = pages(base, run_id, report_path)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                        timeout=120_000)
            try:
                seen = measure(browser, table, loads)
            finally:
                browser.close()
    finally:
        if ui is not None:
            ui.terminate()
            try:
                ui.wait(30)
            except subprocess.TimeoutExpired:
                ui.kill()
                ui.wait()
        if stack is not None:
            stack.down(purge=True)
        report_bytes = report_path.stat().st_size if report_path.is_file() else 0
        shutil.rmtree(tmp, ignore_errors=True)
    return report_results(args, machine, where, run_id, shown, report_bytes, seen, server,
                          loads, time.perf_counter() - started)


def report_results(args: argparse.Namespace, machine: dict[str, Any], where: str, run_id: str,
                   shown: int, report_bytes: int, seen: dict[str, list[dict[str, Any]]],
                   server: dict[str, dict[str, float]], loads: int, elapsed: float) -> int:
    runs, run, base = seen["runs page"], seen["run page"], seen["report (file://)"]
    report_kb = report_bytes / 1024
    first = {"runs page": stats(runs, "first"), "run page": stats(run, "first"),
             "run page, sections": stats(run, "sections"),
             "report: header": stats(base, "first"), "report: parsed": stats(base, "dcl")}
    kb = {"runs page": runs[0]["transfer"] / 1024, "run page": run[0]["transfer"] / 1024,
          "report": report_kb}
    versus = {"runs page": "report: header", "run page": "report: header",
              "run page, sections": "report: parsed"}
    rows = []
    for label, s in first.items():
        b = versus.get(label)
        r = ratio(s["p50_ms"], first[b]["p50_ms"]) if b else None
        rows.append([label, f"{s['p50_ms']:.0f}", f"{s['p90_ms']:.0f}",
                     f"{r:.2f}" if r is not None else "", b or ""])
    print_table(["first render (navigation start to ...)", "p50 ms", "p90 ms", "ratio p50",
                 "baseline"], rows,
                title=f"Time to first render, {loads} cold-cache loads each, warm server,"
                f" {shown} run(s) in the runs table; ratio = live view / static report")
    byte_rows = [[label, f"{kb[label]:.1f}", str(s[0]["requests"]),
                  f"{s[0]['decoded'] / 1024:.1f}"]
                 for label, s in (("runs page", runs), ("run page", run))]
    byte_rows.append(["report", f"{report_kb:.1f}", "1", f"{report_kb:.1f}"])
    print_table(["first load", "KB sent", "requests", "KB decoded"], byte_rows,
                title="Bytes of a first load (headers and gzip bodies as sent; the report:"
                " its file)")
    print_table(["API call (urllib, no browser)", "p50 ms", "bytes (gzip)"],
                [[k, f"{v['p50_ms']:.0f}", f"{v['bytes']:.0f}"] for k, v in server.items()],
                title="The server's own time per call")
    goals = []
    for label in ("runs page", "run page"):
        p50 = first[label]["p50_ms"]
        goals.append([f"{label}: first render p50 < {GOAL_MS:.0f} ms", f"{p50:.0f} ms",
                      "PASS" if p50 < GOAL_MS else "FAIL"])
        goals.append([f"{label}: first load < {GOAL_KB:.0f} KB", f"{kb[label]:.1f} KB",
                      "PASS" if kb[label] < GOAL_KB else "FAIL"])
    print_table(["goal (warm server)", "measured", ""], goals,
                title="Issue goals (informative: nothing fails on a timing)")
    summary = [
        ["runs page first render p50 (ms)", f"{first['runs page']['p50_ms']:.0f}",
         f"{first['report: header']['p50_ms']:.0f}",
         f"{ratio(first['runs page']['p50_ms'], first['report: header']['p50_ms']):.2f}"],
        ["run page first render p50 (ms)", f"{first['run page']['p50_ms']:.0f}",
         f"{first['report: header']['p50_ms']:.0f}",
         f"{ratio(first['run page']['p50_ms'], first['report: header']['p50_ms']):.2f}"],
        ["run page with sections p50 (ms)", f"{first['run page, sections']['p50_ms']:.0f}",
         f"{first['report: parsed']['p50_ms']:.0f}",
         f"{ratio(first['run page, sections']['p50_ms'], first['report: parsed']['p50_ms']):.2f}"],
        ["run page first load (KB)", f"{kb['run page']:.1f}", f"{report_kb:.1f}",
         f"{ratio(kb['run page'], report_kb):.2f}"],
        ["runs page first load (KB)", f"{kb['runs page']:.1f}", f"{report_kb:.1f}",
         f"{ratio(kb['runs page'], report_kb):.2f}"],
    ]
    results = {"benchmark": NAME, "mode": "quick" if args.quick else "full",
               "machine": machine, "where": where, "run_id": run_id, "steps": args.steps,
               "runs_shown": shown, "loads": loads, "first_render": first, "kb": kb,
               "goals": goals, "server": server, "summary": summary,
               "samples": {label: [{k: v for k, v in s.items() if k != "resources"}
                                   for s in samples] for label, samples in seen.items()},
               "resources_first_load": {label: samples[0]["resources"]
                                        for label, samples in seen.items()},
               "elapsed_s": elapsed}
    path = write_results(NAME, results)
    print(f"wrote {path} in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
