"""Admin calls against a running cluster: readiness, topic creation, topic reports.

These work for any cluster (the local stack or ``RUNLEDGER_BOOTSTRAP``), so
they take a bootstrap string and never touch local processes.

Tested in tests/runledger/stack/test_cluster.py.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException

# confluent_kafka.admin re-exports these without __all__, which mypy --strict
# rejects; the public path is still the documented one.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from events.kafka.connection import client_config
from events.topics import TopicSpec
from runledger.errors import BrokerUnreachableError, StackError

# Configs reported by `stack status`: the ones the design relies on.
KEY_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes", "min.insync.replicas")


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int
    replication: int
    config: dict[str, str] = field(default_factory=dict)
    under_replicated: int = 0
    offline: int = 0


# Which credentials an admin call uses: a file's path, "" for none (a plaintext
# stack, whatever the environment says), None for $RUNLEDGER_CREDENTIALS.
Credentials = str | None


def admin_client(bootstrap: str, credentials: Credentials = None) -> AdminClient:
    # log_level 0: librdkafka would otherwise print its own connection-refused
    # lines to stderr, on top of our one-line message.
    return AdminClient(client_config(bootstrap, {"log_level": 0}, credentials))


def _unreachable(bootstrap: str, timeout: float, exc: KafkaException) -> BrokerUnreachableError:
    reason = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
    return BrokerUnreachableError(
        f"no Kafka broker answered at {bootstrap} within {timeout:g}s ({reason})"
    )


def check_reachable(bootstrap: str, timeout: float = 2.0) -> None:
    """Fail fast when no bootstrap address accepts a TCP connection at all;
    librdkafka would otherwise retry until the request timeout."""
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        with contextlib.suppress(OSError, ValueError):
            socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout).close()
            return
    raise BrokerUnreachableError(f"no Kafka broker answered at {bootstrap} (connection refused)")


def cluster_nodes(bootstrap: str, timeout: float = 10.0,
                  credentials: Credentials = None) -> list[tuple[int, str, int]]:
    """``(node_id, host, port)`` of the registered, unfenced brokers; raises
    :class:`BrokerUnreachableError` if nothing answers."""
    check_reachable(bootstrap)
    admin = admin_client(bootstrap, credentials)
    try:
        result = admin.describe_cluster(request_timeout=timeout).result()
    except KafkaException as exc:
        raise _unreachable(bootstrap, timeout, exc) from exc
    return sorted((int(n.id), str(n.host), int(n.port)) for n in result.nodes)


def wait_ready(
    bootstrap: str, brokers: int, timeout: float, alive: Callable[[], str | None],
    credentials: Credentials = None,
) -> None:
    """Wait until ``brokers`` brokers are registered. ``alive`` returns a reason
    string as soon as a launched process has died, which ends the wait early."""
    admin = admin_client(bootstrap, credentials)
    deadline = time.monotonic() + timeout
    while True:
        dead = alive()
        if dead is not None:
            raise StackError(dead)
        left = deadline - time.monotonic()
        if left <= 0:
            raise BrokerUnreachableError(
                f"{brokers} broker(s) did not register at {bootstrap} within {timeout:g}s"
            )
        try:
            result = admin.describe_cluster(request_timeout=max(1.0, min(5.0, left))).result()
            if len(result.nodes) >= brokers:
                return
        except KafkaException:
            pass
        time.sleep(0.3)


def ensure_topics(
    bootstrap: str, specs: list[TopicSpec], replication: int, timeout: float = 60.0,
    credentials: Credentials = None,
) -> list[str]:
    """Create the missing topics; existing ones are left as they are.

    Right after start a broker may not yet count its peers, so replication-3
    creation can fail transiently; it is retried until ``timeout``. Returns once
    every partition of these topics has a leader.
    """
    admin = admin_client(bootstrap, credentials)
    deadline = time.monotonic() + timeout
    pending = {s.name: s for s in specs}
    last = ""
    while pending and time.monotonic() < deadline:
        new = [
            NewTopic(s.name, s.partitions, replication, config=dict(s.config))
            for s in pending.values()
        ]
        for name, future in admin.create_topics(new, request_timeout=15).items():
            try:
                future.result()
            except KafkaException as exc:
                err = exc.args[0]
                if not (isinstance(err, KafkaError) and err.code() == err.TOPIC_ALREADY_EXISTS):
                    last = f"{name}: {err.str() if isinstance(err, KafkaError) else err}"
                    continue
            pending.pop(name)
        if pending:
            time.sleep(0.5)
    if pending:
        raise StackError(f"could not create topics at {bootstrap}: {last}")
    _wait_leaders(admin, bootstrap, [s.name for s in specs], deadline)
    return [s.name for s in specs]


def _wait_leaders(admin: AdminClient, bootstrap: str, names: list[str], deadline: float) -> None:
    while True:
        try:
            topics = admin.list_topics(timeout=5).topics
        except KafkaException as exc:
            raise _unreachable(bootstrap, 5, exc) from exc
        leaderless = [
            n for n in names
            if n not in topics or any(p.leader < 0 for p in topics[n].partitions.values())
        ]  # fmt: skip
        if not leaderless:
            return
        if time.monotonic() >= deadline:
            raise StackError(f"topics without partition leaders at {bootstrap}: {leaderless}")
        time.sleep(0.3)


def describe_topics(bootstrap: str, timeout: float = 10.0,
                    credentials: Credentials = None) -> list[TopicInfo]:
    """Every non-internal topic with partitions, replication and key configs."""
    check_reachable(bootstrap)
    admin = admin_client(bootstrap, credentials)
    try:
        topics = admin.list_topics(timeout=timeout).topics
    except KafkaException as exc:
        raise _unreachable(bootstrap, timeout, exc) from exc
    names = sorted(n for n in topics if not n.startswith("__"))
    configs: dict[str, dict[str, str]] = {n: {} for n in names}
    if names:
        resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
        for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
            try:
                entries = future.result()
            except KafkaException:
                continue  # reported without configs rather than failing the whole status
            configs[resource.name] = {
                key: str(entries[key].value) for key in KEY_CONFIGS if key in entries
            }
    infos = []
    for name in names:
        parts = topics[name].partitions.values()
        infos.append(
            TopicInfo(
                name=name,
                partitions=len(parts),
                replication=max((len(p.replicas) for p in parts), default=0),
                config=configs[name],
                under_replicated=sum(1 for p in parts if len(p.isrs) < len(p.replicas)),
                offline=sum(1 for p in parts if p.leader < 0),
            )
        )
    return infos
