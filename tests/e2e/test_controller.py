"""The controller, agents and workers as real processes on a real broker.

Each test drives one recovery path of issue "Controller" end to end and
asserts on the authoritative log (``runledger.runs``), never on process logs.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import pytest

from events.model import FailureClassified, GroupStartCommanded, RunFinished
from events.topics import COMMANDS, RUNS
from tests.e2e.harness import Cluster, of_type, spec, wait, worker_pids

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]
TIMEOUT_MS = 3_000  # the specs' heartbeat.timeout_s


def finished(outcome: str):  # type: ignore[no-untyped-def]
    return lambda facts: any(isinstance(e, RunFinished) and e.outcome == outcome for e in facts)


def running(gen: int):  # type: ignore[no-untyped-def]
    return lambda facts: any(
        e.event_type == "MembershipConfirmed" and e.generation == gen for e in facts
    )


def test_kill_9_is_a_crash_and_the_group_restarts_in_a_new_generation(cluster: Cluster) -> None:
    cluster.controller()
    cluster.agent("n1", 2)
    run = cluster.submit(spec("crash", ["--steps", "25", "--step-time", "0.15"]))
    cluster.wait_facts(
        run,
        lambda f: running(1)(f) and len(of_type(f, "StepCommitted")) >= 2,
        what="generation 1 running with progress",
    )
    (pid,) = wait(lambda: worker_pids(run, 1, "r1") or None, 10, "worker r1 of generation 1")
    killed_at = time.time() * 1000
    os.kill(pid, signal.SIGKILL)

    facts = cluster.wait_facts(run, finished("succeeded"), timeout=90, what="success")
    (failure,) = of_type(facts, "FailureClassified")
    assert failure.failure_class == "worker_crash"
    assert failure.signature == "worker_crash:signal=9"
    assert failure.action == "restart" and failure.generation == 1
    assert failure.header.occurred_at - killed_at <= 2 * TIMEOUT_MS
    starts = of_type(facts, "GenerationStarted")
    assert [g.generation for g in starts] == [1, 2]
    assert facts[-1].generation == 2


def test_a_stopped_worker_resumed_after_a_new_generation_can_never_publish(
    cluster: Cluster,
) -> None:
    cluster.controller()
    # A long grace: the zombie keeps running after its stop command, as a
    # partitioned worker would, so its late reports reach the controller.
    cluster.agent("n1", 2, grace=60.0)
    run = cluster.submit(
        spec("zombie", ["--steps", "60", "--step-time", "0.2", "--ignore-sigterm"])
    )
    cluster.wait_facts(run, running(1), what="generation 1 running")
    (pid,) = wait(lambda: worker_pids(run, 1, "r0") or None, 10, "worker r0 of generation 1")
    os.kill(pid, signal.SIGSTOP)
    cluster.wait_facts(
        run,
        lambda f: any(e.event_type == "GenerationStarted" and e.generation == 2 for e in f),
        timeout=60,
        what="generation 2",
    )
    resumed_at = time.time() * 1000
    os.kill(pid, signal.SIGCONT)

    def stale_rejections(facts):  # type: ignore[no-untyped-def]
        rej = [
            e
            for e in of_type(facts, "WriteRejected")
            if e.reason == "stale_generation" and e.header.occurred_at >= resumed_at
        ]
        # Aggregated (controller.rejections): one record per member and reason per window.
        return len(rej) >= 1

    facts = cluster.wait_facts(run, stale_rejections, timeout=60, what="stale rejections")
    (gen2,) = [e for e in of_type(facts, "GenerationStarted") if e.generation == 2]
    after = facts[facts.index(gen2) + 1 :]
    # Nothing generation 1 sent after generation 2 began was accepted as a fact.
    accepted_old = [
        e
        for e in after
        if e.generation == 1
        and e.event_type
        in (
            "StepCommitted",
            "ShardWritten",
            "ManifestCommitted",
            "CursorAdvanced",
            "WorkerExited",
            "MembershipConfirmed",
        )
    ]
    assert accepted_old == []
    os.kill(pid, signal.SIGKILL)


def test_heartbeats_without_progress_are_a_hang_not_a_crash(cluster: Cluster) -> None:
    cluster.controller()
    cluster.agent("n1", 2)
    run = cluster.submit(
        spec(
            "stall",
            [
                "--steps",
                "8",
                "--step-time",
                "0.15",
                "--fail-mode",
                "stall",
                "--fail-at-step",
                "3",
                "--fail-generation",
                "1",
            ],
        )
    )
    facts = cluster.wait_facts(run, finished("succeeded"), timeout=90, what="success")
    (failure,) = of_type(facts, "FailureClassified")
    assert failure.failure_class == "hang"
    assert failure.signature == "hang:no_progress"
    assert [g.generation for g in of_type(facts, "GenerationStarted")] == [1, 2]


def test_the_same_failure_every_time_backs_off_growing_then_fails(cluster: Cluster) -> None:
    cluster.controller()
    cluster.agent("n1", 2)
    run = cluster.submit(
        spec(
            "doomed",
            ["--steps", "5", "--step-time", "0.1", "--fail-mode", "fail", "--fail-at-step", "2"],
        )
    )
    facts = cluster.wait_facts(run, finished("failed"), timeout=120, what="failure")
    failures: list[FailureClassified] = of_type(facts, "FailureClassified")
    said: list[tuple[Any, ...]] = [(f.generation, f.action, f.signature, f.detail)
                                   for f in failures]
    # What a failure of this test needs to be told apart: the refusals, the steps, and
    # each exit's last words (a CI run once filed generation 2 as job:start_exit=1).
    said += [(r.rejected_generation, r.rejected_event_type, r.reason, r.detail)
             for r in of_type(facts, "WriteRejected")]
    said += [(s.generation, "step", s.step) for s in of_type(facts, "StepCommitted")]
    said += [(w.generation, w.logical_id, w.exit_code, w.stderr_tail[-400:])
             for w in of_type(facts, "WorkerExited")]
    told = "\n".join(map(repr, said))  # a string: pytest shortens a long list's repr
    assert [f.action for f in failures] == ["restart", "restart", "escalate"], told
    assert {f.signature for f in failures} == {"worker_crash:exit=1"}, told
    assert [f.backoff_ms for f in failures[:2]] == [500, 1_000]
    starts = of_type(facts, "GenerationStarted")
    assert len(starts) == 3
    # The recorded backoff is honoured: each restart waits at least as long.
    for failure, nxt in zip(failures[:2], starts[1:], strict=True):
        assert nxt.header.occurred_at - failure.header.occurred_at >= failure.backoff_ms
    time.sleep(2)
    assert len(of_type(cluster.facts(run), "GenerationStarted")) == 3  # no endless loop


def test_queued_with_a_reason_until_a_node_with_room_then_the_whole_group(
    cluster: Cluster,
) -> None:
    cluster.controller()
    cluster.agent("small", 1)
    run = cluster.submit(
        spec(
            "queued",
            ["--steps", "3", "--step-time", "0.1"],
            topology={"replicas": 3, "slots_per_node": 3},
        )
    )
    facts = cluster.wait_facts(run, lambda f: bool(of_type(f, "RunQueued")), what="queued")
    assert "needs 3 slots" in of_type(facts, "RunQueued")[-1].reason
    time.sleep(1)
    assert of_type(cluster.facts(run), "RunAdmitted") == []
    cluster.agent("big", 2)
    facts = cluster.wait_facts(run, finished("succeeded"), timeout=90, what="success")
    (admitted,) = of_type(facts, "RunAdmitted")
    assert sorted(m.logical_id for m in admitted.members) == ["r0", "r1", "r2"]


def test_a_killed_controller_restarts_and_issues_no_duplicate_start(cluster: Cluster) -> None:
    first = cluster.controller(name="controller")
    cluster.agent("n1", 2)
    run = cluster.submit(spec("restart", ["--steps", "30", "--step-time", "0.15"]))
    cluster.wait_facts(run, running(1), what="generation 1 running")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    cluster.controller(name="controller-2")
    facts = cluster.wait_facts(run, finished("succeeded"), timeout=90, what="success")
    assert [g.generation for g in of_type(facts, "GenerationStarted")] == [1]
    starts = [c for c in cluster.commands(run) if isinstance(c, GroupStartCommanded)]
    assert len(starts) == len({c.command_id for c in starts}) == 1
    # The restarted controller caught the run's summary up on runledger.status;
    # `status` reads it (one record) and it says what folding the log says.
    fast = wait(lambda: _summary(cluster, run), timeout=60, what="a summary of Succeeded")
    slow = json.loads(cluster.cli("status", run, "--json", "--refold").stdout)
    assert slow["source"] == "runledger.runs (folded)"
    for key in ("state", "generation", "step", "tokens", "checkpoint", "failure_count",
                "retries", "name", "principal", "spec_digest", "outcome_reason"):
        assert fast[key] == slow[key], key
    listed = json.loads(cluster.cli("runs", "--json", "--state", "succeeded").stdout)["runs"]
    assert run in [r["run_id"] for r in listed]


def _summary(cluster: Cluster, run: str) -> dict[str, Any] | None:
    done = cluster.cli("status", run, "--json")
    doc = json.loads(done.stdout) if done.returncode == 0 else None
    ok = doc is not None and doc["source"] == "runledger.status" and doc["state"] == "Succeeded"
    return doc if ok else None


def test_a_second_controller_fences_the_first_which_exits_cleanly(cluster: Cluster) -> None:
    first = cluster.controller(name="controller")
    cluster.agent("n1", 2)
    run = cluster.submit(spec("fenced", ["--steps", "20", "--step-time", "0.15"]))
    cluster.wait_facts(run, running(1), what="generation 1 running")
    cluster.controller(name="controller-2")
    code = first.wait(60)
    assert code == 3
    assert "fenced" in cluster.log_of("controller")
    assert "Traceback" not in cluster.log_of("controller")
    cluster.wait_facts(run, finished("succeeded"), timeout=90, what="success")


def test_cancel_records_the_fact_before_any_stop_and_rejects_later_reports(
    cluster: Cluster,
) -> None:
    cluster.controller()
    cluster.agent("n1", 2)
    run = cluster.submit(spec("cancel", ["--steps", "200", "--step-time", "0.1"]))
    cluster.wait_facts(run, running(1), what="generation 1 running")
    refused = cluster.cli("cancel", run, *cluster.signed_as("mallory"), "--reason", "no")
    assert refused.returncode == 0
    done = cluster.cli("cancel", run, *cluster.signed_as("oncall"), "--reason", "budget")
    assert done.returncode == 0, done.stderr
    facts = cluster.wait_facts(run, lambda f: bool(of_type(f, "RunCancelled")), what="cancel")
    rejected = [e for e in of_type(facts, "WriteRejected") if e.reason == "unauthorized"]
    assert len(rejected) == 1
    cancelled = next(r for r in cluster.records(run, RUNS) if r.event.event_type == "RunCancelled")
    stops = [
        r for r in cluster.records(run, COMMANDS) if r.event.event_type == "GroupStopCommanded"
    ]
    assert stops, "a stop command follows the cancellation"
    assert all(s.timestamp_ms >= cancelled.timestamp_ms for s in stops)
    assert all(s.event.header.occurred_at >= cancelled.event.header.occurred_at for s in stops)
    # Whatever the workers still send is recorded as refused, and changes nothing.
    later = cluster.wait_facts(
        run,
        lambda f: any(
            e.event_type == "WriteRejected" and e.reason == "run_terminal"
            for e in f[f.index(cancelled.event) :]
        ),
        timeout=30,
        what="a rejected late report",
    )
    tail = later[later.index(cancelled.event) + 1 :]
    # The post-run manifest comes with the cancellation, in its transaction; then only
    # refusals.
    assert tail[0].event_type == "RunManifestPublished"
    assert {e.event_type for e in tail[1:]} <= {"WriteRejected", "GroupStopCommanded"}
