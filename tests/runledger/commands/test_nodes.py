"""``runledger nodes`` and ``runledger node`` on the session's broker, as an operator runs them.

An agent's registration (signed with its node key, enrolled with the session
stack's admin key) and a quarantine fact are on the log: ``nodes`` shows the
node quarantined with the controller's reason, and not a node whose
registration nobody's node key signed; ``node uncordon`` of a node
nobody registered is refused naming it and the known nodes, and writes nothing;
a signed ``node uncordon`` writes a ``NodeOperationRequested`` keyed by the
node that the key ring verifies as the operator's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.node import send_report
from events.kafka.clients import EventProducer
from events.model import NodeOperationRequested, node_key
from events.signed.signing import SigningKey
from events.topics import REPORTS, REQUESTS, RUNS
from runledger.nodekeys import enroll
from tests.events.builders import Ev
from tests.runledger.commands.test_runs import end_offsets
from tests.runledger.commands.test_signed_requests import (
    cli,
    judge,
    refused,
    request_of,
    stack_dir,
)


@pytest.mark.kafka
def test_nodes_shows_a_quarantine_and_node_uncordon_sends_a_signed_request(
        bootstrap: str, unique: str, tmp_path: Path) -> None:
    node = f"n-{unique[-8:]}"
    now = int(time.time() * 1000)
    ev = Ev(node_key(node), start=now - 2_000, tick=1, ids="{run}/e{n}")
    producer = EventProducer(bootstrap)
    node_key_file = tmp_path / "node.key"
    signed, _ = enroll(bootstrap, node, node_key_file,
                       SigningKey.load(stack_dir() / "keys" / "admin.key"))
    send_report(producer, ev.agent_registered(node, slots=4, domain="rack-9", n=0), signed)
    producer.send(RUNS, ev.quarantined(node, reason="3 failures on the node", n=1))
    # Unsigned, on a stack whose keys log has an anchor: believed by no reader.
    producer.send(REPORTS, Ev(node_key(f"{node}-x"), start=now, ids="{run}/e{n}")
                  .agent_registered(f"{node}-x", slots=4))
    producer.flush(30.0)

    out = cli("nodes", "--json")
    assert out.returncode == 0, out.stderr
    [row] = [r for r in json.loads(out.stdout)["nodes"] if r["node"] == node]
    assert not [r for r in json.loads(out.stdout)["nodes"] if r["node"] == f"{node}-x"]
    assert (row["state"], row["why"], row["slots"], row["domain"]) == (
        "quarantined", "3 failures on the node", 4, "rack-9")
    table = cli("nodes")
    assert any(node in line and "quarantined" in line for line in table.stdout.splitlines())

    key = stack_dir() / "keys" / "operator.key"
    before = end_offsets(bootstrap, REQUESTS)
    ghost = ("node", "uncordon", "ghost-node", "--reason", "x", "--key", str(key))
    refused(cli(*ghost), "unknown node 'ghost-node'")
    refused(cli(*ghost), node)  # the known ones listed
    assert end_offsets(bootstrap, REQUESTS) == before

    out = cli("node", "uncordon", node, "--reason", "disk replaced", "--key", str(key), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["node"], doc["operation"], doc["principal"]) == (node, "uncordon", "operator")
    assert doc["key_id"] == SigningKey.load(key).key_id
    event, record = request_of(bootstrap, node_key(node), NodeOperationRequested)
    assert isinstance(event, NodeOperationRequested)
    assert (event.node, event.operation, event.reason) == (node, "uncordon", "disk replaced")
    # The node's operation epoch as read: a quarantine is no operator's operation.
    assert event.epoch == 0
    assert judge(bootstrap, record, "operator") is None
