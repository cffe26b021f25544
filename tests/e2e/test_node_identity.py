"""A job on one node cannot speak for another: the attacks of issue #33, item 1, on a secure stack.

Each attack is made as the issue writes it, by a process holding the stack's
``agent`` credentials (every agent, and so far every worker, holds them), against
a real controller and real agents that sign their reports with their own node
keys (``Cluster.agent`` enrolls each node):

- workers get the worker role's credentials (write reports, read runs), never
  their agent's (tests/runledger/stack/test_security.py: it reads no commands);
- a ``WorkerExited`` for another node's rank, declaring that node's name,
  unsigned, or signed with the sender's own node key: the controller's door
  quarantines it (``unsigned``, ``wrong_principal``), nothing is classified, and
  the run goes on to succeed in its first generation;
- a worker's report forged for another run by a job holding the worker
  credentials, unsigned or signed with its own run's key (readable from its
  environment): quarantined (``unsigned``, ``wrong_run``), and nothing of it
  reaches the other run's facts;
- a ``NodeQuarantined`` sent on ``runledger.reports``: quarantined at the door
  as before, and now believed by no reader either: ``runledger nodes`` shows the
  node ready, and a run submitted afterwards is placed there and succeeds.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from events.kafka.clients import EventProducer, event_headers
from events.kafka.connection import ENV_CREDENTIALS
from events.kafka.runkeys import ENV as RUN_KEY_ENV
from events.kafka.runkeys import RunKey, send_report
from events.model import (
    Event,
    GenerationStarted,
    Header,
    NodeQuarantined,
    StepCommitted,
    WorkerExited,
    node_key,
)
from events.signed.signing import SigningKey, sign_report
from events.topics import QUARANTINE, REPORTS
from tests.e2e.harness import Cluster, _environ, of_type, spec, wait, worker_pids

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def _agent_producer(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> EventProducer:
    """A producer that authenticates as the stack's ``agent`` principal, as a job does."""
    assert cluster.keys is not None, "these attacks are on a secure stack"
    credentials = cluster.keys.parent / "credentials" / "agent.properties"
    assert credentials.is_file(), credentials
    with monkeypatch.context() as env:
        env.setenv(ENV_CREDENTIALS, str(credentials))
        return EventProducer(cluster.bootstrap, client_id="a-job")


def _send_signed(producer: EventProducer, event: Event, key: SigningKey) -> None:
    value = producer.codec.encode(event)
    version = producer.codec.registry.latest(event.event_type).version
    producer.send_bytes(REPORTS, event.run_id, value,
                        [*event_headers(event, version), *sign_report(key, value)])


def _quarantined(cluster: Cluster, count: int) -> list[dict[str, Any]]:
    def listed() -> list[dict[str, Any]] | None:
        done = cluster.cli("events", "dump", "--topic", QUARANTINE, "--json")
        assert done.returncode == 0, done.stderr
        docs = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        return docs if len(docs) >= count else None
    return wait(listed, 60, f"{count} quarantined records")


def _now() -> int:
    return int(time.time() * 1000)


def test_an_exit_forged_for_another_nodes_rank_fails_nothing(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster.controller()
    cluster.agent("n1", 1)
    cluster.agent("n2", 1)
    run = cluster.submit(spec("two-nodes", ["--steps", "150", "--step-time", "0.1"],
                              topology={"replicas": 2, "slots_per_node": 1}))
    facts = cluster.wait_facts(run, lambda f: len(of_type(f, "StepCommitted")) >= 3,
                               what="the run committing steps on both nodes")
    (started,) = [e for e in facts if isinstance(e, GenerationStarted)]
    gen = started.generation
    (victim,) = [m.logical_id for m in started.members if m.node == "n1"]
    # The workers hold the worker role's credentials, not their agents'.
    pids = wait(lambda: worker_pids(run) or None, 30, "the run's workers")
    held = {_environ(pid).get(ENV_CREDENTIALS, "") for pid in pids}
    agents = os.environ.get(ENV_CREDENTIALS, "")
    assert held and all(Path(h).name == "worker.properties" for h in held), held
    assert agents not in held
    # The job on n2 holds the agent credentials and, as its agent's OS user, could
    # read n2's own key file.
    n2_key = SigningKey.load(cluster.work / "node.n2.key")
    producer = _agent_producer(cluster, monkeypatch)

    def forged(n: int, node: str) -> WorkerExited:
        return WorkerExited(header=Header(f"{run}/g{gen}/{victim}/exited-{n}", run, gen, _now(),
                                          "agent/n1"),
                            logical_id=victim, node=node, exit_code=1)

    forged_at = _now()
    producer.send(REPORTS, forged(1, "n1"))  # as the issue writes it: declaring n1
    _send_signed(producer, forged(2, "n1"), n2_key)  # signed by n2, declaring n1
    _send_signed(producer, forged(3, "n2"), n2_key)  # signed by n2, n1's rank as its own
    producer.flush(30)

    docs = _quarantined(cluster, 3)
    assert sorted((d["quarantined"]["reason"], d["type"]) for d in docs) == [
        ("unsigned", "WorkerExited"), ("wrong_principal", "WorkerExited"),
        ("wrong_principal", "WorkerExited")], docs
    human = cluster.cli("events", "dump", "--topic", QUARANTINE).stdout
    assert "must be signed by the live agent key of node.n1" in human, human[-3000:]

    facts = cluster.wait_facts(run, lambda f: bool(of_type(f, "RunFinished")), timeout=120,
                               what="the run finishing")
    assert [f.outcome for f in of_type(facts, "RunFinished")] == ["succeeded"]
    assert of_type(facts, "FailureClassified") == []
    assert [g.generation for g in of_type(facts, "GenerationStarted")] == [gen]
    assert any(s.header.occurred_at > forged_at for s in of_type(facts, "StepCommitted"))


def test_a_job_cannot_report_for_another_run_even_on_its_own_node(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster.controller()
    cluster.agent("n1", 2)
    one = {"replicas": 1, "slots_per_node": 1}
    victim = cluster.submit(spec("victim", ["--steps", "200", "--step-time", "0.1"],
                                 topology=one))
    attacker = cluster.submit(spec("attacker", ["--steps", "200", "--step-time", "0.1"],
                                   topology=one))
    for run in (victim, attacker):
        cluster.wait_facts(run, lambda f: len(of_type(f, "StepCommitted")) >= 2,
                           what=f"run {run} committing steps")
    # Each run's workers hold their own run's key, certified by n1 for that run alone.
    keys: dict[str, RunKey] = {}
    for run in (victim, attacker):
        pid = wait(lambda: worker_pids(run) or None, 30, f"{run}'s worker")[0]  # noqa: B023
        keys[run] = RunKey.load(_environ(pid)[RUN_KEY_ENV])
        assert (keys[run].cert.run_id, keys[run].cert.node) == (run, "n1")
    gen = keys[victim].cert.generation
    assert keys[victim].key.key_id != keys[attacker].key.key_id

    credentials = cluster.keys.parent / "credentials" / "worker.properties" \
        if cluster.keys is not None else None
    assert credentials is not None and credentials.is_file(), "a secure stack"
    with monkeypatch.context() as env:
        env.setenv(ENV_CREDENTIALS, str(credentials))
        producer = EventProducer(cluster.bootstrap, client_id="a-job")

    def forged(step: int) -> StepCommitted:
        return StepCommitted(header=Header(f"{victim}/g{gen}/forged-{step}", victim, gen,
                                           _now(), f"worker/{victim}/w0"),
                             step=step, tokens=1, loss_tokens=1, step_time_ms=1.0,
                             input_wait_ms=0.0, loss=99.0)

    send_report(producer, forged(7777), None)  # unsigned, with the worker's credentials
    send_report(producer, forged(7778), keys[attacker])  # the attacker's own run key
    producer.flush(30)
    docs = _quarantined(cluster, 2)
    assert sorted(d["quarantined"]["reason"] for d in docs if d["type"] == "StepCommitted") \
        == ["unsigned", "wrong_run"], docs
    human = cluster.cli("events", "dump", "--topic", QUARANTINE).stdout
    assert "certified by node 'n1' for another run or generation" in human, human[-3000:]

    facts = cluster.wait_facts(victim, lambda f: bool(of_type(f, "RunFinished")), timeout=180,
                               what="the victim finishing")
    assert [f.outcome for f in of_type(facts, "RunFinished")] == ["succeeded"]
    steps = {s.step for s in of_type(facts, "StepCommitted")}
    assert not steps & {7777, 7778} and max(steps) == 200


def _node_state(cluster: Cluster, node: str) -> str | None:
    done = cluster.cli("nodes", "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["node"]: r for r in json.loads(done.stdout)["nodes"]}
    return rows[node]["state"] if node in rows else None


def test_a_quarantine_sent_on_reports_takes_no_node_out_of_service(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster.controller()
    cluster.agent("n1", 2)
    wait(lambda: _node_state(cluster, "n1") == "ready" or None, 60, "n1 ready in `nodes`")
    producer = _agent_producer(cluster, monkeypatch)
    key = node_key("n1")
    producer.send(REPORTS, NodeQuarantined(header=Header(f"{key}/forged", key, 0, _now(),
                                                         "a-job"),
                                           node="n1", reason="forged by a job"))
    producer.flush(30)
    (doc,) = _quarantined(cluster, 1)
    assert (doc["quarantined"]["reason"], doc["type"]) == ("stray", "NodeQuarantined")

    # Neither `runledger nodes` nor the controller's follower believes it.
    assert _node_state(cluster, "n1") == "ready"
    run = cluster.submit(spec("after-the-forgery", ["--steps", "10", "--step-time", "0.05"]))
    facts = cluster.wait_facts(run, lambda f: bool(of_type(f, "RunFinished")), timeout=120,
                               what="the run finishing on n1")
    assert [f.outcome for f in of_type(facts, "RunFinished")] == ["succeeded"]
    assert of_type(facts, "RunQueued") == []
    assert of_type(cluster.facts(key), "NodeQuarantined") == []
    assert _node_state(cluster, "n1") == "ready"


def test_an_unenrolled_agent_refuses_to_start_on_a_secure_stack(cluster: Cluster,
                                                                 tmp_path: Path) -> None:
    done = cluster.cli("agent", "--node", "stranger", "--slots", "1",
                       "--work-dir", str(tmp_path / "stranger"))
    assert done.returncode != 0
    assert "no node key for stranger" in done.stderr
    assert "runledger node enroll stranger" in done.stderr
