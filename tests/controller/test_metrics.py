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

from controller.metrics import ControllerCollector, families
from controller.model import Model, Tracked
from controller.runplan import RunPlan, plan_from_submission
from controller.service import ControllerService, LoopStats
from controller.shelf import Shelf
from events.consume import read_log
from events.kafka import EventProducer
from events.model import Member
from events.runkeys import send_report
from events.state import Checkpoint, RunState, Status
from events.topics import COMMANDS, RUNS
from runledger.metricsserver import MetricsServer, parse_address
from tests.e2e.harness import PY, Cluster, of_type, spec
from tests.events.builders import Ev
from tests.promtext import Labels, Samples, render, scrape, until

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

    # This controller wrote every record of the private runs and commands topics.
    def appended_all() -> bool | None:
        s = scrape(url)
        return (s[("runledger_controller_facts_appended_total", ())]
                == len(list(read_log(cluster.bootstrap, RUNS)))
                and s[("runledger_controller_commands_appended_total", ())]
                == len(list(read_log(cluster.bootstrap, COMMANDS)))) or None

    until(appended_all, 30, "appended counts equal to the log")
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(30) == 0
