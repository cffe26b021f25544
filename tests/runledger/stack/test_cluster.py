"""``runledger.stack`` and ``runledger stack`` against real broker processes: no mocks.

The ``slow`` tests start clusters of their own in temporary directories, so
they never touch the broker that ``make test`` shares with the other tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from events.kafka.connection import client_config
from events.topics import ALL, RUNS
from runledger.stack import StackInfo
from runledger.stack.admin import cluster_nodes, describe_topics
from tests.stacks import private_stack

# This module's own RUNLEDGER_HOME: the stack `up` remembers there is seen by no other test.
HOME = Path(tempfile.mkdtemp(prefix="runledger-stack-home-"))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``runledger stack ...`` in a subprocess, as a user runs it."""
    return runledger("stack", *args, env=env)


def runledger(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Any ``runledger`` command with nothing exported but RUNLEDGER_HOME (and ``env``)."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("RUNLEDGER_BOOTSTRAP", "RUNLEDGER_CREDENTIALS")}
    base["RUNLEDGER_HOME"] = str(HOME)
    return subprocess.run(
        [sys.executable, "-m", "runledger.cli", *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("runledger: ") and needle in lines[0], lines[0]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child of this process that has exited stays a zombie until reaped.
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["up"]])
def test_dead_bootstrap_is_a_one_line_error(command: list[str]) -> None:
    proc = cli(*command, env={"RUNLEDGER_BOOTSTRAP": "127.0.0.1:1"})
    assert_one_line_error(proc, "no Kafka broker answered at 127.0.0.1:1")
    assert proc.stdout == ""


def test_status_of_an_empty_data_dir_fails(tmp_path: Path) -> None:
    assert_one_line_error(cli("status", "--data-dir", str(tmp_path)), "no stack in")


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    data_dir = tmp_path_factory.mktemp("single")
    proc = cli("up", "--data-dir", str(data_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    try:
        yield data_dir, json.loads(proc.stdout)
    finally:
        cli("down", "--data-dir", str(data_dir), "--purge")


@pytest.mark.slow
def test_up_reports_and_is_idempotent(single: tuple[Path, dict[str, Any]]) -> None:
    data_dir, first = single
    assert first["bootstrap"].startswith("127.0.0.1:")
    assert first["data_dir"] == str(data_dir)
    assert sorted(first["topics"]) == sorted(ALL)
    [broker] = first["brokers"]
    assert broker["node_id"] == 1 and pid_alive(broker["pid"])

    again = cli("up", "--data-dir", str(data_dir), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == first  # same bootstrap, same process
    plain = cli("up", "--data-dir", str(data_dir))
    assert plain.stdout.strip() == first["bootstrap"]


@pytest.mark.slow
def test_status_json_reports_topics(single: tuple[Path, dict[str, Any]]) -> None:
    data_dir, info = single
    proc = cli("status", "--data-dir", str(data_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["running"] is True
    assert [(b["pid"], b["alive"], b["answering"]) for b in report["brokers"]] == [
        (info["brokers"][0]["pid"], True, True)
    ]
    topics = {t["name"]: t for t in report["topics"]}
    assert set(ALL) <= set(topics)
    assert all(topics[n]["replication"] == 1 for n in ALL)
    assert topics[RUNS]["config"]["retention.ms"] == "-1"
    assert topics[RUNS]["config"]["cleanup.policy"] == "delete"
    # RUNLEDGER_BOOTSTRAP (without --data-dir) reports the same cluster via admin calls,
    # as the principal RUNLEDGER_CREDENTIALS names (this stack's own admin).
    remote = cli("status", "--json", env={"RUNLEDGER_BOOTSTRAP": info["bootstrap"],
                                          "RUNLEDGER_CREDENTIALS": info["credentials"]})
    assert remote.returncode == 0, remote.stderr
    assert {t["name"] for t in json.loads(remote.stdout)["topics"]} >= set(ALL)


@pytest.mark.slow
def test_other_commands_find_the_stack_up_started(single: tuple[Path, dict[str, Any]]) -> None:
    data_dir, _ = single
    pointer = json.loads((HOME / "current-stack.json").read_text())
    assert pointer == {"data_dir": str(data_dir)}
    # Nothing exported: the bootstrap and the operator's credentials come from the stack.
    runs = runledger("runs", "--json")
    assert runs.returncode == 0, runs.stderr
    assert json.loads(runs.stdout)["runs"] == []  # answered, as the operator
    status = cli("status", "--json")  # no --data-dir: the remembered one
    assert status.returncode == 0 and json.loads(status.stdout)["data_dir"] == str(data_dir)


@pytest.mark.slow
def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = cli("up", "--data-dir", str(tmp_path / "stack"), "--port", str(port))
    assert_one_line_error(proc, f"port {port} on 127.0.0.1 is already in use")
    assert proc.stdout == ""


@pytest.mark.slow
def test_down_stops_only_its_own_pids(single: tuple[Path, dict[str, Any]]) -> None:
    data_dir, info = single
    pid = info["brokers"][0]["pid"]
    bystander = subprocess.Popen(["sleep", "120"])
    try:
        down = cli("down", "--json")  # the remembered stack
        assert down.returncode == 0, down.stderr
        assert json.loads(down.stdout)["stopped"] == [pid]
        assert not (HOME / "current-stack.json").exists()  # forgotten
        forgot = runledger("runs")
        assert forgot.returncode == 1 and "no Kafka bootstrap address" in forgot.stderr
        assert not pid_alive(pid)
        assert not (data_dir / "node-1" / "kafka.pid").exists()
        # A stale pid file naming someone else's process (pid reuse) is never signalled.
        (data_dir / "node-1" / "kafka.pid").write_text(f"{bystander.pid}\n")
        again = cli("down", "--data-dir", str(data_dir), "--json")
        assert json.loads(again.stdout)["stopped"] == []
        assert bystander.poll() is None
        status = cli("status", "--data-dir", str(data_dir))
        assert status.returncode != 0
        assert "no broker of" in status.stderr and "Traceback" not in status.stderr
    finally:
        bystander.kill()
        bystander.wait()


# -- three brokers: acknowledged writes survive the loss of one ------------------


def _leader_of(info: StackInfo, topic: str, partition: int) -> int:
    consumer = Consumer(client_config(info.bootstrap, {"group.id": "leader-probe"}))
    try:
        meta = consumer.list_topics(topic, timeout=10)
        return int(meta.topics[topic].partitions[partition].leader)
    finally:
        consumer.close()


def _read_all(bootstrap: str, topic: str, partitions: int) -> list[Message]:
    consumer = Consumer(client_config(bootstrap, {
        "group.id": f"verify-{time.monotonic_ns()}", "enable.auto.commit": False,
        "enable.partition.eof": True}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    messages: list[Message] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            err = msg.error()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                at_end.add(int(msg.partition() or 0))
            elif err is not None:
                raise AssertionError(f"consume error: {err}")
            else:
                at_end.discard(int(msg.partition() or 0))
                messages.append(msg)
    finally:
        consumer.close()
    assert len(at_end) == partitions, "did not reach the end of every partition"
    return messages


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_three_brokers_keep_every_acknowledged_write(tmp_path: Path) -> None:
    stack = private_stack(tmp_path / "stack", brokers=3)
    try:
        info = stack.up()
        topics = {t.name: t for t in stack.status().topics}
        for name in ALL:
            assert topics[name].replication == 3
            assert topics[name].config["min.insync.replicas"] == "2"
        partitions = topics[RUNS].partitions

        acked: list[str] = []
        failed: list[str] = []

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            value = msg.value()
            assert isinstance(value, bytes)
            (failed if err is not None else acked).append(value.decode())

        producer = Producer(client_config(info.bootstrap, {
            "acks": "all", "enable.idempotence": True, "linger.ms": 5}))
        total, kill_at = 3000, 1000
        victim = _leader_of(info, RUNS, 0)  # a partition leader: forces a leader election
        for i in range(total):
            if i == kill_at:
                producer.flush(30)  # some writes are acknowledged by the victim as leader
                stack.kill_node(victim)
            run_id = f"run-{i % 40}"
            producer.produce(RUNS, key=run_id, value=f"{run_id}:{i}", on_delivery=on_delivery)
            producer.poll(0)
            if i % 100 == 0:
                time.sleep(0.05)  # a stream, not one burst: writes in flight during failover
        assert producer.flush(120) == 0
        assert failed == []
        assert len(acked) == total

        read = [
            bytes(m.value() or b"").decode() for m in _read_all(info.bootstrap, RUNS, partitions)
        ]
        counts = Counter(read)
        assert [v for v, n in counts.items() if n > 1] == []  # idempotence: no duplicates
        assert set(acked) <= set(counts)
        assert len(read) == total
        # One run's events stay totally ordered on its partition.
        per_run: dict[str, list[int]] = defaultdict(list)
        for value in read:
            run_id, _, seq = value.partition(":")
            per_run[run_id].append(int(seq))
        assert all(seqs == sorted(seqs) for seqs in per_run.values())
        assert _leader_of(info, RUNS, 0) != victim  # leadership really moved

        # up() restarts the killed node in place, and the cluster is whole again.
        stack.up()
        status = stack.status()
        assert [b.alive and b.answering for b in status.brokers] == [True, True, True]
    finally:
        stack.down(purge=True)


@pytest.mark.kafka
def test_session_bootstrap_answers(bootstrap: str, topic_name: str, run_id: str) -> None:
    assert len(cluster_nodes(bootstrap)) >= 1
    assert {t.name for t in describe_topics(bootstrap)} >= set(ALL)
    assert topic_name.startswith("test.test_session_bootstrap_answers-")
    assert run_id.startswith("run-") and run_id[4:] == topic_name[5:]


def test_a_launched_node_not_yet_a_jvm_counts_as_started_until_it_exits(
        tmp_path: Path) -> None:
    """``up`` judges start-up death by the process, not by its command line: a child
    that is not (yet) the broker JVM is not ours by ``is_ours`` but has not exited."""
    from runledger.stack import proc

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert proc.started(child.pid)
        assert not proc.is_ours(child.pid, tmp_path, 1)
        child.kill()
        child.wait(10)
        assert not proc.started(child.pid)
    finally:
        if child.poll() is None:
            child.kill()
