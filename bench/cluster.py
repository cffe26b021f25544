"""Benchmark: 1,000 concurrent runs and 10,000 finished ones across 3 controllers, one
killed and one added under load (issue #37's scenario b).

Usage: ``.venv/bin/python bench/cluster.py [--quick] [--concurrent N] [--finished N]``

On a throwaway secure stack (one broker, 6 partitions per co-partitioned
topic), three ``runledger controller`` processes share one group, and
``runledger project`` projects throughout. A fleet of simulated agents and
workers (``bench/cluster_fleet_parts.py`` says exactly what they send, signed
as the real senders sign) first takes ``--finished`` runs through their whole
life (history: the model every controller keeps and replays), then holds
``--concurrent`` runs live: members heartbeat every 2 s, each coordinator
reports a step every 5 s. After a steady window one controller is killed
(SIGKILL: its last transaction stays open until the broker aborts it) and,
once its partitions have moved, a fourth is started and takes its share.

Measured: records offered and absorbed per second, the group's lag, report ->
fact latency (steady, and across the handovers), each handover (kill -> the
first fact on each of its partitions by the next owner, against the documented
bound), ``runledger status RUN --json`` and ``runledger runs --json`` with
11,000 runs on the log, the projector's lag and its catch-up at the end, each
process's CPU and peak memory. Then the log is read back
(``bench/cluster_check_parts.py``): 0 lost and 0 duplicated facts, every
partition's facts written by its owners in the group's turn, every fact
accepted by the fold, and ``runledger audit verify`` over every run's chain.

``--quick`` (``make bench-smoke``): 60 concurrent and 120 finished runs,
shorter windows. Nothing asserts on a timing; the verdicts of the log are
printed and written with the figures to ``bench/results/cluster.json``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

from bench.common import fmt_num, machine_info, percentile, print_table, write_results

# Handover bound (docs/architecture.md §7, "One owner per run"): the group moves a
# silent member's partitions after its session timeout; the next owner decides once
# the dead one's open transaction is aborted, which the broker does after the
# transaction timeout, checking every 10 s; then the members rejoin and it reads the
# backlog (SETTLE_S).
SESSION_S = 10.0
ABORT_CHECK_S = 10.0
SETTLE_S = 5.0
WINDOWS = {True: (10.0, 40.0, 25.0), False: (30.0, 50.0, 30.0)}  # steady, after kill, after add


def bound_s(transaction_timeout_s: float) -> float:
    return max(SESSION_S, transaction_timeout_s + ABORT_CHECK_S) + SETTLE_S


def scenario(concurrent: int, finished: int, quick: bool) -> dict[str, Any]:
    from bench.cluster_check_parts import audit_summary, check_log
    from bench.cluster_fleet_parts import Fleet, Shape, plan
    from bench.cluster_procs_parts import TRANSACTION_TIMEOUT_S, Procs, Timed, cli, hwm_mb
    from bench.cluster_watch_parts import Facts, Group, ProjectorLag, ownership_summary
    from bench.reportkeys import ReportKeys
    from events.codec import default_codec
    from events.kafka.connection import ENV_CREDENTIALS
    from events.signed.signing import SigningKey
    from runledger.stack import Stack

    tag = uuid.uuid4().hex[:6]
    steady_s, after_kill_s, after_add_s = WINDOWS[quick]
    tmp = tempfile.TemporaryDirectory(prefix="runledger-cluster-")
    root = Path(tmp.name)
    stack = Stack(root / "stack")
    info = stack.up()
    codec = default_codec()
    env = {**os.environ, "RUNLEDGER_BOOTSTRAP": info.bootstrap,
           ENV_CREDENTIALS: str(info.credentials or ""), "RUNLEDGER_HOME": str(root / "home")}
    os.environ[ENV_CREDENTIALS] = env[ENV_CREDENTIALS]
    admin = SigningKey.load(info.keys / "admin.key") if info.keys else None
    keys = ReportKeys(info.bootstrap, admin)
    operator = keys.operator("alice")
    shape = Shape(concurrent, finished, partitions=6)
    planned = plan(shape, tag, codec)
    fleet = Fleet(shape, tag, keys, codec, operator, info.bootstrap)
    procs = Procs(env, root, f"cl{tag}-ctl", info.keys / "controller.key" if info.keys else None,
                  shape.silence_s)
    group = Group(info.bootstrap, procs.group)
    facts = Facts(info.bootstrap, codec, fleet, tag)
    fleet.checks.append(facts.trouble)
    out: dict[str, Any] = {"concurrent": concurrent, "finished": finished, "tag": tag,
                           "heartbeat_interval_s": shape.interval_s,
                           "step_every_s": shape.step_every_s,
                           "transaction_timeout_s": TRANSACTION_TIMEOUT_S,
                           "handover_bound_s": bound_s(TRANSACTION_TIMEOUT_S)}
    try:
        group.start()
        facts.start()
        procs.start_projector()
        lag = ProjectorLag(procs.metrics_url)
        lag.start()
        names = [f"cl{tag}-c{i}" for i in (1, 2, 3, 4)]
        for name in names[:3]:
            procs.controller(name)
        fleet.register()
        # A cluster already running: every controller holding its share before any run.
        fleet.spin(lambda: bool(group.samples) and len(
            {w for who in group.samples[-1].owners.values() for w in who}) == 3,
            120, "three controllers holding partitions")
        history = [p for p in planned if not p.live]
        fleet.submit(history)
        print(f"   history: {finished:,} runs through their life ...", flush=True)
        out["history_s"] = fleet.spin(lambda: len(fleet.finished) >= len(history),
                                      120 + finished * 0.2, "history")
        out["history_runs_per_s"] = finished / out["history_s"]
        live = [p for p in planned if p.live]
        fleet.submit(live)
        print(f"   {concurrent:,} live runs ...", flush=True)
        out["live_confirmed_s"] = fleet.spin(
            lambda: sum(r.confirmed and r.planned.live for r in fleet.runs.values())
            >= concurrent, 120 + concurrent * 0.2, "live runs confirmed")
        out.update(steady(fleet, procs, group, env, steady_s, live[0].run_id, cli, Timed))
        out.update(handovers(fleet, procs, group, facts, names, after_kill_s, after_add_s))
        fleet.stepping = False
        try:  # what never comes is counted from the log below, not raised here
            fleet.spin(lambda: len(fleet.lat.seen) >= len(fleet.lat.sent), 60,
                       "every step's fact")
        except RuntimeError as exc:
            out["drain"] = str(exc)
        out["report_to_fact_all"] = fleet.lat.summary(list(fleet.lat.sent))
        out["processes"] = procs.stop_controllers()
        began = time.monotonic()
        while (not lag.samples or lag.samples[-1][1] > 0) and time.monotonic() - began < 300:
            time.sleep(1.0)
        out["projector_caught_up_s"] = time.monotonic() - began
        out["projector_lag"] = {
            **lag.quantiles(),
            "samples": len(lag.samples), "last": [n for _, n in lag.samples[-5:]],
            "scrape_s_p50": percentile(lag.scrapes_s, 50) if lag.scrapes_s else None,
            "scrape_s_max": max(lag.scrapes_s, default=None)}
        lag.stop()
        out["processes"].update(procs.stop_projector())
        out["processes"]["fleet"] = {"peak_rss_mb": resource.getrusage(
            resource.RUSAGE_SELF).ru_maxrss / 1024}
        broker = info.brokers[0].pid
        out["processes"]["broker"] = {"peak_rss_mb": hwm_mb(broker) if broker else None}
        group.stop()
        facts.stop()
        fleet.close()
        out["ownership"] = ownership_summary(group.samples)
        print("   reading the log back ...", flush=True)
        out["log"] = check_log(info.bootstrap, fleet, out["ownership"]["owners_in_turn"])
        audit = Timed(cli("audit", "verify", "--json"), env)
        audit.run()
        out["audit"] = {**audit_summary(audit.answer), "took_s": audit.took_s}
    finally:
        procs.stop_controllers()
        procs.stop_projector()
        stack.down(purge=True)
        # The processes' logs outlive the stack: a verdict that is not 0 is read there.
        kept = Path(tempfile.gettempdir()) / f"runledger-cluster-{tag}-logs"
        kept.mkdir(exist_ok=True)
        for log in root.glob("*.log"):
            shutil.copy(log, kept / log.name)
        out["logs"] = str(kept)
        tmp.cleanup()
    return out


def _window(fleet: Any, first: int, last: int) -> dict[str, Any]:
    """Report -> fact of the steps sent between two counts of steps sent."""
    ids = list(fleet.lat.sent)[first:last]
    return dict(fleet.lat.summary(ids))


def steady(fleet: Any, procs: Any, group: Any, env: dict[str, str], steady_s: float,
           run_id: str, cli: Any, timed: Any) -> dict[str, Any]:
    """The steady window: rates, lag, CPU per controller, report -> fact; then the user's
    ``status`` and ``runs`` beside the fleet."""
    from bench.cluster_procs_parts import cpu_s
    from bench.cluster_watch_parts import bucket_quantiles, scrape, summed

    pids = {n: c.proc.pid for n, c in procs.controllers.items() if c.proc.poll() is None}
    urls = [c.metrics_url for n, c in procs.controllers.items() if n in pids]
    pages0 = [scrape(u) for u in urls]
    t0, cpu0, offered0, sent0 = time.monotonic(), {n: cpu_s(p) for n, p in pids.items()}, \
        fleet.offered, len(fleet.lat.sent)
    fleet.spin(lambda: time.monotonic() - t0 >= steady_s, steady_s + 60, "steady window")
    t1 = time.monotonic()
    pages1 = [scrape(u) for u in urls]
    inside = bucket_quantiles(summed(pages0), summed(pages1))
    pages = [p for p in pages0 + pages1 if p is not None]
    cpu = {n: (cpu_s(p) - cpu0[n]) / (t1 - t0) for n, p in pids.items()}
    offered = (fleet.offered - offered0) / (t1 - t0)
    sent1 = len(fleet.lat.sent)
    # Then the user's commands, beside the fleet (not in the steady window: two Python
    # processes starting on 2 cores would be billed to the controllers' latency).
    status = timed(cli("status", run_id, "--json"), env)
    runs = timed(cli("runs", "--json"), env)
    status.start()
    runs.start()
    fleet.spin(lambda: not status.is_alive() and not runs.is_alive(), 600, "status and runs")
    samples = group.between(t0, t1)
    lags = [s.ends - s.committed for s in samples]
    absorbed = ((samples[-1].committed - samples[0].committed) / (samples[-1].at - samples[0].at)
                if len(samples) > 1 else None)
    listed = runs.answer if isinstance(runs.answer, list) else (runs.answer or {}).get("runs", [])
    return {
        "steady_s": t1 - t0, "offered_per_s": offered, "absorbed_per_s": absorbed,
        "group_lag": {"p50": percentile(lags, 50) if lags else None,
                      "p99": percentile(lags, 99) if lags else None,
                      "last_half_max": max(lags[len(lags) // 2:], default=None)},
        "controller_cpu_share": cpu,
        "report_to_fact_steady": _window(fleet, sent0, sent1),
        "controllers_report_to_commit_steady": inside,
        "controller_scrape_s_max": max((p.took_s for p in pages), default=None),
        "controller_scrape_lines_max": max((p.lines for p in pages), default=None),
        "status_s": status.took_s, "status_error": status.error,
        "runs_s": runs.took_s, "runs_listed": len(listed), "runs_error": runs.error,
    }


def handovers(fleet: Any, procs: Any, group: Any, facts: Any, names: list[str],
              after_kill_s: float, after_add_s: float) -> dict[str, Any]:
    """Kill the second controller, then add a fourth: when each moved partition's next
    owner appended its first fact, and report -> fact across each window."""
    from bench.cluster_procs_parts import TRANSACTION_TIMEOUT_S

    victim = names[1]
    before = group.samples[-1].owners
    theirs = sorted(p for p, who in before.items() if who == [victim])
    n_kill = len(fleet.lat.sent)
    t_kill = procs.kill(victim)
    print(f"   killed {victim} (partitions {theirs}) ...", flush=True)

    def taken() -> bool:
        return all(facts.first_by_other(p, victim, t_kill) is not None for p in theirs)

    fleet.spin(lambda: taken() and time.monotonic() - t_kill >= after_kill_s,
               bound_s(TRANSACTION_TIMEOUT_S) + 180, "the killed controller's partitions taken")
    kill = {p: facts.first_by_other(p, victim, t_kill) - t_kill for p in theirs}
    moved_at = next((s.at - t_kill for s in group.samples
                     if s.at > t_kill and not any(w == [victim] for w in s.owners.values())),
                    None)
    mid = group.samples[-1].owners
    n_add = len(fleet.lat.sent)
    t_add = time.monotonic()
    procs.controller(names[3])
    print(f"   added {names[3]} ...", flush=True)

    def holds() -> bool:
        return any(w == [names[3]] for w in group.samples[-1].owners.values())

    # It first replays runs (every run's facts) and joins the group; its window counts
    # from the moment it holds partitions.
    fleet.spin(holds, 300, "the added controller holding partitions")
    joined = time.monotonic()
    fleet.spin(lambda: time.monotonic() - joined >= after_add_s, after_add_s + 60,
               "the added controller's window")
    after = group.samples[-1].owners
    moved = sorted(p for p, who in after.items() if who != mid.get(p))
    # From the moment the group showed it holding partitions (sampled every second).
    add = {p: (lambda at: None if at is None else max(0.0, at - joined))(
        facts.first_by_other(p, mid[p][0], t_add)) for p in moved if mid.get(p)}
    n_end = len(fleet.lat.sent)
    return {
        "killed": victim, "killed_partitions": theirs,
        "kill_group_moved_s": moved_at,
        "kill_handover_s": kill, "kill_handover_max_s": max(kill.values(), default=None),
        "report_to_fact_kill_window": _window(fleet, n_kill, n_add),
        "added": names[3], "add_joined_s": joined - t_add, "add_moved_partitions": moved,
        "add_handover_s": add,
        "add_handover_max_s": max((v for v in add.values() if v is not None), default=None),
        "report_to_fact_add_window": _window(fleet, n_add, n_end),
        "owners": {"before": before, "after_kill": mid, "after_add": after},
    }


def print_result(r: dict[str, Any]) -> None:
    def n(v: Any, digits: int = 0) -> str:
        return "-" if v is None else fmt_num(float(v), digits)

    log, audit = r["log"], r["audit"]
    cpu = r["controller_cpu_share"]
    rows = [
        ["history: runs through their life, per s", n(r["history_runs_per_s"], 1)],
        ["live runs confirmed in, s", n(r["live_confirmed_s"], 1)],
        ["records offered /s (steady)", n(r["offered_per_s"])],
        ["records absorbed by the group /s (requests + reports)", n(r["absorbed_per_s"])],
        ["group lag p50 / p99 (records)",
         f"{n(r['group_lag']['p50'])} / {n(r['group_lag']['p99'])}"],
        ["controller CPU share, steady (%)",
         " / ".join(f"{v * 100:.0f}" for v in cpu.values())],
        ["report -> fact p50 / p99 ms, steady",
         f"{n(r['report_to_fact_steady']['p50_ms'], 1)} / "
         f"{n(r['report_to_fact_steady']['p99_ms'], 1)}"],
        ["  inside the controllers, report -> commit p50 / p90 / p99 (bucket bound), s",
         " / ".join(f"<= {n(r['controllers_report_to_commit_steady'][k], 3)}"
                    for k in ("p50_le_s", "p90_le_s", "p99_le_s"))],
        ["  a controller's /metrics scrape, s (max) / lines",
         f"{n(r['controller_scrape_s_max'], 2)} / {n(r['controller_scrape_lines_max'])}"],
        ["kill: group moved its partitions after, s", n(r["kill_group_moved_s"], 1)],
        [f"kill: next owner's first fact, s (max; bound {r['handover_bound_s']:g})",
         n(r["kill_handover_max_s"], 1)],
        ["kill window: report -> fact max, s",
         n(r["report_to_fact_kill_window"]["max_ms"] / 1e3, 1)],
        ["add: the new controller held partitions after, s (its start and replay)",
         n(r["add_joined_s"], 1)],
        ["add: next owner's first fact after that, s (max)", n(r["add_handover_max_s"], 1)],
        ["add window: report -> fact max, s",
         n(r["report_to_fact_add_window"]["max_ms"] / 1e3, 1)],
        ["`runledger status RUN --json`, s", n(r["status_s"], 2)],
        [f"`runledger runs --json`, s ({r['runs_listed']:,} listed)", n(r["runs_s"], 2)],
        ["projector lag p50 / p99 / max (records)",
         f"{n(r['projector_lag']['p50'])} / {n(r['projector_lag']['p99'])} / "
         f"{n(r['projector_lag']['max'])}"],
        ["projector caught up after the fleet stopped, s", n(r["projector_caught_up_s"], 1)],
        ["projector /metrics scrape p50 / max, s (samples)",
         f"{n(r['projector_lag']['scrape_s_p50'], 2)} / {n(r['projector_lag']['scrape_s_max'], 2)}"
         f" ({r['projector_lag']['samples']})"],
        *([f"peak RSS MB: {k}", n(v.get("peak_rss_mb"))] for k, v in r["processes"].items()),
        ["facts on runledger.runs / runs", f"{log['facts']:,} / {log['runs']:,}"],
        ["steps reported / without a fact", f"{log['steps_reported']:,} / "
                                            f"{log['steps_without_fact']}"],
        ["fact ids written twice", str(log["duplicated_fact_ids"])],
        ["history runs not finished exactly once", str(log["history_not_finished_once"])],
        ["live runs restarted or failed", str(log["live_restarted_or_failed"])],
        *([f"  failure: {what}", str(count)] for what, count in log["failures"]),
        ["partitions held by two members at once (group)",
         str(len(r["ownership"]["held_by_two_at_once"]))],
        ["partitions whose writers went out of the group's turn",
         str(len(log["writers_out_of_turn"]))],
        ["facts the fold refused", str(len(log["fold_refused"]))],
        ["foreign_writer alerts", str(log["foreign_writer_alerts"])],
        [f"runledger audit verify: runs / problems ({n(audit['took_s'], 1)} s)",
         f"{audit['runs']:,} / {audit['problem_count']}"],
    ]
    print_table([f"{r['concurrent']:,} live + {r['finished']:,} finished runs, "
                 "3 controllers, one killed, one added", "measured"], rows)
    print(f"   the processes' logs: {r['logs']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="60 concurrent and 120 finished runs, shorter windows")
    parser.add_argument("--concurrent", type=int, help="live runs (default 1,000)")
    parser.add_argument("--finished", type=int, help="history runs (default 10,000)")
    args = parser.parse_args(argv)
    concurrent = args.concurrent or (60 if args.quick else 1_000)
    finished = args.finished if args.finished is not None else (120 if args.quick else 10_000)
    result = scenario(concurrent, finished, args.quick)
    # Against what the same run offered and promised: 1.00 keeps up; under 1 is inside.
    if result.get("absorbed_per_s") and result.get("offered_per_s"):
        result["ratio_absorbed_to_offered"] = result["absorbed_per_s"] / result["offered_per_s"]
    if result.get("kill_handover_max_s") is not None:
        result["ratio_handover_to_bound"] = (result["kill_handover_max_s"]
                                             / result["handover_bound_s"])
    print_result(result)
    write_results("cluster", {"machine": machine_info(), "quick": args.quick, **result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
