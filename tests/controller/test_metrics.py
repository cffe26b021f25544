"""The controller's ``/metrics``: the pure exposition of a model, the HTTP server, and a
real controller (private broker, agent, test workers) scraped while a run goes by."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import replace
from typing import Any

import pytest

from controller.inventory import Inventory, Node
from controller.latency import BUCKETS_S, Histogram, report_delays
from controller.metrics import FINISHED_SHOWN_MS, NODE_STATES, ControllerCollector, families
from controller.model import Model, Tracked
from controller.ownership import Ownership
from controller.run_decide import NODE_TIMEOUT_MS
from controller.runplan import RunPlan, plan_from_submission
from controller.service import ControllerService, LoopStats
from events.kafka.clients import EventProducer
from events.kafka.consume import read_log
from events.kafka.runkeys import send_report
from events.model import Member
from events.record import Record
from events.shelf import Shelf
from events.state import Checkpoint, RunState, Status
from events.topics import COMMANDS, REPORTS, REQUESTS, RUNS
from runledger.metricsserver import MetricsServer, parse_address
from tests.e2e.harness import PY, Cluster, of_type, spec
from tests.events.builders import Ev
from tests.promtext import Labels, Samples, named, render, scrape, until

NOW = 1_700_000_000_000


def of_run(got: Samples, name: str, run: str) -> dict[Labels, float]:
    """One metric's samples for one run, keyed by their other labels."""
    out = {}
    for (n, labels), v in got.items():
        if n == name and ("run", run) in labels:
            out[tuple(kv for kv in labels if kv[0] != "run")] = v
    return out


def one(got: Samples, name: str, run: str) -> float:
    (value,) = of_run(got, name, run).values()
    return value


def state(run: str, status: Status, **kw: Any) -> RunState:
    base = RunState(run_id=run, status=status, spec_digest="sha256:s", principal="alice",
                    world_size=2, dataset_id=None, submitted_at=NOW - 60_000,
                    updated_at=NOW - 1_000)
    return replace(base, **kw)


def model_of(runs: dict[str, RunState]) -> Model:
    """A model holding these states: live runs live, finished ones on the shelf."""
    plan = RunPlan(world_size=2, argv=("train",))
    done = {k: Tracked(s, plan) for k, s in runs.items() if s.status.terminal}
    return Model(since=0, live={k: Tracked(s, plan) for k, s in runs.items() if k not in done},
                 done=Shelf[Tracked]().with_(done))


CKPT = Checkpoint(step=40, manifest_path="m40", manifest_digest="d40", generation=2,
                  committed_at=NOW - 30_000)


# -- pure --------------------------------------------------------------------


def test_a_live_run_has_progress_heartbeats_and_checkpoint_series() -> None:
    live = state("run-a", Status.RUNNING, generation=2, step=57, tokens=57 * 1024,
                 checkpoint=CKPT, heartbeats={"r0": NOW - 1_500, "r1": NOW - 250},
                 failure_count=1, rejections=3, alerts=2,
                 open_alerts={"stall/r1": "e1", "loss_spike": "e2"})
    got = render(families(model_of({"run-a": live}), LoopStats(), NOW))
    assert of_run(got, "runledger_run_status", "run-a") == {(("status", "Running"),): 1}
    assert one(got, "runledger_run_generation", "run-a") == 2
    assert one(got, "runledger_run_step", "run-a") == 57
    assert one(got, "runledger_run_tokens_total", "run-a") == 57 * 1024
    assert of_run(got, "runledger_run_heartbeat_age_seconds", "run-a") == {
        (("member", "r0"),): 1.5, (("member", "r1"),): 0.25}
    assert one(got, "runledger_run_checkpoint_step", "run-a") == 40
    assert one(got, "runledger_run_checkpoint_lag_steps", "run-a") == 17
    assert one(got, "runledger_run_checkpoint_age_seconds", "run-a") == 30
    assert one(got, "runledger_run_failures_total", "run-a") == 1
    assert one(got, "runledger_run_rejections_total", "run-a") == 3
    assert one(got, "runledger_run_open_alerts", "run-a") == 2
    assert of_run(got, "runledger_run_alert_open", "run-a") == {
        (("alert", "loss_spike"),): 1, (("alert", "stall/r1"),): 1}


def test_a_terminal_run_keeps_its_status_and_drops_its_clock_series() -> None:
    done = state("run-b", Status.SUCCEEDED, generation=1, step=10, checkpoint=CKPT,
                 heartbeats={"r0": NOW - 5_000})
    got = render(families(model_of({"run-b": done}), LoopStats(), NOW))
    assert of_run(got, "runledger_run_status", "run-b") == {(("status", "Succeeded"),): 1}
    assert one(got, "runledger_run_step", "run-b") == 10
    assert of_run(got, "runledger_run_heartbeat_age_seconds", "run-b") == {}
    assert of_run(got, "runledger_run_checkpoint_age_seconds", "run-b") == {}


def test_a_scrape_shows_the_runs_this_controller_decides_and_finished_ones_ten_minutes() -> None:
    """Every controller's model holds every run: each exports only its own, so a group
    exports a run once; a finished run's series go FINISHED_SHOWN_MS after its end (its
    history is the projection's), while the counts by status still hold every run."""
    runs = {"live": state("live", Status.RUNNING),
            "just-done": state("just-done", Status.SUCCEEDED,
                               updated_at=NOW - FINISHED_SHOWN_MS),
            "long-done": state("long-done", Status.FAILED,
                               updated_at=NOW - FINISHED_SHOWN_MS - 1),
            "theirs": state("theirs", Status.RUNNING)}
    got = render(families(model_of(runs), LoopStats(), NOW, lambda run: run != "theirs"))
    exported = {dict(k)["run"] for (n, k), _ in got.items() if n == "runledger_run_status"}
    assert exported == {"live", "just-done"}
    by_status = {dict(k)["status"]: v for (n, k), v in got.items()
                 if n == "runledger_controller_runs" and v}
    assert by_status == {"Running": 2, "Succeeded": 1, "Failed": 1}
    # No owner given (a pure caller): every run shown within its window.
    every = render(families(model_of(runs), LoopStats(), NOW))
    assert {dict(k)["run"] for (n, k), _ in every.items() if n == "runledger_run_status"} \
        == {"live", "just-done", "theirs"}


def test_a_collector_before_its_partitions_are_assigned_exports_no_run() -> None:
    class Service:
        model = model_of({"live": state("live", Status.RUNNING)})
        stats = LoopStats()
        ownership: Ownership | None = None

    collector = ControllerCollector(Service(), clock=lambda: NOW)  # type: ignore[arg-type]
    got = render(list(collector.collect()))
    assert not [n for (n, _), _ in got.items() if n == "runledger_run_status"]
    assert got[("runledger_controller_runs", (("status", "Running"),))] == 1
    Service.ownership = Ownership("c1", 1, frozenset({0}), ready=frozenset({0}))
    got = render(list(collector.collect()))
    assert got[("runledger_run_status", (("run", "live"), ("status", "Running")))] == 1


def test_no_checkpoint_means_every_step_is_lag_and_future_heartbeats_are_age_0() -> None:
    fresh = state("run-c", Status.STARTING, generation=1, step=5,
                  heartbeats={"r0": NOW + 2_000})  # a worker clock slightly ahead of ours
    got = render(families(model_of({"run-c": fresh}), LoopStats(), NOW))
    assert one(got, "runledger_run_checkpoint_lag_steps", "run-c") == 5
    assert of_run(got, "runledger_run_checkpoint_step", "run-c") == {}
    assert of_run(got, "runledger_run_checkpoint_age_seconds", "run-c") == {}
    assert of_run(got, "runledger_run_heartbeat_age_seconds", "run-c") == {
        (("member", "r0"),): 0}


def test_controller_series_count_runs_by_status_and_the_loop() -> None:
    runs = {"a": state("a", Status.RUNNING), "b": state("b", Status.QUEUED),
            "c": state("c", Status.QUEUED), "d": state("d", Status.FAILED)}
    stats = LoopStats(inputs=11, facts=7, commands=2, ticks=40, last_tick_s=0.125)
    got = render(families(model_of(runs), stats, NOW))
    by_status = {dict(k)["status"]: v for (n, k), v in got.items()
                 if n == "runledger_controller_runs"}
    assert by_status == {s.value: {"Running": 1, "Queued": 2, "Failed": 1}.get(s.value, 0)
                         for s in Status}
    assert got[("runledger_controller_inputs_total", ())] == 11
    assert got[("runledger_controller_facts_appended_total", ())] == 7
    assert got[("runledger_controller_commands_appended_total", ())] == 2
    assert got[("runledger_controller_ticks_total", ())] == 40
    assert got[("runledger_controller_last_tick_seconds", ())] == 0.125
    assert got[("runledger_controller_model_loaded", ())] == 1
    assert got[("runledger_controller_trusts_unsigned", ())] == 0  # the default


def test_a_controller_started_trust_unsigned_says_so_on_every_scrape() -> None:
    got = render(families(None, LoopStats(trusts_unsigned=True), NOW))
    assert got[("runledger_controller_trusts_unsigned", ())] == 1
    service = ControllerService("127.0.0.1:1", plan_from_submission,
                                require_signatures=False)  # never run
    assert service.stats.trusts_unsigned
    assert not ControllerService("127.0.0.1:1", plan_from_submission).stats.trusts_unsigned


def test_before_the_model_is_rebuilt_there_are_no_run_series() -> None:
    got = render(families(None, LoopStats(), NOW))
    assert got[("runledger_controller_model_loaded", ())] == 0
    assert not [n for n, _ in got if n.startswith("runledger_run_")]


# -- nodes ------------------------------------------------------------------------


def nodes_model() -> Model:
    """One node in each state, judged at NOW, and a failure count on two of them."""
    fresh = NOW - 1_000
    nodes = {
        "a": Node("a", 4, "rack-1", fresh, busy_slots=3),
        "b": Node("b", 2, "rack-1", fresh, cordon="cordon", cordon_reason="disk"),
        "c": Node("c", 2, "rack-2", fresh, cordon="drain", busy_slots=1),
        "d": Node("d", 2, "rack-2", fresh, quarantined=True, quarantine_reason="xid"),
        "e": Node("e", 8, "rack-3", NOW - NODE_TIMEOUT_MS - 1),  # silent past the timeout
        "f": Node("f", 2, "rack-3", fresh),
    }
    return Model(since=0, inventory=Inventory(nodes), node_failures={"d": 3, "a": 1})


def test_nodes_by_state_and_per_node() -> None:
    got = render(families(nodes_model(), LoopStats(), NOW))
    assert {dict(k)["state"]: v for k, v in named(got, "runledger_controller_nodes").items()} \
        == {"ready": 2, "cordoned": 1, "draining": 1, "quarantined": 1, "lost": 1}
    assert {tuple(sorted(dict(k).items())): v
            for k, v in named(got, "runledger_node_state").items()} == {
        (("node", n), ("state", s)): 1 for n, s in (
            ("a", "ready"), ("b", "cordoned"), ("c", "draining"), ("d", "quarantined"),
            ("e", "lost"), ("f", "ready"))}
    per_node = {name: {dict(k)["node"]: v for k, v in named(got, name).items()}
                for name in ("runledger_node_slots", "runledger_node_busy_slots",
                             "runledger_node_failures", "runledger_node_heartbeat_age_seconds")}
    assert per_node["runledger_node_slots"] == {"a": 4, "b": 2, "c": 2, "d": 2, "e": 8, "f": 2}
    assert per_node["runledger_node_busy_slots"]["a"] == 3
    assert per_node["runledger_node_failures"] == {"a": 1, "b": 0, "c": 0, "d": 3, "e": 0,
                                                   "f": 0}
    assert per_node["runledger_node_heartbeat_age_seconds"]["a"] == 1.0
    assert per_node["runledger_node_heartbeat_age_seconds"]["e"] == (NODE_TIMEOUT_MS + 1) / 1000


def test_lost_is_judged_by_the_scrape_clock_and_no_nodes_is_every_state_at_0() -> None:
    service = ControllerService("127.0.0.1:1", plan_from_submission)  # never run
    service.model = nodes_model()
    now = [NOW]
    collector = ControllerCollector(service, clock=lambda: now[0])
    server = MetricsServer(collector, "127.0.0.1", 0)
    try:
        ready = ("runledger_node_state", (("node", "a"), ("state", "ready")))
        assert scrape(server.url)[ready] == 1
        now[0] = NOW + NODE_TIMEOUT_MS  # a's last heartbeat is now past the timeout
        got = scrape(server.url)
        assert ready not in got
        assert got[("runledger_node_state", (("node", "a"), ("state", "lost")))] == 1
        assert got[("runledger_controller_nodes", (("state", "lost"),))] == 3  # a, e, f
    finally:
        server.close()
    for model in (None, Model(since=0)):
        got = render(families(model, LoopStats(), NOW))
        assert named(got, "runledger_controller_nodes") == {
            (("state", s),): 0 for s in NODE_STATES}
        assert not named(got, "runledger_node_state")


# -- report to fact ---------------------------------------------------------------


def record(topic: str, occurred_at: int) -> Record:
    event = Ev("run-x", start=occurred_at, tick=0).heartbeat(1)
    return Record(topic, 0, 0, occurred_at, event, 1)


def test_report_delays_count_reports_only_and_clamp_a_clock_ahead_to_0() -> None:
    records = [record(REPORTS, NOW - 40), record(REQUESTS, NOW - 5_000),
               record(REPORTS, NOW + 2_000), record(REPORTS, NOW - 3_000)]
    assert report_delays(records, NOW) == [0.04, 0.0, 3.0]
    assert report_delays([], NOW) == []


def test_the_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = Histogram()
    h.observe_all([0.001, 0.0011, 0.04, 3.0, -1.0, 61.0])
    counts = h.snapshot()
    assert counts.bounds == BUCKETS_S and counts.bounds[0] == 0.001 and counts.bounds[-1] == 60
    by_bound = dict(zip(counts.bounds, counts.cumulative, strict=False))
    # -1 clamps to 0 and 0.001 lies on the first bound: both in le="0.001".
    assert by_bound[0.001] == 2
    assert by_bound[0.0025] == 3
    assert by_bound[0.025] == 3 and by_bound[0.05] == 4
    assert by_bound[2.5] == 4 and by_bound[5.0] == 5 and by_bound[60.0] == 5
    assert counts.count == 6  # +Inf holds 61 s too
    assert counts.sum == pytest.approx(0.001 + 0.0011 + 0.04 + 3.0 + 61.0)


def test_the_loop_observes_each_report_at_commit_and_a_scrape_exposes_it() -> None:
    stats = LoopStats()
    stats.report_to_fact.observe_all(report_delays(
        [record(REPORTS, NOW - 7), record(REPORTS, NOW - 700), record(REQUESTS, NOW - 70)],
        NOW))
    got = render(families(None, stats, NOW))
    name = "runledger_controller_report_to_fact_seconds"
    buckets = {dict(k)["le"]: v for k, v in named(got, f"{name}_bucket").items()}
    assert buckets["0.005"] == 0 and buckets["0.01"] == 1 and buckets["0.5"] == 1
    assert buckets["1.0"] == 2 and buckets["+Inf"] == 2
    assert len(buckets) == len(BUCKETS_S) + 1
    assert got[(f"{name}_count", ())] == 2
    assert got[(f"{name}_sum", ())] == pytest.approx(0.707)


def test_addresses() -> None:
    assert parse_address("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_address("0.0.0.0:0") == ("0.0.0.0", 0)
    assert parse_address(":9464") == ("127.0.0.1", 9464)
    assert parse_address("[::1]:0") == ("::1", 0)
    assert parse_address(":0") == ("127.0.0.1", 0)
    assert parse_address("9464") == ("127.0.0.1", 9464)
    for bad in ("localhost", "127.0.0.1:-1", "127.0.0.1:65536", "", "127.0.0.1:http",
                "127.0.0.1:70000", "127.0.0.1:"):
        with pytest.raises(ValueError):
            parse_address(bad)


def test_the_server_binds_an_ephemeral_port_and_serves_a_service_snapshot() -> None:
    service = ControllerService("127.0.0.1:1", plan_from_submission)  # never run
    service.model = model_of({"run-d": state("run-d", Status.RUNNING,
                                                        heartbeats={"r0": NOW - 100})})
    service.ownership = Ownership("c1", 1, frozenset({0}), ready=frozenset({0}))  # every run
    service.stats.ticks = 3
    server = MetricsServer(ControllerCollector(service, clock=lambda: NOW), "127.0.0.1", 0)
    try:
        host, port = server.address
        assert host == "127.0.0.1" and port > 0
        got = scrape(server.url)
        assert of_run(got, "runledger_run_heartbeat_age_seconds", "run-d") == {
            (("member", "r0"),): 0.1}
        assert got[("runledger_controller_ticks_total", ())] == 3
        service.model = Model(since=0)  # the loop swaps models; the next scrape sees it
        assert not of_run(scrape(server.url), "runledger_run_status", "run-d")
    finally:
        server.close()


def test_a_bad_metrics_address_is_a_usage_error() -> None:
    done = subprocess.run(
        [PY, "-m", "runledger.cli", "controller", "--unsigned", "--metrics", "127.0.0.1:http"],
        env={**os.environ, "RUNLEDGER_BOOTSTRAP": "127.0.0.1:1"}, capture_output=True,
        text=True, timeout=60)
    assert done.returncode == 2
    assert "--metrics" in done.stderr and "HOST:PORT" in done.stderr


# -- a real controller -----------------------------------------------------------


def start_controller(cluster: Cluster) -> tuple[subprocess.Popen[bytes], str]:
    """A controller with ``--metrics 127.0.0.1:0``, and the URL it printed."""
    log = cluster.work / "controller.log"
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            [PY, "-m", "runledger.cli", "controller", "--transactional-id", "ctl", "--group",
             "ctl", "--tick", "0.1", "--signing-key", str(cluster.controller_key_file),
             "--metrics", "127.0.0.1:0"],
            env=cluster.env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    cluster.procs.append(proc)  # stopped by the fixture, whatever happens
    line = r"^metrics at (http://127\.0\.0\.1:(\d+)/metrics)$"
    url = until(lambda: (m.group(1) if (m := re.search(line, log.read_text(), re.M))
                         else None), 60, "the metrics line")
    assert not url.endswith(":0/metrics")
    return proc, url


def propose_checkpoint(cluster: Cluster, run: str, gen: int, members: tuple[Member, ...],
                       step: int) -> None:
    """What a coordinator sends for a checkpoint: every member's shard, then the manifest,
    each signed with the run key its node's agent would give it."""
    p = EventProducer(cluster.bootstrap)
    ev = Ev(run, start=int(time.time() * 1000), tick=0)
    for m in members:
        send_report(p, ev.shard(gen, step, m.logical_id, path=f"ckpt/{step}/{m.logical_id}",
                                bytes=1, crc32c=0, producer=f"worker/{run}/{m.logical_id}",
                                event_id=f"{run}/g{gen}/{m.logical_id}/shard/{step}"),
                    cluster.run_key(run, gen, m.node))
    send_report(p, ev.proposed(gen, step, manifest_path=f"ckpt/{step}/m.json",
                               manifest_digest="sha256:" + "cd" * 32, dataset_id=None,
                               producer=f"worker/{run}/r0",
                               event_id=f"{run}/g{gen}/manifest/{step}"),
                cluster.run_key(run, gen, members[0].node))
    p.flush()


@pytest.mark.kafka
@pytest.mark.e2e
def test_a_controller_serves_a_run_from_running_to_succeeded(cluster: Cluster) -> None:
    proc, url = start_controller(cluster)
    until(lambda: scrape(url).get(("runledger_controller_model_loaded", ())) == 1 or None,
          60, "the model rebuilt")
    cluster.agent("n1", 2)
    run = cluster.submit(spec("metrics", ["--steps", "40", "--step-time", "0.15"]))

    facts = cluster.wait_facts(
        run, lambda f: bool(of_type(f, "MembershipConfirmed"))
        and len(of_type(f, "StepCommitted")) >= 3, what="running with progress")
    (started,) = of_type(facts, "GenerationStarted")
    members = tuple(sorted(started.members, key=lambda m: m.logical_id))
    got = until(lambda: (s if of_run(s := scrape(url), "runledger_run_status", run)
                         == {(("status", "Running"),): 1} else None), 30, "Running")
    assert one(got, "runledger_run_generation", run) == 1
    step = one(got, "runledger_run_step", run)
    assert step >= 3
    assert one(got, "runledger_run_tokens_total", run) == step * 1024  # the test worker's rate
    assert one(got, "runledger_run_checkpoint_lag_steps", run) == step  # nothing committed
    ages = of_run(got, "runledger_run_heartbeat_age_seconds", run)
    assert set(ages) == {(("member", m.logical_id),) for m in members}
    assert all(0 <= age < 3.0 for age in ages.values())  # the spec's heartbeat timeout

    propose_checkpoint(cluster, run, 1, members, 2)
    cluster.wait_facts(run, lambda f: bool(of_type(f, "ManifestCommitted")),
                       what="the checkpoint committed")
    got = until(lambda: (s if of_run(s := scrape(url), "runledger_run_checkpoint_step", run)
                         else None), 30, "the checkpoint series")
    assert one(got, "runledger_run_checkpoint_step", run) == 2
    assert one(got, "runledger_run_checkpoint_lag_steps", run) == (
        one(got, "runledger_run_step", run) - 2)
    assert 0 <= one(got, "runledger_run_checkpoint_age_seconds", run) < 30

    facts = cluster.wait_facts(
        run, lambda f: any(e.event_type == "RunFinished" for e in f), timeout=90,
        what="the run finished")
    (finished,) = of_type(facts, "RunFinished")
    assert finished.outcome == "succeeded"
    last_step = max(e.step for e in of_type(facts, "StepCommitted"))
    got = until(lambda: (s if of_run(s := scrape(url), "runledger_run_status", run)
                         == {(("status", "Succeeded"),): 1} else None), 30, "Succeeded")
    assert one(got, "runledger_run_step", run) == last_step == 40
    assert one(got, "runledger_run_checkpoint_lag_steps", run) == 38
    assert one(got, "runledger_run_failures_total", run) == 0
    assert one(got, "runledger_run_rejections_total", run) == 0
    assert one(got, "runledger_run_open_alerts", run) == 0
    # Finished: the per-member and clock-driven series are gone, the status stays.
    assert of_run(got, "runledger_run_heartbeat_age_seconds", run) == {}
    assert of_run(got, "runledger_run_checkpoint_age_seconds", run) == {}
    assert got[("runledger_controller_runs", (("status", "Succeeded"),))] == 1
    assert got[("runledger_controller_inputs_total", ())] > 0
    assert got[("runledger_controller_ticks_total", ())] > 0
    assert got[("runledger_controller_last_tick_seconds", ())] >= 0
    # Its agent's node, heard from within the node timeout.
    assert got[("runledger_node_state", (("node", "n1"), ("state", "ready")))] == 1
    assert got[("runledger_controller_nodes", (("state", "ready"),))] == 1
    assert got[("runledger_node_slots", (("node", "n1"),))] == 2

    # This controller wrote every record of the private runs and commands topics.
    def appended_all() -> bool | None:
        s = scrape(url)
        return (s[("runledger_controller_facts_appended_total", ())]
                == len(list(read_log(cluster.bootstrap, RUNS)))
                and s[("runledger_controller_commands_appended_total", ())]
                == len(list(read_log(cluster.bootstrap, COMMANDS)))) or None

    until(appended_all, 30, "appended counts equal to the log")

    # Every report it took in was observed once, at the commit that carried its facts: the
    # inputs are the requests (on their own topic) and the reports.
    name = "runledger_controller_report_to_fact_seconds"
    requests = len(list(read_log(cluster.bootstrap, REQUESTS)))

    def observed_every_report() -> Samples | None:
        s = scrape(url)
        return s if (s[(f"{name}_count", ())]
                     == s[("runledger_controller_inputs_total", ())] - requests) else None

    got = until(observed_every_report, 30, "one observation per report")
    assert got[(f"{name}_count", ())] > 10  # heartbeats, steps, a checkpoint, exits
    assert got[(f"{name}_bucket", (("le", "+Inf"),))] == got[(f"{name}_count", ())]
    # Same machine, one clock: every report was committed within a minute.
    assert got[(f"{name}_bucket", (("le", "60.0"),))] == got[(f"{name}_count", ())]
    assert 0 < got[(f"{name}_sum", ())] < 60 * got[(f"{name}_count", ())]
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(30) == 0
