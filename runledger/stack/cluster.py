"""The local cluster of one data directory (:class:`Stack`), and an existing one.

``Stack(data_dir, brokers).up()`` fetches the broker jars (once, into a cache
outside the clone), writes one combined broker+controller ``server.properties``
per node, formats storage, starts the JVMs detached, waits until every broker
is registered and creates the runledger topics; a secure stack also gets its
role principals and its signing keys (:mod:`runledger.stack.keys`).
``down()`` stops exactly the processes recorded in that data dir. :func:`cluster_up` and
:func:`cluster_status` do the same for an existing cluster
(``RUNLEDGER_BOOTSTRAP``).
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from events.topics import replication_for, topic_specs
from runledger.config import stack_data_dir
from runledger.errors import BrokerUnreachableError, NotRunningError, StackError
from runledger.stack import admin, principals, proc
from runledger.stack import keys as stack_keys
from runledger.stack import layout as cfg
from runledger.stack.admin import TopicInfo
from runledger.stack.credentials import admin_password, credentials_file
from runledger.stack.jars import ensure_jars, kafka_version, pom_path
from runledger.stack.private import claim, open_private, tighten
from runledger.stack.tls import ensure_tls, tls_files

__all__ = [
    "BrokerInfo",
    "Stack",
    "StackError",
    "StackInfo",
    "StackStatus",
    "TopicInfo",
    "cluster_status",
    "cluster_up",
]


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    port: int
    pid: int | None = None
    alive: bool = True
    answering: bool = True


@dataclass(frozen=True, slots=True)
class StackInfo:
    """What ``up`` reports: where to connect and which processes serve it."""

    bootstrap: str
    brokers: list[BrokerInfo]
    data_dir: Path | None
    topics: list[str]
    # The admin's credentials file of a secure local stack (None: plaintext, or
    # an existing cluster); the role files lie next to it.
    credentials: Path | None = None
    # The directory of the signing keys of a secure local stack (runledger.stack.keys).
    keys: Path | None = None

    @property
    def secure(self) -> bool:
        return self.credentials is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "bootstrap": self.bootstrap,
            "brokers": [{"node_id": b.node_id, "port": b.port, "pid": b.pid} for b in self.brokers],
            "data_dir": str(self.data_dir) if self.data_dir else None,
            "topics": self.topics,
            "secure": self.secure,
            "credentials": str(self.credentials) if self.credentials else None,
            "keys": str(self.keys) if self.keys else None,
        }


@dataclass(frozen=True, slots=True)
class StackStatus:
    bootstrap: str
    data_dir: Path | None
    brokers: list[BrokerInfo]
    topics: list[TopicInfo] = field(default_factory=list)
    error: str | None = None

    @property
    def running(self) -> bool:
        return any(b.alive for b in self.brokers) and self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "bootstrap": self.bootstrap,
            "data_dir": str(self.data_dir) if self.data_dir else None,
            "running": self.running,
            "error": self.error,
            "brokers": [asdict(b) for b in self.brokers],
            "topics": [asdict(t) for t in self.topics],
        }


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((cfg.HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


class Stack:
    """The local cluster whose state lives in ``data_dir``.

    ``brokers`` and ``secure`` only matter to :meth:`up` on an empty data dir;
    afterwards the recorded layout decides, and asking for a different count or
    mode is an error. ``secure=None`` means "as recorded", secure for a new stack.
    """

    def __init__(self, data_dir: Path | str | None = None, brokers: int = 1,
                 secure: bool | None = None, tls: bool = False) -> None:
        if brokers not in (1, 3):
            raise StackError(f"--brokers must be 1 or 3, not {brokers}")
        self.data_dir = Path(data_dir or stack_data_dir()).expanduser().resolve()
        self.brokers = brokers
        self.secure = secure
        self.tls = tls  # only for a new data dir: TLS on the client listener
        if tls and secure is False:
            raise StackError("--tls needs the secure stack: drop --insecure")

    # -- public API ---------------------------------------------------------

    def up(self, port: int | None = None, timeout: float | None = None) -> StackInfo:
        """Start the cluster (or the nodes of it that are down) and create the topics.

        Idempotent: on a running stack it only re-checks readiness and topics. The data
        dir ends owner-only, what an older runledger left there included (stack.private).
        """
        claim(self.data_dir, cfg.STATE_FILE)
        wait = timeout or (60.0 if self.brokers == 1 else 90.0)
        with self._locked():
            layout = cfg.load_layout(self.data_dir)
            self._check_recorded(layout)
            running = self._running(layout)
            if layout is not None and len(running) == layout.brokers:
                if port is not None and layout.nodes[0].port != port:
                    raise StackError(f"{self.data_dir}: stack already runs at {layout.bootstrap}")
                admin.wait_ready(layout.bootstrap, layout.brokers, wait, lambda: None,
                                 self._credentials(layout))
            else:
                layout = self._start(layout, running, port, wait)
            creds = self._credentials(layout)
            names = admin.ensure_topics(layout.bootstrap, topic_specs(self.brokers),
                                        replication_for(self.brokers), credentials=creds)
            keys = None
            if layout.secure:
                principals.ensure_roles(self.data_dir, layout.bootstrap, creds,
                                        self._ca(layout))
                keys = stack_keys.ensure_keys(self.data_dir, layout.bootstrap, creds)
            tighten(self.data_dir)
            brokers = [BrokerInfo(n.node_id, n.port, proc.read_pid(self.data_dir, n.node_id))
                       for n in layout.nodes]  # fmt: skip
            admin_file = credentials_file(self.data_dir, cfg.ADMIN) if layout.secure else None
            return StackInfo(layout.bootstrap, brokers, self.data_dir, names, admin_file, keys)

    def down(self, purge: bool = False, timeout: float = 30.0) -> list[int]:
        """Stop this data dir's brokers (SIGTERM, then SIGKILL after ``timeout``).

        Returns the pids stopped. ``purge`` also deletes the data dir, but only
        one that holds a ``stack.json``, so a mistyped path is never wiped.
        """
        if not self.data_dir.is_dir():
            return []
        with self._locked():
            layout = cfg.load_layout(self.data_dir)
            if layout is None:
                return []
            stopped = proc.stop_nodes(self.data_dir, [n.node_id for n in layout.nodes], timeout)
            # A process is gone from /proc a moment before the kernel closes its
            # sockets: return once the ports are free, so an `up` right after works.
            cfg.wait_ports_free([p for n in layout.nodes for p in (n.port, n.controller_port)],
                                10.0)
        if purge:
            _remove_tree(self.data_dir)
        return stopped

    def status(self) -> StackStatus:
        layout = cfg.load_layout(self.data_dir)
        if layout is None:
            raise NotRunningError(f"no stack in {self.data_dir} (run `runledger stack up`)")
        brokers = []
        for node in layout.nodes:
            pid = proc.read_pid(self.data_dir, node.node_id)
            alive = pid is not None and proc.is_ours(pid, self.data_dir, node.node_id)
            brokers.append(BrokerInfo(node.node_id, node.port, pid, alive, _answers(node.port)))
        if not any(b.alive for b in brokers):
            error = f"no broker of {self.data_dir} is running"
            return StackStatus(layout.bootstrap, self.data_dir, brokers, error=error)
        try:
            topics = admin.describe_topics(layout.bootstrap,
                                           credentials=self._credentials(layout))
        except BrokerUnreachableError as exc:
            return StackStatus(layout.bootstrap, self.data_dir, brokers, error=str(exc))
        return StackStatus(layout.bootstrap, self.data_dir, brokers, topics)

    def kill_node(self, node_id: int, sig: signal.Signals = signal.SIGKILL) -> int:
        """Signal one node (SIGKILL by default, a crash) and wait until it is gone.

        For failover tests; ``up()`` restarts it.
        """
        pid = proc.signal_node(self.data_dir, node_id, sig)
        if pid is None:
            raise NotRunningError(f"node {node_id} of {self.data_dir} is not running")
        deadline = time.monotonic() + 30
        while proc.is_ours(pid, self.data_dir, node_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        return pid

    @property
    def bootstrap(self) -> str:
        layout = cfg.load_layout(self.data_dir)
        if layout is None:
            raise NotRunningError(f"no stack in {self.data_dir}")
        return layout.bootstrap

    def __enter__(self) -> StackInfo:
        return self.up()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.down()

    # -- internals ----------------------------------------------------------

    def _check_recorded(self, layout: cfg.Layout | None) -> None:
        if layout is None:
            return
        if layout.brokers != self.brokers:
            raise StackError(
                f"{self.data_dir} holds a {layout.brokers}-broker stack; "
                f"use --brokers {layout.brokers} or another --data-dir"
            )
        if self.secure is not None and self.secure != layout.secure:
            held = "a secure" if layout.secure else "a plaintext (--insecure)"
            fix = "drop --insecure" if layout.secure else "add --insecure"
            raise StackError(f"{self.data_dir} holds {held} stack; {fix} or use another "
                             "--data-dir")
        if self.tls and not layout.tls:
            raise StackError(f"{self.data_dir} holds a stack without TLS; drop --tls or use "
                             "another --data-dir")

    def _ca(self, layout: cfg.Layout) -> Path | None:
        return tls_files(self.data_dir).ca if layout.tls else None

    def _credentials(self, layout: cfg.Layout) -> str:
        # The stack's own admin file, never $RUNLEDGER_CREDENTIALS: that may name
        # another cluster's principal. "" is plaintext.
        return str(credentials_file(self.data_dir, cfg.ADMIN)) if layout.secure else ""

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # Serialises up/down on one data dir (two terminals, make and pytest).
        with open_private(self.data_dir / ".lock") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _running(self, layout: cfg.Layout | None) -> set[int]:
        if layout is None:
            return set()
        return {n.node_id for n in layout.nodes if proc.live_pid(self.data_dir, n.node_id)}

    def _plan(self, layout: cfg.Layout | None, running: set[int], port: int | None) -> cfg.Layout:
        """The layout to launch with: the recorded one where its ports are usable."""
        if layout is None:
            version = kafka_version(pom_path())
            return cfg.Layout(cfg.new_cluster_id(), version, cfg.plan_nodes(self.brokers, port),
                              self.secure is not False, self.tls)
        if running:
            if port is not None and layout.nodes[0].port != port:
                raise StackError(f"part of the stack in {self.data_dir} runs at {layout.bootstrap}")
            stopped = [n for n in layout.nodes if n.node_id not in running]
            cfg.check_ports_free([p for n in stopped for p in (n.port, n.controller_port)])
            return layout
        recorded = [p for n in layout.nodes for p in (n.port, n.controller_port)]
        if port is None and all(cfg.port_free(p) for p in recorded):
            return layout
        # Nothing runs and a recorded port is taken (or a new one was asked for):
        # node ids and storage stay, only the listeners move.
        nodes = cfg.plan_nodes(self.brokers, port)
        return cfg.Layout(layout.cluster_id, layout.kafka_version, nodes, layout.secure,
                          layout.tls)

    def _start(
        self, layout: cfg.Layout | None, running: set[int], port: int | None, wait: float
    ) -> cfg.Layout:
        lib = ensure_jars()
        failure: StackError | None = None
        launched: list[int] = []
        # KRaft quorum formation can time out on a loaded machine; retrying
        # from the same storage is what the shipped scripts' users do by hand.
        causes: list[str] = []
        for _attempt in range(3):
            layout = self._plan(layout, running, port)
            files = ensure_tls(self.data_dir) if layout.tls else None
            password = admin_password(self.data_dir, self._ca(layout)) if layout.secure else None
            cfg.save_layout(self.data_dir, layout)
            cfg.write_configs(self.data_dir, layout, password,
                              (files.ca, files.keystore) if files is not None else None)
            unformatted = [n for n in layout.nodes if not self._formatted(n.node_id)]
            if unformatted:
                proc.format_storage(self.data_dir, lib, layout, [n.node_id for n in unformatted],
                                    password)
            launched = [n.node_id for n in layout.nodes if n.node_id not in running]
            for node_id in launched:
                proc.launch(self.data_dir, lib, node_id)
            try:
                admin.wait_ready(layout.bootstrap, layout.brokers, wait, self._died(launched),
                                 self._credentials(layout))
                return layout
            except StackError as exc:
                failure = exc
                causes += [f"node {n}: {proc.log_tail(self.data_dir, n)}" for n in launched
                           if proc.log_tail(self.data_dir, n)]
                proc.stop_nodes(self.data_dir, launched, timeout=5.0)
                running = self._running(layout)
            except BaseException:
                # Ctrl-C mid-start: leave no half-started brokers behind.
                proc.stop_nodes(self.data_dir, launched, timeout=5.0)
                raise
        node = next(iter(launched), 1)
        log = cfg.node_dir(self.data_dir, node) / proc.LOG_FILE
        seen = "; ".join(causes[-3:])
        raise StackError(f"{failure}; see {log}" + (f" ({seen})" if seen else ""))

    def _formatted(self, node_id: int) -> bool:
        return (cfg.node_dir(self.data_dir, node_id) / "data" / "meta.properties").is_file()

    def _died(self, node_ids: list[int]) -> Callable[[], str | None]:
        def check() -> str | None:
            for node_id in node_ids:
                pid = proc.read_pid(self.data_dir, node_id)
                # started(), not live_pid(): a JVM not yet exec'd is not an exit
                if pid is None or not proc.started(pid):
                    return f"kafka node {node_id} exited during start-up"
            return None

        return check


def cluster_up(bootstrap: str, brokers: int | None = None) -> StackInfo:
    """``up`` against an existing cluster: create the topics, start nothing.

    Replication follows the cluster's size unless ``brokers`` says otherwise.
    """
    nodes = admin.cluster_nodes(bootstrap)
    count = brokers or len(nodes)
    names = admin.ensure_topics(bootstrap, topic_specs(count), replication_for(count))
    return StackInfo(bootstrap, [BrokerInfo(i, port) for i, _, port in nodes], None, names)


def cluster_status(bootstrap: str) -> StackStatus:
    """``status`` against an existing cluster: brokers and topics via the admin API."""
    nodes = admin.cluster_nodes(bootstrap)
    brokers = [BrokerInfo(i, port) for i, _, port in nodes]
    return StackStatus(bootstrap, None, brokers, admin.describe_topics(bootstrap))


def _remove_tree(path: Path, attempts: int = 5) -> None:
    """``rmtree`` that retries: a broker SIGKILLed on a loaded machine may still be
    flushing a segment for a moment after /proc stops showing it as a JVM."""
    for attempt in range(attempts):
        if not path.exists():
            return
        try:
            shutil.rmtree(path)
            return
        except OSError:
            if attempt == attempts - 1:
                raise
            time.sleep(1.0)
