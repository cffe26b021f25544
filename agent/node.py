"""What the agent says about its node, and under whose name: its versions and its signature.

Every report the agent sends (``AgentRegistered``, ``AgentHeartbeatRecorded``,
``WorkerExited``) is signed with the node's own key (:func:`send_report`,
``events.signing.sign_report``) so that the controller, the follower and
``runledger nodes`` believe it only as this node's (``events.reportdoor``); the
broker's ACLs say only that some holder of the agent role wrote it. Without a
key (a plaintext stack, whose keys log has no anchor) reports go out unsigned.

Tested in tests/agent/test_service.py and tests/e2e/test_node_identity.py.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from events.kafka import EventProducer, event_headers
from events.model import Event
from events.signing import SigningKey, sign_report
from events.topics import REPORTS


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
