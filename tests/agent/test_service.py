"""The node agent process (``agent.service``) against a real broker, with real workers."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from agent.decide import REJECTED_EXIT_CODE
from agent.testworker import CRASH_EXIT_CODE, TERM_EXIT_CODE
from events.kafka.clients import EventProducer
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    GroupStartCommanded,
    GroupStopCommanded,
    Header,
    MembersHeartbeatRecorded,
    NodeQuarantined,
    StepCommitted,
    WorkerExited,
    node_key,
)
from events.signed.signing import SigningKey
from events.topics import COMMANDS, RUNS
from events.workerlog import worker_log_file
from runledger.nodekeys import enroll
from tests.agent.commands import start_cmd, stop_cmd
from tests.agent.tail import STARTED_PID, Tail, kill_tree
from tests.runledger.commands.test_signed_requests import stack_dir


@dataclass
class Running:
    node: str
    proc: subprocess.Popen[bytes]
    log: Path
    work_dir: Path
    tail: Tail
    producer: EventProducer

    def send(self, *commands: GroupStartCommanded | GroupStopCommanded) -> None:
        for c in commands:
            self.producer.send(COMMANDS, c)
        self.producer.flush()

    def exits(self, run: str) -> dict[str, WorkerExited]:
        return {e.logical_id: e for e in self.tail.of(run, WorkerExited)}

    def wait_exits(self, run: str, n: int, timeout_s: float = 30) -> dict[str, WorkerExited]:
        self.tail.wait_for(f"{n} exits of {run}", lambda: len(self.exits(run)) >= n, timeout_s)
        return self.exits(run)

    def wait_log(self, text: str, timeout_s: float = 20) -> None:
        self.tail.wait_for(f"agent log line {text!r}",
                           lambda: text in self.log.read_text(errors="replace"), timeout_s)


def start_agent(bootstrap: str, tmp: Path, slots: int, trust_unsigned: bool = True,
                node: str | None = None, extra: tuple[str, ...] = (),
                env: dict[str, str] | None = None) -> Running:
    """An agent driven by these tests' hand-made commands: ``--trust-unsigned`` unless
    told otherwise (tests/agent/test_signed_commands.py runs one that checks); ``extra``
    options and ``env`` (over this process's) as a test needs them."""
    node = node or f"node-{uuid.uuid4().hex[:8]}"
    # Its own node key, enrolled with the session stack's admin key: it signs every report.
    enroll(bootstrap, node, tmp / f"{node}.key",
           SigningKey.load(stack_dir() / "keys" / "admin.key"))
    tail = Tail(bootstrap)
    log = tmp / f"{node}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runledger.cli", "agent", "--node", node, "--slots", str(slots),
             "--domain", "rack-7", "--heartbeat-interval", "0.3", "--grace", "2",
             "--work-dir", str(tmp / node), *(["--trust-unsigned"] if trust_unsigned else []),
             "--node-key", str(tmp / f"{node}.key"), *extra],
            env={**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap, **(env or {})}, stdout=out,
            stderr=out,
        )
    agent = Running(node, proc, log, tmp / node, tail, EventProducer(bootstrap))
    try:
        tail.wait_for("AgentRegistered", lambda: bool(tail.of(node_key(node), AgentRegistered)))
    except BaseException:
        stop_agent(agent)
        raise
    return agent


def stop_agent(agent: Running) -> None:
    kill_tree(agent.proc, agent.log)
    agent.tail.close()


@pytest.fixture(scope="module")
def agent(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_agent(bootstrap, tmp_path_factory.mktemp("agent"), slots=3)
    yield running
    stop_agent(running)


@pytest.mark.kafka
def test_registers_and_heartbeats(agent: Running) -> None:
    key = node_key(agent.node)

    def beats() -> list[AgentHeartbeatRecorded]:
        return agent.tail.of(key, AgentHeartbeatRecorded)

    agent.tail.wait_for("2 heartbeats", lambda: len(beats()) >= 2)
    agent.wait_log(f"node {agent.node}: ready")  # no fact names it
    (reg,) = agent.tail.of(key, AgentRegistered)
    assert (reg.node, reg.slots, reg.domain, reg.generation) == (agent.node, 3, "rack-7", 0)
    assert reg.header.producer == f"agent/{agent.node}"
    assert reg.work_dir == str(agent.work_dir.absolute())  # where `logs` finds running workers
    # What preflight compares across nodes: this machine's Python, torch by its metadata.
    assert reg.python_version == platform.python_version() and reg.torch_version
    beat = beats()[-1]
    assert (beat.node, beat.slots, beat.domain) == (agent.node, 3, "rack-7")
    assert beat.busy_slots >= 0 and beat.header.producer == f"agent/{agent.node}"


@pytest.mark.kafka
def test_launches_a_group_once_and_reports_steps_and_exits(agent: Running, run_id: str) -> None:
    now = int(time.time() * 1000)
    cmd = start_cmd(agent.node, run_id, 1, ("r0", "r1"), "--steps", "3", "--step-time", "0.1",
                    at=now, env={"RUNLEDGER_HEARTBEAT_INTERVAL_S": "0.2"})
    agent.send(cmd, cmd)  # the duplicate must not launch a second group
    exits = agent.wait_exits(run_id, 2)
    assert {lid: (e.exit_code, e.signal) for lid, e in exits.items()} == {
        "r0": (0, None), "r1": (0, None)}
    assert all(e.generation == 1 and e.node == agent.node for e in exits.values())
    assert exits["r0"].header.event_id == f"{run_id}/g1/r0/exited"
    assert exits["r0"].header.causation_id == cmd.header.event_id
    assert [s.step for s in agent.tail.of(run_id, StepCommitted)] == [1, 2, 3]
    agent.wait_log("duplicate command id")
    agent.tail.settle(0.5)
    assert len(agent.tail.of(run_id, WorkerExited)) == 2
    assert agent.log.read_text().count(f"{run_id}/g1/r0: started pid") == 1
    assert (agent.work_dir / run_id / "g1" / "r1.log").read_bytes() == b""


@pytest.mark.kafka
def test_a_start_for_an_older_generation_is_ignored(agent: Running, run_id: str) -> None:
    now = int(time.time() * 1000)
    agent.send(start_cmd(agent.node, run_id, 2, ("r0",), "--steps", "1", "--step-time", "0",
                         at=now))
    assert agent.wait_exits(run_id, 1)["r0"].generation == 2
    agent.send(start_cmd(agent.node, run_id, 1, ("r0",), "--steps", "1", at=now))
    agent.wait_log(f"is older than g2 already commanded for {run_id}")
    agent.tail.settle(0.5)
    assert [e.generation for e in agent.tail.of(run_id, WorkerExited)] == [2]


@pytest.mark.kafka
def test_stop_terminates_the_generation_and_older(agent: Running, run_id: str) -> None:
    now = int(time.time() * 1000)
    root = agent.work_dir.absolute() / "ckpt"
    staged = root / run_id / "g000001" / "step-0000000008"  # a checkpoint cut short
    committed = root / run_id / "g000001" / "step-0000000004"
    for path in (staged / "__0_0.distcp", committed / "__0_0.distcp",
                 committed / "manifest.json"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    agent.send(start_cmd(agent.node, run_id, 1, ("r0", "r1"), "--steps", "1000",
                         "--step-time", "0.1", at=now,
                         env={"RUNLEDGER_CHECKPOINT_ROOT": str(root)}))
    agent.tail.wait_for("a step", lambda: bool(agent.tail.of(run_id, StepCommitted)))
    # Both workers running (each beat once, so each has its SIGTERM handler): on a loaded
    # machine r1 may still be starting when r0 commits a step, and a SIGTERM then ends
    # it by the signal, not with 143.
    agent.tail.wait_for("both workers beating", lambda: {
        b.logical_id for e in agent.tail.of(run_id, MembersHeartbeatRecorded)
        for b in e.beats} >= {"r0", "r1"})
    agent.send(stop_cmd(agent.node, run_id, 2, at=now))  # newer than what runs: stops g1 too
    exits = agent.wait_exits(run_id, 2, timeout_s=15)
    assert {lid: (e.exit_code, e.generation) for lid, e in exits.items()} == {
        "r0": (TERM_EXIT_CODE, 1), "r1": (TERM_EXIT_CODE, 1)}
    # Once they exited, the stopped generation's manifest-less residue goes (agent.sweep);
    # a checkpoint with its manifest stays.
    agent.tail.wait_for("the residue swept", lambda: not staged.exists(), 20)
    assert (committed / "__0_0.distcp").exists() and (committed / "manifest.json").exists()
    # Generation 2 is revoked now: its start is ignored.
    agent.send(start_cmd(agent.node, run_id, 2, ("r0",), "--steps", "1", at=now))
    agent.wait_log(f"generation 2 of {run_id} is revoked")


@pytest.mark.kafka
def test_crash_and_unrunnable_and_oversized_groups_are_reported(
    agent: Running, run_id: str
) -> None:
    now = int(time.time() * 1000)
    crash = start_cmd(agent.node, run_id, 1, ("r0",), "--steps", "5", "--step-time", "0.01",
                      "--fail-mode", "crash", "--fail-at-step", "1", at=now)
    too_big = start_cmd(agent.node, f"{run_id}-big", 1, ("a", "b", "c", "d"), at=now)
    missing = replace(start_cmd(agent.node, f"{run_id}-nx", 1, ("x",), at=now),
                      argv=("/nonexistent/runledger-worker",))
    code = agent.work_dir / "code"
    code.mkdir(exist_ok=True)
    no_script = replace(start_cmd(agent.node, f"{run_id}-ns", 1, ("s",), at=now),
                        argv=(sys.executable, "train.py"), workdir=str(code))
    agent.send(crash, too_big, missing, no_script)
    crashed = agent.wait_exits(run_id, 1)["r0"]
    assert crashed.exit_code == CRASH_EXIT_CODE and not crashed.launch_error
    # The exit names the worker's log and carries its last lines.
    assert crashed.log_path.startswith("/") and Path(crashed.log_path).is_file()
    # The path `runledger logs` computes for a running worker is the one reported.
    assert crashed.log_path == worker_log_file(str(agent.work_dir.absolute()), run_id, 1, "r0")
    assert crashed.stderr_tail.endswith("testworker: crash at step 1\n")
    assert Path(crashed.log_path).read_text().endswith(crashed.stderr_tail)
    big = agent.wait_exits(f"{run_id}-big", 4)
    assert {e.exit_code for e in big.values()} == {REJECTED_EXIT_CODE}
    assert all("needs 4 slots" in e.stderr_tail for e in big.values())
    nx = agent.wait_exits(f"{run_id}-nx", 1)["x"]
    assert nx.exit_code == 127 and "/nonexistent/runledger-worker does not exist" in (
        nx.launch_error)
    # A missing script is a launch failure naming the path, not a crash of python.
    ns = agent.wait_exits(f"{run_id}-ns", 1)["s"]
    assert ns.exit_code == 127
    assert f"{code}/train.py (train.py in code.workdir) does not exist" in ns.launch_error
    assert ns.launch_error in Path(ns.log_path).read_text()


@pytest.mark.kafka
def test_sigkill_after_grace_and_a_deferred_start_on_the_freed_slots(
    agent: Running, run_id: str, tmp_path: Path
) -> None:
    now = int(time.time() * 1000)
    # Each shell marks that its trap is set: a SIGTERM that came before the trap (a
    # loaded machine) would end it by SIGTERM, and the test would judge the race.
    marks = tmp_path / "trapped"
    marks.mkdir()
    stubborn = replace(start_cmd(agent.node, run_id, 1, ("a0", "a1", "a2"), at=now),
                       argv=("/bin/sh", "-c", f"trap '' TERM; touch {marks}/$$; sleep 60"))
    agent.send(stubborn)
    agent.wait_log(f"{run_id}/g1/a2: started pid")
    deadline = time.monotonic() + 120
    while len(list(marks.iterdir())) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(list(marks.iterdir())) == 3, "the three shells never set their trap"
    nxt = f"{run_id}-next"
    # Different runs, so maybe different partitions: either may be read first.
    agent.send(stop_cmd(agent.node, run_id, 1, at=now),
               start_cmd(agent.node, nxt, 1, ("b0", "b1"), "--steps", "1", "--step-time", "0",
                         at=now))
    agent.wait_log(f"deferred {nxt}/g1/")
    killed = agent.wait_exits(run_id, 3, timeout_s=20)
    assert {(e.exit_code, e.signal) for e in killed.values()} == {(None, signal.SIGKILL)}
    assert {e.exit_code for e in agent.wait_exits(nxt, 2).values()} == {0}


@pytest.mark.kafka
def test_an_agent_says_at_start_that_its_node_is_quarantined_and_what_frees_it(
    bootstrap: str, tmp_path: Path
) -> None:
    node = f"node-{uuid.uuid4().hex[:8]}"
    key = node_key(node)
    producer = EventProducer(bootstrap)
    producer.send(RUNS, NodeQuarantined(
        header=Header(f"{key}/NodeQuarantined/3", key, 0, int(time.time() * 1000),
                      "controller"), node=node, reason="3 failures on the node"))
    producer.flush()
    own = start_agent(bootstrap, tmp_path, slots=1, node=node)
    try:
        own.wait_log(f"node {node}: quarantined since ")
        said = own.log.read_text()
        assert "(3 failures on the node); no new run is placed here and none restarts " \
               f"here; `runledger node uncordon {node} --reason R` frees it" in said
        assert f"node {node}: ready" not in said
    finally:
        stop_agent(own)


@pytest.mark.kafka
def test_sigterm_stops_workers_reports_them_and_exits_0(
    bootstrap: str, tmp_path: Path, run_id: str
) -> None:
    own = start_agent(bootstrap, tmp_path, slots=2)
    try:
        now = int(time.time() * 1000)
        own.send(start_cmd(own.node, run_id, 1, ("r0", "r1"), "--steps", "1000",
                           "--step-time", "0.1", at=now))
        own.tail.wait_for("a step", lambda: bool(own.tail.of(run_id, StepCommitted)))
        pids = [int(p) for p in STARTED_PID.findall(own.log.read_text())]
        own.proc.send_signal(signal.SIGTERM)
        assert own.proc.wait(timeout=20) == 0
        exits = own.wait_exits(run_id, 2, timeout_s=10)
        assert {e.exit_code for e in exits.values()} == {TERM_EXIT_CODE}
        for pid in pids:
            assert not Path(f"/proc/{pid}").exists() or b"agent.testworker" not in Path(
                f"/proc/{pid}/cmdline").read_bytes()
    finally:
        stop_agent(own)


@pytest.mark.kafka
def test_a_forged_start_with_a_climbing_run_id_starts_nothing_and_is_reported(
    agent: Running, run_id: str
) -> None:
    forged = f"../../{run_id}"
    now = int(time.time() * 1000)
    agent.send(start_cmd(agent.node, forged, 1, ("r0",), at=now),
               start_cmd(agent.node, run_id, 1, ("r0",), at=now,
                         env={"RUNLEDGER_CHECKPOINT_ROOT": "/etc"}))
    (bad,) = agent.wait_exits(forged, 1).values()
    (outside,) = agent.wait_exits(run_id, 1).values()
    assert (bad.exit_code, bad.signal) == (REJECTED_EXIT_CODE, None)
    assert (outside.exit_code, outside.signal) == (REJECTED_EXIT_CODE, None)
    agent.wait_log(f"{forged}/g1/r0: not launched: invalid start command: bad_name: run id")
    agent.wait_log(f"{run_id}/g1/r0: not launched: invalid start command: path_outside_roots")
    assert "started pid" not in "".join(
        line for line in agent.log.read_text().splitlines() if run_id in line)
    assert not (agent.work_dir / run_id).exists()
    assert not (agent.work_dir.parent.parent / run_id).exists()


@pytest.mark.kafka
@pytest.mark.parametrize(("option", "value", "problem"), [
    ("--node", "../n", "bad_name: --node '../n'"),
    ("--allow-root", "/data/../etc", "bad_path: --allow-root '/data/../etc'"),
    ("--allow-root", "relative", "--allow-root 'relative' must be an absolute path or a URL"),
    ("--allow-workdir", "code", "--allow-workdir 'code' must be an absolute path"),
    # Resolved when the agent starts: a name that finds no program allows nothing.
    ("--allow", "no-such-program-b7f1", "--allow 'no-such-program-b7f1': no executable file"),
    ("--log-cap", "1KiB", "--log-cap must be at least 65536 bytes (64 KiB), got 1024"),
])
def test_a_bad_node_name_or_root_is_one_line_and_exit_1(
    bootstrap: str, tmp_path: Path, option: str, value: str, problem: str
) -> None:
    args = {"--node": "n1", "--slots": "1", "--work-dir": str(tmp_path), option: value}
    out = subprocess.run([sys.executable, "-m", "runledger.cli", "agent",
                          *(x for kv in args.items() for x in kv)],
                         env={**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap},
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith(f"runledger: {problem}")


def test_default_roots_are_runledger_s_own_places(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from runledger.commands.agent import default_roots

    monkeypatch.setenv("RUNLEDGER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RUNLEDGER_CHECKPOINT_ROOT", "s3://bucket/ckpt")
    assert default_roots() == [str(tmp_path / "home"), "s3://bucket/ckpt"]
    monkeypatch.setenv("RUNLEDGER_CHECKPOINT_ROOT", str(tmp_path / "ckpt"))
    assert str(tmp_path / "ckpt") in default_roots()


def test_a_log_cap_is_bytes_or_a_number_with_a_binary_unit() -> None:
    from runledger.commands.agent import parse_size
    from runledger.errors import UsageError

    assert [parse_size(t, "--log-cap") for t in ("65536", "64KiB", "64k", "1.5 MiB", "2G")] \
        == [65536, 65536, 65536, 3 << 19, 2 << 30]
    for bad in ("lots", "-1M", "64 TB", ""):
        with pytest.raises(UsageError, match="is not a size"):
            parse_size(bad, "--log-cap")
