"""Several controllers on one cluster: one owner per run (issue #12, build item 5).

Real processes on a private broker: controllers with different transactional
ids share the runs by partition; every run finishes once, no fact id is
written twice, and no run's facts come from two writers at once. A killed
controller's runs are finished by another; a controller outside the group is
found out as another writer, and the run's owner raises ``foreign_writer``.
Assertions read the authoritative log and the ``writer`` header of its records;
each run's hash chain verifies across handovers (``events.signed.audit``).
"""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

from controller.ownership import FOREIGN_WRITER
from events.fold import apply
from events.kafka.consume import read_log
from events.model import RunFinished, WriteRejected
from events.partition import partition_for
from events.record import Record
from events.topics import RUNS, topic_specs
from tests.e2e.harness import Cluster, spec, wait
from tests.e2e.signed import audit

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]
# A killed controller's open transaction holds its partitions back until the
# broker aborts it; a short timeout keeps the takeover inside the test's time.
FAST = ("--transaction-timeout", "5")
# Hang detection is not what these tests are about: six runs, three controllers and
# a rebalance on two shared cores may starve a worker's heartbeat for seconds.
CALM = {"interval_s": 0.3, "timeout_s": 10.0, "stall_timeout_s": 20.0}
PARTITIONS = next(t.partitions for t in topic_specs(1) if t.name == RUNS)


def _runs(cluster: Cluster, count: int, steps: int, step_time: float,
          spread: int = 0) -> list[str]:
    """``count`` runs, more if needed until they lie on ``spread`` distinct partitions.

    Run ids are random, so six runs may all hash onto the partitions one
    controller owns (1 in 64 with two); runs on four of the six partitions give
    every assignment among two or three controllers at least two owners.
    """
    runs: list[str] = []
    while len(runs) < count or (len({partition_for(r, PARTITIONS) for r in runs}) < spread
                                and len(runs) < 4 * count):
        runs.append(cluster.submit(spec(f"multi-{len(runs)}",
                                        ["--steps", str(steps), "--step-time", str(step_time)],
                                        topology={"replicas": 1, "slots_per_node": 1},
                                        heartbeat=CALM)))
    return runs


def _assert_chains_verify(cluster: Cluster) -> None:
    """Whoever wrote a run's facts, in turn, continued its chain from the last one.

    The runs are submitted through the CLI, whose requests' signatures are not
    what these tests are about: only the controllers' side must verify.
    """
    report = audit(cluster)
    theirs = [p for p in report.problems if not p.reason.startswith("request_")]
    assert report.runs and not theirs, "\n".join(map(str, theirs))


def _log(cluster: Cluster) -> list[Record]:
    return list(read_log(cluster.bootstrap, RUNS))


def _all_finished(cluster: Cluster, runs: list[str]) -> list[Record] | None:
    log = _log(cluster)
    done = {r.event.run_id for r in log if isinstance(r.event, RunFinished)}
    return log if done >= set(runs) else None


def _assert_one_owner_at_a_time(log: list[Record], runs: list[str]) -> None:
    """Every run decided once: no fact id twice, and every controller fact the fold
    accepts in log order (two deciders at once would admit, start or finish a run
    twice, which the fold refuses). Rebalances may hand a run back and forth."""
    ids = Counter(r.event.header.event_id for r in log)
    assert [i for i, n in ids.items() if n > 1] == [], "a fact id written twice"
    for run in runs:
        records = [r for r in log if r.event.run_id == run]
        finished = [r.event for r in records if isinstance(r.event, RunFinished)]
        assert [f.outcome for f in finished] == ["succeeded"], run
        assert all(r.writer for r in records), f"{run}: a record without its writer header"
        state = None
        for r in records:
            verdict = apply(state, r.event)
            informational = isinstance(r.event, WriteRejected)
            assert verdict.verdict.accepted or informational, (
                f"{run}: {r.event.event_type} by {r.writer} refused by the fold: "
                f"{verdict.verdict}; writers {[x.writer for x in records]}")
            state = verdict.state if verdict.state is not None else state
        starts = [r for r in records if r.event.event_type == "GenerationStarted"]
        story = [(r.event.event_type, r.writer, getattr(r.event, "detail", ""))
                 for r in records]
        assert len(starts) == 1, f"{run} restarted across a handover: {story}"
        assert not any(r.event.event_type == "AlertRaised"
                       and getattr(r.event, "alert", "") == FOREIGN_WRITER for r in records)


def test_two_then_three_controllers_share_the_runs_one_owner_each(cluster: Cluster) -> None:
    cluster.controller("ctl-a", "controller-a")
    cluster.controller("ctl-b", "controller-b")
    cluster.agent("n1", 4)
    cluster.agent("n2", 4)
    runs = _runs(cluster, 6, steps=50, step_time=0.15, spread=4)
    wait(lambda: sum(r.event.event_type == "MembershipConfirmed" for r in _log(cluster)) >= 3,
         90, "three runs confirmed running")
    cluster.controller("ctl-c", "controller-c")  # a rebalance while the runs run
    log = wait(lambda: _all_finished(cluster, runs), 150, "every run finished",
               lambda: cluster.log_of("controller-a")[-1500:])
    _assert_one_owner_at_a_time(log, runs)
    deciders = {r.writer for r in log if r.event.run_id in runs}
    assert len(deciders) >= 2, f"one controller decided every run: {deciders}"
    _assert_chains_verify(cluster)
    for name in ("controller-a", "controller-b", "controller-c"):
        assert "Traceback" not in cluster.log_of(name)


def test_a_killed_controllers_runs_are_finished_by_another(cluster: Cluster) -> None:
    procs = {txn: cluster.controller(txn, f"controller-{txn}", *FAST)
             for txn in ("ctl-a", "ctl-b", "ctl-c")}
    cluster.agent("n1", 4)
    cluster.agent("n2", 4)
    # Long enough that the victim's runs are still running when it is killed, even
    # on a loaded machine; a run it finished before dying is its to have finished.
    runs = _runs(cluster, 6, steps=160, step_time=0.15)
    log = wait(lambda: (lambda got: got if sum(r.event.event_type == "MembershipConfirmed"
                                               for r in got) >= 4 else None)(_log(cluster)),
               90, "four runs confirmed running")
    victim = Counter(r.writer for r in log if r.event.event_type == "MembershipConfirmed"
                     ).most_common(1)[0][0]
    victim_runs = {r.event.run_id for r in log
                   if r.writer == victim and r.event.event_type == "MembershipConfirmed"}
    os.killpg(procs[victim].pid, signal.SIGKILL)
    procs[victim].wait(10)
    log = wait(lambda: _all_finished(cluster, runs), 180, "every run finished after the kill")
    _assert_one_owner_at_a_time(log, runs)
    _assert_chains_verify(cluster)
    taken_over = 0
    for run in victim_runs:
        (finished,) = [r for r in log if r.event.run_id == run
                       and isinstance(r.event, RunFinished)]
        assert finished.writer != "", f"{run} finished by no controller"
        taken_over += finished.writer != victim  # the victim's own: before it died
    assert taken_over >= 1, f"every run of {victim} ended before it was killed"


def test_a_controller_outside_the_group_is_found_out_as_another_writer(
    cluster: Cluster,
) -> None:
    cluster.controller("ctl-a", "controller-a")
    cluster.agent("n1", 2)
    (run,) = _runs(cluster, 1, steps=400, step_time=0.1)
    wait(lambda: any(r.event.event_type == "MembershipConfirmed" and r.event.run_id == run
                     for r in _log(cluster)) or None, 60, "the run confirmed running")
    # Misconfigured: its own group, so it is given every partition too.
    cluster.controller("ctl-rogue", "controller-rogue", group="rogue")

    def alerted() -> list[Record] | None:
        got = [r for r in _log(cluster) if r.event.run_id == run
               and r.event.event_type == "AlertRaised" and r.event.alert == FOREIGN_WRITER]
        return got or None

    alerts = wait(alerted, 90, "a foreign_writer alert",
                  lambda: cluster.log_of("controller-a")[-1500:])
    assert {a.writer for a in alerts} <= {"ctl-a", "ctl-rogue"}
    assert any(a.event.subject in ("ctl-a", "ctl-rogue") and a.event.subject != a.writer
               for a in alerts)
    assert "another writer" in cluster.log_of("controller-a") + cluster.log_of(
        "controller-rogue")
