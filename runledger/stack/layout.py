"""The on-disk layout of a local stack: ports, ``stack.json`` and ``server.properties``.

A data directory holds ``stack.json`` (cluster id, broker count, ports), a
log4j2 configuration, and one ``node-<id>/`` per node with its
``server.properties``, ``data/`` (the log dirs), ``kafka.log`` and ``kafka.pid``;
its directories are 0700 and its files 0600 (:mod:`runledger.stack.private`).
"""

from __future__ import annotations

import base64
import errno
import json
import os
import random
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from runledger.errors import PortInUseError, StackError
from runledger.stack.private import open_private, private_dir, write_private

HOST = "127.0.0.1"
STATE_FILE = "stack.json"
LOG4J_FILE = "log4j2.properties"
STATE_VERSION = 2  # 2: records ``secure``
ADMIN = "admin"  # the super user of a secure stack
SCRAM = "SCRAM-SHA-512"

# Everything goes to stderr, which the launcher redirects into node-<id>/kafka.log;
# the broker's stdout stays empty and StorageTool's stdout stays parseable.
LOG4J2 = """\
status = warn
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stderr.ref = STDERR
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.change.name = state.change.logger
logger.change.level = WARN
"""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    node_id: int
    port: int
    controller_port: int


@dataclass(frozen=True, slots=True)
class Layout:
    """What ``stack.json`` records: enough to restart, inspect and stop a stack."""

    cluster_id: str
    kafka_version: str
    nodes: tuple[NodeSpec, ...]
    # SASL/SCRAM and ACLs (the default); False: `stack up --insecure`, plaintext.
    # Stacks recorded before this field existed were plaintext.
    secure: bool = False
    # TLS on the client listener (`stack up --tls`), with the stack's own CA.
    tls: bool = False

    @property
    def brokers(self) -> int:
        return len(self.nodes)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{n.port}" for n in self.nodes)


def new_cluster_id() -> str:
    """16 random bytes, base64url without padding: the format StorageTool expects.

    Never starting with '-': StorageTool's argument parser would read such an id
    as an option ("--cluster-id: expected one argument"), one start in 64.
    Kafka's own Uuid.randomUuid() makes the same exclusion.
    """
    while True:
        cid = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def node_dir(data_dir: Path, node_id: int) -> Path:
    return data_dir / f"node-{node_id}"


def load_layout(data_dir: Path) -> Layout | None:
    path = data_dir / STATE_FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        nodes = tuple(NodeSpec(**node) for node in raw["nodes"])
        return Layout(raw["cluster_id"], raw["kafka_version"], nodes,
                      bool(raw.get("secure", False)), bool(raw.get("tls", False)))
    except (ValueError, KeyError, TypeError) as exc:
        raise StackError(f"{path} is unreadable ({exc}); remove that data dir") from exc


def save_layout(data_dir: Path, layout: Layout) -> None:
    private_dir(data_dir)
    doc = {
        "version": STATE_VERSION,
        "cluster_id": layout.cluster_id,
        "kafka_version": layout.kafka_version,
        "nodes": [asdict(n) for n in layout.nodes],
        "secure": layout.secure,
        "tls": layout.tls,
    }
    tmp = data_dir / f"{STATE_FILE}.tmp"
    write_private(tmp, json.dumps(doc, indent=2) + "\n")
    tmp.replace(data_dir / STATE_FILE)


def port_free(port: int) -> bool:
    # SO_REUSEADDR, as the JVM sets it, so that TIME_WAIT leftovers of a previous
    # run do not count as "in use" while a live listener or bound socket does.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def check_ports_free(ports: list[int]) -> None:
    for port in ports:
        if not port_free(port):
            raise PortInUseError(f"port {port} on {HOST} is already in use")


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def wait_ports_free(ports: list[int], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``ports`` to be free; whether they all are."""
    deadline = time.monotonic() + timeout_s
    while not all(port_free(p) for p in ports):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def pick_free_ports(count: int) -> list[int]:
    """Free ports below the kernel's ephemeral range, all distinct.

    Not ``bind(port 0)``: that hands out an ephemeral port, which any outgoing
    connection may take as its local port before the broker binds it (the
    first node of a 3-node cluster dialling its peers did exactly that, and the
    third node died at start-up on "address in use").
    """
    low, _high = _ephemeral_range()
    top = max(low - 1, 11_000)
    rng = random.SystemRandom()
    ports: list[int] = []
    for _ in range(2000):
        port = rng.randint(10_000, top)
        if port not in ports and port_free(port):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise StackError(f"found only {len(ports)} free ports of {count} in 10000..{top}")


def plan_nodes(brokers: int, port: int | None) -> tuple[NodeSpec, ...]:
    """Client ports ``port, port+1, ...`` when a port is given, else free ones;
    controller ports are always picked free."""
    if port is not None:
        client = [port + i for i in range(brokers)]
        check_ports_free(client)
        controller = pick_free_ports(brokers)
    else:
        picked = pick_free_ports(2 * brokers)
        client, controller = picked[:brokers], picked[brokers:]
    return tuple(NodeSpec(i + 1, client[i], controller[i]) for i in range(brokers))


# A TLS stack's (CA certificate, broker keystore) files, as runledger.stack.tls made them.
TlsPaths = tuple[Path, Path]


def server_properties(data_dir: Path, layout: Layout, node: NodeSpec,
                      admin_password: str | None = None, tls: TlsPaths | None = None) -> str:
    brokers = layout.brokers
    replication = 3 if brokers >= 3 else 1
    min_isr = 2 if brokers >= 3 else 1
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in layout.nodes)
    props = {
        # Combined broker+controller nodes with a static quorum: the simplest KRaft
        # setup that works for one node and for three alike.
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{node.port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node_dir(data_dir, node.node_id) / "data"),
        # Internal topics must fit the cluster, or transactional producers and
        # consumer groups hang waiting for replicas that can never exist.
        "default.replication.factor": str(replication),
        "min.insync.replicas": str(min_isr),
        "offsets.topic.replication.factor": str(replication),
        "offsets.topic.num.partitions": "6",
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": "6",
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "share.coordinator.state.topic.num.partitions": "3",
        # Local and test use: no rebalance delay, and no 128 MiB cleaner buffer
        # allocated at start on a small machine.
        "group.initial.rebalance.delay.ms": "0",
        "log.cleaner.dedupe.buffer.size": "2097152",
        "num.network.threads": "2",
        "num.io.threads": "4",
    }
    if layout.secure:
        if admin_password is None:
            raise StackError("a secure stack needs its admin password")
        props.update(secure_properties(node, admin_password, tls if layout.tls else None))
    return "".join(f"{key}={value}\n" for key, value in props.items())


def secure_properties(node: NodeSpec, admin_password: str,
                      tls: TlsPaths | None = None) -> dict[str, str]:
    """SASL on both listeners, Kafka's StandardAuthorizer, deny when no ACL matches.

    Clients and brokers use SCRAM-SHA-512 on the client listener (credentials
    live in the cluster metadata, the admin's bootstrapped at format). The
    controller listener uses PLAIN with the admin's password from this file:
    SCRAM cannot serve it, because its credentials are read from the metadata
    that the controllers themselves serve. With ``tls`` the client listener is
    SASL_SSL with the stack's CA and broker keystore (PEM files); the
    controller listener stays on loopback without TLS.
    """
    jaas_user = f'username="{ADMIN}" password="{admin_password}"'
    name = "SASL_SSL" if tls else "SASL_PLAINTEXT"
    props = {
        "listeners": f"{name}://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": f"{name}://{HOST}:{node.port}",
        "inter.broker.listener.name": name,
        "listener.security.protocol.map": f"{name}:{name},CONTROLLER:SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": SCRAM,
        "sasl.mechanism.controller.protocol": "PLAIN",
        f"listener.name.{name.lower()}.sasl.enabled.mechanisms": SCRAM,
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        f"listener.name.{name.lower()}.scram-sha-512.sasl.jaas.config":
            f"org.apache.kafka.common.security.scram.ScramLoginModule required {jaas_user};",
        "listener.name.controller.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'{jaas_user} user_{ADMIN}="{admin_password}";',
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{ADMIN}",
    }
    if tls:
        ca, keystore = tls
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
                      "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca)})
    return props


def write_configs(data_dir: Path, layout: Layout, admin_password: str | None = None,
                  tls: TlsPaths | None = None) -> None:
    write_private(data_dir / LOG4J_FILE, LOG4J2)
    for node in layout.nodes:
        home = private_dir(node_dir(data_dir, node.node_id))
        private_dir(home / "data")  # the log dirs: every topic's segments, the SCRAM hashes
        path = home / "server.properties"
        # It may hold the admin's password: owner-only from the first byte.
        with open_private(path) as handle:
            handle.write(server_properties(data_dir, layout, node, admin_password, tls))
