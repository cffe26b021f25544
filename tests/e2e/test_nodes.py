"""A node quarantined for node faults, inspected and freed by an operator, end to end.

One scenario on real processes: workers killed by a signal (the test worker's
``kill`` mode, as by the OOM killer) are failures the evidence attributes to
the node, and the third quarantines it. ``runledger nodes --json`` shows it
quarantined with the controller's reason; a run submitted then stays queued,
and its ``status`` names the node and the ``runledger node uncordon`` that
frees it; the operator's signed ``node uncordon`` (``--key``, as docs/cli.md
says) frees it and the queued run starts and succeeds. ``runledger nodes``
shows each node's failures and when its quarantine expires; a second scenario
lets a short ``--quarantine-expiry-s`` free the node, which ``nodes`` then
shows ready on probation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from events.model import (
    Event,
    NodeQuarantined,
    NodeQuarantineExpired,
    NodeUncordoned,
    RunFinished,
    node_key,
)
from tests.e2e.harness import Cluster, of_type, spec, wait

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


Until = Callable[[list[Event]], bool]


def ended(outcome: str) -> Until:
    return lambda facts: any(isinstance(e, RunFinished) and e.outcome == outcome for e in facts)


def has(kind: type[Event]) -> Until:
    return lambda facts: any(isinstance(e, kind) for e in facts)



def nodes_row(cluster: Cluster, node: str) -> str:
    """``node``'s line of ``runledger nodes``, as a user reads it."""
    text = cluster.cli("nodes")
    assert text.returncode == 0, text.stderr
    (row,) = [line for line in text.stdout.splitlines() if line.startswith(f"{node} ")]
    return row

def test_a_node_quarantined_for_node_faults_is_freed_by_uncordon_and_takes_the_queued_run(
        cluster: Cluster) -> None:
    assert cluster.keys is not None, "a secure stack: the operator signs with its key"
    cluster.controller()
    cluster.agent("n1", 2)
    wait(lambda: "node n1: ready" in cluster.log_of("agent-n1"), 60, "the agent's start line",
         lambda: cluster.log_of("agent-n1")[-2000:])

    # Rank 0 is SIGKILLed at its first step in every generation: three node faults,
    # restarted after short backoffs, and the third escalates.
    retry = {"default": {"attempts": 5, "backoff_base_s": 0.1, "backoff_cap_s": 0.2,
                         "escalate_after": 3}}
    faulty = cluster.submit(spec("faulty", ["--steps", "5", "--step-time", "0.05",
                                            "--fail-mode", "kill", "--fail-at-step", "1",
                                            "--fail-rank", "0"], retry=retry))
    facts = cluster.wait_facts(faulty, ended("failed"), timeout=120, what="the faulty run's end")
    assert [f.signature for f in of_type(facts, "FailureClassified")] == [
        "worker_crash:signal=9"] * 3
    cluster.wait_facts(node_key("n1"), has(NodeQuarantined), timeout=30, what="the quarantine")

    listed = cluster.cli("nodes", "--json")
    assert listed.returncode == 0, listed.stderr
    (n1,) = json.loads(listed.stdout)["nodes"]
    assert (n1["node"], n1["state"], n1["why"], n1["failures"]) == (
        "n1", "quarantined", "3 failures on the node", 3)
    # The controller's default expiry: an hour after the quarantine began.
    (fact,) = of_type(cluster.facts(node_key("n1")), "NodeQuarantined")
    assert n1["quarantine_expires_ms"] == fact.expires_at == fact.header.occurred_at + 3_600_000
    row = nodes_row(cluster, "n1")
    assert row.split()[5:7] == ["quarantined", "3"]  # state, failures
    assert row.endswith(f"3 failures on the node; expires {n1['quarantine_expires']}, "
                        "then on probation")

    queued = cluster.submit(spec("after", ["--steps", "3", "--step-time", "0.05"]))
    frees = ("n1 is quarantined (3 failures on the node): `runledger node uncordon n1 "
             "--reason R` frees it")

    def says_queued() -> dict[str, Any] | None:
        done = cluster.cli("status", queued, "--json")
        doc: dict[str, Any] = json.loads(done.stdout) if done.returncode == 0 else {}
        return doc if frees in doc.get("queue_reason", "") else None

    status = wait(says_queued, 60, "a queue reason naming n1", lambda: cluster.log_of(
        "controller")[-2000:])
    assert status["state"] == "Queued"
    assert not of_type(cluster.facts(queued), "RunAdmitted")

    freed = cluster.cli("node", "uncordon", "n1", "--reason", "memory replaced",
                        "--key", str(cluster.keys / "operator.key"))
    assert freed.returncode == 0, freed.stderr
    (uncordoned,) = of_type(cluster.wait_facts(node_key("n1"), has(NodeUncordoned), timeout=60,
                                               what="the uncordon"), "NodeUncordoned")
    assert (uncordoned.principal, uncordoned.failures_cleared) == ("operator", 3)
    cluster.wait_facts(queued, ended("succeeded"), timeout=90, what="the queued run's success")


def test_an_expired_quarantine_leaves_the_node_on_probation_as_nodes_shows(
        cluster: Cluster) -> None:
    # `runledger controller --quarantine-expiry-s S --probation-failures N` (docs/cli.md).
    cluster.controller("ctl", "controller", "--quarantine-expiry-s", "2",
                       "--probation-failures", "2")
    cluster.agent("n1", 2)
    retry = {"default": {"attempts": 5, "backoff_base_s": 0.1, "backoff_cap_s": 0.2,
                         "escalate_after": 3}}
    faulty = cluster.submit(spec("faulty", ["--steps", "5", "--step-time", "0.05",
                                            "--fail-mode", "kill", "--fail-at-step", "1",
                                            "--fail-rank", "0"], retry=retry))
    cluster.wait_facts(faulty, ended("failed"), timeout=120, what="the faulty run's end")
    facts = cluster.wait_facts(node_key("n1"), has(NodeQuarantineExpired), timeout=60,
                               what="the quarantine's expiry")
    (quarantine,) = of_type(facts, "NodeQuarantined")
    assert quarantine.expires_at == quarantine.header.occurred_at + 2_000
    (expired,) = of_type(facts, "NodeQuarantineExpired")
    assert expired.failures == 2

    listed = cluster.cli("nodes", "--json")
    assert listed.returncode == 0, listed.stderr
    (n1,) = json.loads(listed.stdout)["nodes"]
    assert (n1["state"], n1["failures"], n1["probation"], n1["quarantine_expires"]) == (
        "ready", 2, True, None)
    assert n1["probation_since_ms"] == expired.header.occurred_at
    row = nodes_row(cluster, "n1")
    assert row.split()[5:7] == ["ready", "2"]  # state, failures
    assert row.endswith(f"on probation since {n1['probation_since']} (its quarantine "
                        "expired): 1 more failure(s) quarantine it again")
