"""No replay: a genuine signed command or request, written again, does nothing a second time.

Issue #33's attack, as written: a live run's workers survive a ``kill -9`` of
their agent (they run in their own sessions, as documented); the agent is
restarted; the run's genuine, signed ``GroupStartCommanded`` is written again
on ``runledger.commands`` byte for byte (its value and headers, as the test's
admin, who may do what the controller may: the attacker who can write there).
Its signature is good and the fact log still shows its generation live, so
before ``agent.applied`` the restarted agent launched a second group: four
workers for a world size of two. Now it refuses it as ``replayed`` and the two
original workers are the only ones.

At the controller (``controller.replays``): a signed uncordon replayed after a
newer cordon (operators can read ``runledger.requests``) made the node ready
again; a signed resume replayed after the run was paused again would lift the
new pause; a replayed submit or cancel. Each copy is now recorded refused as
``replayed`` and changes nothing. Real broker, real controller, agent and
worker processes, the default (secure, signed) stack.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from agent.decide import REPLAYED
from controller.replays import REPLAYED as REQUEST_REPLAYED
from events.kafka.clients import EventProducer, event_headers
from events.model import (
    Event,
    GroupStartCommanded,
    Header,
    NodeOperationRequested,
    ResumeRequested,
    WriteRejected,
    node_key,
)
from events.signed.audit import LoggedRecord
from events.signed.signing import sign_request
from events.topics import COMMANDS, REQUESTS
from tests.e2e.harness import Cluster, of_type, spec, wait, worker_pids
from tests.e2e.signed import CODEC, cancel_signed, raw_log, submit_signed
from tests.events.signed_log import CAST

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def test_a_replayed_signed_start_launches_nothing_at_a_restarted_agent(cluster: Cluster) -> None:
    cluster.controller()
    agent = cluster.agent("n1", 2)
    # Its members' heartbeats reach the controller through their agent (architecture §8):
    # the agent's restart (seconds on a loaded machine) must fit in the heartbeat timeout.
    run, _ = submit_signed(cluster, spec("replay", ["--steps", "100000", "--step-time", "0.2"],
                                         heartbeat={"interval_s": 0.3, "timeout_s": 20.0,
                                                    "stall_timeout_s": 40.0}),
                           "alice", CAST.alice)
    cluster.wait_facts(run, lambda f: len(of_type(f, "StepCommitted")) >= 2,
                       what="generation 1 making progress")
    workers = set(wait(lambda: worker_pids(run) if len(worker_pids(run)) == 2 else None,
                       30, "the run's two workers"))

    # The agent dies; its workers do not.
    os.killpg(agent.pid, signal.SIGKILL)
    agent.wait(10)
    assert set(worker_pids(run)) == workers
    cluster.agent("n1", 2)
    wait(lambda: cluster.log_of("agent-n1").count("registered: 2 slots") == 2, 60,
         "the restarted agent's registration", lambda: cluster.log_of("agent-n1")[-3000:])

    # The run's genuine signed start, written again byte for byte.
    (start,) = [r for r in raw_log(cluster.bootstrap, COMMANDS)
                if isinstance(CODEC.decode(r.value).event, GroupStartCommanded)
                and CODEC.decode(r.value).event.run_id == run]
    _resend(cluster, COMMANDS, run, start)

    refusal = f"refused GroupStartCommanded {run}/g1/start/n1 ({run} g1): {REPLAYED}: "
    wait(lambda: refusal in cluster.log_of("agent-n1"), 60, "the agent's refusal of the replay",
         lambda: f"workers of {run}: {worker_pids(run)} (before: {sorted(workers)})\n"
                 + cluster.log_of("agent-n1")[-3000:])
    assert "; nothing done" in cluster.log_of("agent-n1").split(refusal, 1)[1].splitlines()[0]
    # Still the two original workers of a world size of two, and no second group.
    assert set(worker_pids(run)) == workers
    # Nothing was reported about the replay: no member was refused (exit 125) or exited.
    assert not of_type(cluster.facts(run), "WorkerExited")


def _resend(cluster: Cluster, topic: str, key: str, record: LoggedRecord) -> None:
    """Write ``record`` again byte for byte: its value and every header (the signature too)."""
    producer = EventProducer(cluster.bootstrap, client_id="test-replay-attacker")
    producer.send_bytes(topic, key, record.value, list(record.headers))
    producer.flush(30.0)


def _requests(cluster: Cluster, match: Callable[[Event], bool]) -> list[LoggedRecord]:
    return [r for r in raw_log(cluster.bootstrap, REQUESTS)
            if match(CODEC.decode(r.value).event)]


def _replayed(request_id: str) -> Callable[[list[Event]], bool]:
    return lambda facts: any(isinstance(e, WriteRejected) and e.reason == REQUEST_REPLAYED
                             and e.rejected_event_id == request_id for e in facts)


def test_replayed_operator_requests_are_refused_and_change_nothing(cluster: Cluster) -> None:
    cluster.controller()
    cluster.agent("n1", 1)
    key = str(cluster.keys / "operator.key") if cluster.keys is not None else ""
    assert key, "the default stack is secure and has an operator key"
    wait(lambda: cluster.cli("node", "cordon", "n1", "--reason", "first",
                             "--key", key).returncode == 0, 60, "n1 registered and cordoned")

    def operations(count: int) -> list[Event]:
        return cluster.wait_facts(node_key("n1"), lambda f: len(
            of_type(f, "NodeCordoned") + of_type(f, "NodeUncordoned")) >= count,
            what=f"{count} node operations")

    operations(1)
    done = cluster.cli("node", "uncordon", "n1", "--reason", "fixed", "--key", key)
    assert done.returncode == 0, done.stderr
    operations(2)
    done = cluster.cli("node", "cordon", "n1", "--reason", "broken again", "--key", key)
    assert done.returncode == 0, done.stderr
    operations(3)

    # Any operator can read runledger.requests: the signed uncordon, written again.
    (uncordon,) = _requests(cluster, lambda e: isinstance(e, NodeOperationRequested)
                            and e.operation == "uncordon")
    uncordon_id = CODEC.decode(uncordon.value).event.header.event_id
    _resend(cluster, REQUESTS, node_key("n1"), uncordon)
    facts = cluster.wait_facts(node_key("n1"), _replayed(uncordon_id),
                               what="the replayed uncordon refused")
    assert len(of_type(facts, "NodeUncordoned")) == 1
    listed = cluster.cli("nodes", "--json")
    (row,) = [r for r in json.loads(listed.stdout)["nodes"] if r["node"] == "n1"]
    assert row["state"] == "cordoned" and "broken again" in row["why"]

    # A submit and a cancel of a run (queued: one slot for two replicas), then both again.
    run, _ = submit_signed(cluster, spec("replayed", ["--steps", "3"]), "alice", CAST.alice)
    cancel_signed(cluster, run, "alice", CAST.alice)
    cluster.wait_facts(run, lambda f: bool(of_type(f, "RunCancelled")), what="the cancel")
    (submit,) = _requests(cluster, lambda e: e.event_type == "RunSubmitted" and e.run_id == run)
    (cancel,) = _requests(cluster, lambda e: e.event_type == "CancelRequested"
                          and e.run_id == run)
    for record in (submit, cancel):
        _resend(cluster, REQUESTS, run, record)
        rid = CODEC.decode(record.value).event.header.event_id
        cluster.wait_facts(run, _replayed(rid), what=f"the replayed {rid} refused")
    facts = cluster.facts(run)
    assert len(of_type(facts, "RunSubmitted")) == len(of_type(facts, "RunCancelled")) == 1


def _resume(cluster: Cluster, run: str) -> None:
    """``runledger resume`` as alice (the submitter) signs it."""
    event = ResumeRequested(header=Header(f"{run}/resume/{time.time_ns()}", run, 0,
                                          int(time.time() * 1000), "cli/alice"),
                            principal="alice", reason="loss fixed")
    value = CODEC.encode(event)
    version = CODEC.registry.latest(event.event_type).version
    producer = EventProducer(cluster.bootstrap, client_id="test-resume")
    producer.send_bytes(REQUESTS, run, value,
                        [*event_headers(event, version), *sign_request(CAST.alice, value)])
    producer.flush(30.0)


def test_a_replayed_resume_does_not_lift_a_later_pause(cluster: Cluster) -> None:
    cluster.controller()
    cluster.agent("n1", 2)
    doc: dict[str, Any] = spec("paused", ["--steps", "100000", "--step-time", "0.1",
                                          "--nan-from-step", "3"],
                               alerts={"actions": {"non_finite_loss": "pause"}})
    run, _ = submit_signed(cluster, doc, "alice", CAST.alice)
    cluster.wait_facts(run, lambda f: len(of_type(f, "RunPaused")) == 1, timeout=90,
                       what="the first pause")
    _resume(cluster, run)
    cluster.wait_facts(run, lambda f: len(of_type(f, "RunPaused")) == 2, timeout=120,
                       what="the resumed run paused again")
    (resume,) = _requests(cluster, lambda e: isinstance(e, ResumeRequested) and e.run_id == run)
    rid = CODEC.decode(resume.value).event.header.event_id
    _resend(cluster, REQUESTS, run, resume)
    facts = cluster.wait_facts(run, _replayed(rid), what="the replayed resume refused")
    assert len(of_type(facts, "RunResumed")) == 1
    status = json.loads(cluster.cli("status", run, "--json").stdout)
    assert status["state"] == "Queued" and "paused" in status.get("queue_reason", "")
