"""What the agent says about its node, and under whose name: its versions and its signature.

Every report the agent sends (``AgentRegistered``, ``AgentHeartbeatRecorded``,
``WorkerExited``) is signed with the node's own key (:func:`send_report`,
``events.signed.signing.sign_report``) so that the controller, the follower and
``runledger nodes`` believe it only as this node's (``events.kafka.reportdoor``); the
broker's ACLs say only that some holder of the agent role wrote it. Without a
key (a plaintext stack, whose keys log has no anchor) reports go out unsigned.

What the agent logs at start about its node: its state as the controller's facts on
``runledger.runs`` leave it (:func:`node_state_line`, ``agent.nodestate``), read for
at most :data:`NODE_STATE_READ_S`.

Tested in tests/agent/test_service.py, tests/agent/test_nodestate.py and
tests/e2e/test_node_identity.py.
"""

from __future__ import annotations

import time
from importlib.metadata import PackageNotFoundError, version

from agent import nodestate
from events.errors import EventsError
from events.kafka.clients import EventProducer, event_headers
from events.kafka.reader import LogReader
from events.model import Event, node_key
from events.signed.signing import SigningKey, sign_report
from events.topics import REPORTS, RUNS


def send_report(producer: EventProducer, event: Event, key: SigningKey | None) -> None:
    """Queue ``event`` on ``runledger.reports``, signed over its exact value bytes."""
    if key is None:
        producer.send(REPORTS, event)
        return
    value = producer.codec.encode(event)
    written = producer.codec.registry.latest(event.event_type).version
    producer.send_bytes(REPORTS, event.run_id, value,
                        [*event_headers(event, written), *sign_report(key, value)])


def torch_version() -> str:
    """The torch installed beside the agent (what its workers import), ``-`` when none."""
    try:
        return version("torch")
    except PackageNotFoundError:
        return "-"


# How long the start line may wait for the node's facts (read beside the start, never
# in its way): a log too long to read by then is reported as a state unknown.
NODE_STATE_READ_S = 10.0


def node_state_line(bootstrap: str, node: str, timeout_s: float = NODE_STATE_READ_S) -> str:
    """The node's start line (``agent.nodestate.line``) from its facts on runledger.runs,
    or, after about ``timeout_s`` at most, why they could not be read."""
    deadline = time.monotonic() + timeout_s
    events: list[Event] = []
    try:
        reader = LogReader(bootstrap, [RUNS], key=node_key(node), key_partition=True,
                           bounded=True, strict=True,
                           timeout_s=max(timeout_s / 2, 0.1), name=f"agent-{node}-state")
        try:
            while not reader.caught_up:
                if time.monotonic() >= deadline:
                    return nodestate.unknown(node, f"not read to its end within {timeout_s:g} s")
                events.extend(r.event for r in reader.read_records(500, 0.2))
        finally:
            reader.close()
    except EventsError as exc:
        return nodestate.unknown(node, str(exc))
    return nodestate.line(node, nodestate.fold(node, events))
