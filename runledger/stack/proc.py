"""Starting, finding and stopping the broker JVMs of one data directory.

A pid alone is not proof: pids are reused. Before a pid is reported alive or
signalled, its ``/proc/<pid>/cmdline`` must be a ``kafka.Kafka`` java process
whose ``server.properties`` lies in this data directory.

Tested in tests/runledger/stack/test_cluster.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from runledger.errors import StackError
from runledger.stack.layout import ADMIN, LOG4J_FILE, SCRAM, Layout, node_dir
from runledger.stack.private import UMASK, open_private_bytes, write_private

HEAP = ["-Xms256m", "-Xmx512m"]
PID_FILE = "kafka.pid"
LOG_FILE = "kafka.log"


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise StackError("java (17 or newer) is not on PATH; the Kafka 4 broker needs it")
    return found


def _jvm(data_dir: Path, lib: Path, *extra: str) -> list[str]:
    return [
        java_binary(),
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={data_dir / LOG4J_FILE}",
        *extra,
        "-cp",
        f"{lib}/*",
    ]


def format_storage(data_dir: Path, lib: Path, layout: Layout, node_ids: Iterable[int],
                   admin_password: str | None = None) -> None:
    """Format the given nodes' log dirs with the cluster id (no-op once formatted).

    A secure stack's admin SCRAM credential is written into the first metadata
    records here (KIP-900): the brokers authenticate to each other with it, so
    it must exist before any of them starts. The password is on this one
    process's command line for the second it runs (StorageTool reads no file).
    """
    scram = ([] if admin_password is None else
             ["--add-scram", f"{SCRAM}=[name={ADMIN},password={admin_password}]"])
    procs = []
    for node_id in node_ids:
        props = node_dir(data_dir, node_id) / "server.properties"
        cmd = [
            *_jvm(data_dir, lib, "-Xmx256m"),
            "kafka.tools.StorageTool", "format", "--ignore-formatted",
            "-t", layout.cluster_id, "-c", str(props), *scram,
        ]  # fmt: skip
        # Nodes format in parallel: each is a JVM start of a second or two. umask 077:
        # the metadata it writes (the admin's SCRAM hash among it) is the owner's alone.
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      umask=UMASK))
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            lines = out.decode(errors="replace").strip().splitlines() or ["no output"]
            raise StackError(f"kafka StorageTool format failed: {lines[-1]}")


def launch(data_dir: Path, lib: Path, node_id: int) -> int:
    """Start one node detached from this process and record its pid."""
    home = node_dir(data_dir, node_id)
    cmd = [
        *_jvm(data_dir, lib, *HEAP, f"-Dkafka.logs.dir={home / 'logs'}"),
        "kafka.Kafka",
        str(home / "server.properties"),
    ]
    log_path = home / LOG_FILE
    if log_path.exists():
        # Keep the previous run's log for post-mortems, but start this one clean
        # so log_tail() never reports an old run's error.
        log_path.replace(home / f"{LOG_FILE}.1")
    with open_private_bytes(log_path) as log:
        # A new session: Ctrl-C in the terminal that ran `stack up` must not stop
        # the broker, and the broker must not hold this terminal. umask 077: every
        # segment, index and checkpoint it writes is 0600, every directory 0700.
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=home,
            umask=UMASK,
        )
    write_private(home / PID_FILE, f"{proc.pid}\n")
    return proc.pid


def read_pid(data_dir: Path, node_id: int) -> int | None:
    try:
        return int((node_dir(data_dir, node_id) / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _reap(pid: int) -> None:
    # When this process launched the broker (the Python API in tests) a dead
    # child stays a zombie until waited for; reap it so the pid really goes.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def is_ours(pid: int, data_dir: Path, node_id: int) -> bool:
    """True when ``pid`` is a live broker JVM of this data dir's node ``node_id``."""
    _reap(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if stat.rpartition(")")[2].split()[0] in ("Z", "X"):
        return False
    props = str(node_dir(data_dir, node_id) / "server.properties").encode()
    return bool(argv) and Path(argv[0].decode(errors="replace")).name == "java" and props in argv


def started(pid: int) -> bool:
    """True while ``pid`` (a node this process just launched) has not exited.

    Not :func:`is_ours`: between fork and exec the child's /proc shows this
    Python's command line, not the JVM's, and on a loaded machine that lasts
    long enough to pass for an exit, which made ``up`` launch a second JVM on
    the same data directory.
    """
    _reap(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def live_pid(data_dir: Path, node_id: int) -> int | None:
    pid = read_pid(data_dir, node_id)
    return pid if pid is not None and is_ours(pid, data_dir, node_id) else None


def clear_pid(data_dir: Path, node_id: int) -> None:
    (node_dir(data_dir, node_id) / PID_FILE).unlink(missing_ok=True)


def signal_node(data_dir: Path, node_id: int, sig: signal.Signals) -> int | None:
    pid = live_pid(data_dir, node_id)
    if pid is not None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return None
    return pid


def stop_nodes(data_dir: Path, node_ids: Iterable[int], timeout: float) -> list[int]:
    """SIGTERM every live node at once, SIGKILL whatever is left after ``timeout``.

    Returns the pids that were stopped; pid files are removed either way.
    """
    ids = list(node_ids)
    pids = {n: p for n in ids if (p := signal_node(data_dir, n, signal.SIGTERM)) is not None}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(is_ours(p, data_dir, n) for n, p in pids.items()):
        time.sleep(0.2)
    for node_id in pids:
        signal_node(data_dir, node_id, signal.SIGKILL)
    deadline = time.monotonic() + 30  # a SIGKILLed JVM on a loaded machine takes a while
    while time.monotonic() < deadline and any(is_ours(p, data_dir, n) for n, p in pids.items()):
        time.sleep(0.1)
    for node_id in ids:
        clear_pid(data_dir, node_id)
    return sorted(pids.values())


def log_tail(data_dir: Path, node_id: int, lines: int = 1) -> str:
    """The last ERROR line of a node's log (or its last line): the likely cause."""
    path = node_dir(data_dir, node_id) / LOG_FILE
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    errors = [line for line in text if " ERROR " in line or "Exception" in line]
    return "\n".join((errors or text)[-lines:])
