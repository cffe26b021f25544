"""The node agent: its pure decisions, then the real thing (broker, agent and worker processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from controller.agent_decide import (
    REJECTED_EXIT_CODE,
    Action,
    AgentConfig,
    AgentState,
    Decision,
    Ignore,
    Launch,
    Reject,
    Terminate,
    WorkerKey,
    decide,
    lookahead,
    shutdown,
    worker_exited,
)
from controller.testworker import CRASH_EXIT_CODE, TERM_EXIT_CODE
from controller.workerenv import RANKS
from events.kafka import EventProducer
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    GroupStartCommanded,
    GroupStopCommanded,
    Header,
    Member,
    StepCommitted,
    WorkerExited,
    node_key,
)
from events.topics import COMMANDS
from tests.controller.tail import STARTED_PID, Tail, kill_tree

NOW = 1_800_000_000_000
WORKER = (sys.executable, "-m", "controller.testworker")


def start_cmd(node: str, run: str, gen: int, ids: tuple[str, ...], *args: str,
              ranks: tuple[str, ...] | None = None, cid: str | None = None,
              at: int | None = None, env: dict[str, str] | None = None) -> GroupStartCommanded:
    """A start command as the controller writes it: this node's members, all ranks in env."""
    order = ranks or ids
    return GroupStartCommanded(
        header=Header(f"cmd/{uuid.uuid4().hex}", run, gen, NOW if at is None else at,
                      "controller"),
        command_id=cid or f"{run}/g{gen}/{node}/start", node=node,
        members=tuple(Member(lid, node, i) for i, lid in enumerate(ids)),
        world_size=len(order), master_addr="127.0.0.1", master_port=29500,
        argv=(*WORKER, *args), env={RANKS: ",".join(order), **(env or {})},
    )


def stop_cmd(node: str, run: str, gen: int, at: int = NOW) -> GroupStopCommanded:
    return GroupStopCommanded(
        header=Header(f"cmd/{uuid.uuid4().hex}", run, gen, at, "controller"),
        command_id=f"{run}/g{gen}/{node}/stop", node=node, reason="test")


# --- decide: pure -------------------------------------------------------------

CFG = AgentConfig(node="n1", slots=3, bootstrap="kafka:9092", heartbeat_interval_s=1.5)


def run_all(*commands: GroupStartCommanded | GroupStopCommanded,
            state: AgentState | None = None) -> Decision:
    state = state or AgentState()
    actions: list[Action] = []
    for c in commands:
        d = decide(CFG, state, c, NOW)
        state = d.state
        actions += d.actions
    return Decision(state, tuple(actions))


def kinds(d: Decision) -> list[str]:
    return [type(a).__name__ for a in d.actions]


def test_start_launches_each_member_with_its_global_and_local_rank() -> None:
    cmd = start_cmd("n1", "run", 1, ("b", "d"), ranks=("a", "b", "c", "d"))
    d = decide(CFG, AgentState(), cmd, NOW)
    launches = [a for a in d.actions if isinstance(a, Launch)]
    assert [(a.key.logical_id, a.worker_env.rank, a.worker_env.local_rank) for a in launches] == [
        ("b", 1, 0), ("d", 3, 1)]
    env = launches[0].worker_env
    assert (env.run_id, env.generation, env.node, env.world_size) == ("run", 1, "n1", 4)
    assert (env.bootstrap, env.heartbeat_interval_s, env.master_port) == ("kafka:9092", 1.5, 29500)
    assert launches[0].log_path == "run/g1/b.log"
    assert launches[0].argv == cmd.argv and launches[0].causation_id == cmd.header.event_id
    assert d.state.busy_slots == 2 and ("run", 1) in d.state.started


def test_without_a_rank_list_only_a_whole_group_has_ranks() -> None:
    whole = start_cmd("n1", "run", 1, ("x", "y"))
    whole = replace(whole, env={})
    assert [a.worker_env.rank for a in decide(CFG, AgentState(), whole, NOW).actions
            if isinstance(a, Launch)] == [0, 1]
    part = replace(whole, world_size=4)
    d = decide(CFG, AgentState(), part, NOW)
    assert kinds(d) == ["Reject", "Reject"] and d.state.busy_slots == 0
    assert "RUNLEDGER_RANKS is missing" in d.actions[0].reason  # type: ignore[union-attr]


def test_duplicates_are_ignored_by_id_and_by_run_generation() -> None:
    cmd = start_cmd("n1", "run", 1, ("r0",))
    same_gen_new_id = start_cmd("n1", "run", 1, ("r0",), cid="reissued")
    d = run_all(cmd, cmd, same_gen_new_id)
    assert kinds(d) == ["Launch", "Ignore", "Ignore"]
    assert [a.reason for a in d.actions[1:]] == [  # type: ignore[union-attr]
        "duplicate command id", "start of run g1 was already handled"]


def test_older_and_revoked_generations_are_ignored() -> None:
    d = run_all(start_cmd("n1", "run", 2, ("r0",)), start_cmd("n1", "run", 1, ("r0",)))
    assert kinds(d) == ["Launch", "Ignore"]
    assert "older than g2" in d.actions[1].reason  # type: ignore[union-attr]
    d = run_all(stop_cmd("n1", "run", 3), start_cmd("n1", "run", 3, ("r0",)),
                start_cmd("n1", "run", 4, ("r0",)))
    assert kinds(d) == ["Ignore", "Launch"]
    assert "revoked" in d.actions[0].reason  # type: ignore[union-attr]


def test_stop_terminates_that_generation_and_older_only() -> None:
    d = run_all(start_cmd("n1", "run", 1, ("a",)), start_cmd("n1", "other", 5, ("b",)))
    d = run_all(stop_cmd("n1", "run", 2), stop_cmd("n1", "other", 4), state=d.state)
    assert d.actions == (Terminate(WorkerKey("run", 1, "a"), "stop g2: test"),)
    assert d.state.revoked == {"run": 2, "other": 4}
    assert run_all(stop_cmd("n1", "run", 2), state=d.state).actions[0] == Ignore(
        "run/g2/n1/stop", "duplicate command id")


def test_a_new_generation_fences_the_old_one_and_takes_its_slots() -> None:
    d = run_all(start_cmd("n1", "run", 1, ("a", "b", "c")), start_cmd("n1", "run", 2, ("a", "b")))
    assert kinds(d) == ["Launch"] * 3 + ["Terminate"] * 3 + ["Launch"] * 2
    assert all(a.reason == "fenced by generation 2" for a in d.actions if isinstance(a, Terminate))
    state = d.state
    for lid in "abc":
        state = worker_exited(state, WorkerKey("run", 1, lid))
    assert state.busy_slots == 2
    assert {a.key for a in shutdown(state)} == {WorkerKey("run", 2, "a"), WorkerKey("run", 2, "b")}


def test_a_group_that_does_not_fit_is_rejected_whole() -> None:
    late = NOW - CFG.slot_wait_ms
    d = run_all(start_cmd("n1", "a", 1, ("x", "y")), start_cmd("n1", "b", 1, ("p", "q"), at=late))
    assert kinds(d) == ["Launch", "Launch", "Reject", "Reject"]
    reject = d.actions[2]
    assert isinstance(reject, Reject) and reject.exit_code == REJECTED_EXIT_CODE == 125
    assert reject.reason == "needs 2 slots, 1 of 3 free"
    assert d.state.busy_slots == 2 and ("b", 1) in d.state.started


def test_a_group_waits_a_while_for_busy_slots() -> None:
    waiting = start_cmd("n1", "b", 1, ("p", "q", "r"))
    d = run_all(start_cmd("n1", "a", 1, ("x", "y")), stop_cmd("n1", "a", 1), waiting)
    assert kinds(d) == ["Launch", "Launch", "Terminate", "Terminate", "Defer"]
    assert "b/g1/n1/start" not in d.state.seen and ("b", 1) not in d.state.started
    state = worker_exited(d.state, WorkerKey("a", 1, "x"))
    assert kinds(decide(CFG, state, waiting, NOW + 1000)) == ["Defer"]
    assert kinds(decide(CFG, state, waiting, NOW + CFG.slot_wait_ms)) == ["Reject"] * 3
    state = worker_exited(state, WorkerKey("a", 1, "y"))
    assert kinds(decide(CFG, state, waiting, NOW + 1000)) == ["Launch"] * 3
    # More members than the node has slots: no point in waiting.
    assert kinds(run_all(start_cmd("n1", "b", 1, ("p", "q", "r", "s")))) == ["Reject"] * 4


def test_other_nodes_stale_starts_and_bad_intervals() -> None:
    assert kinds(run_all(start_cmd("n2", "run", 1, ("r0",)))) == ["Ignore"]
    stale = start_cmd("n1", "run", 1, ("r0",), at=NOW - CFG.max_start_age_ms - 1)
    d = run_all(stale)
    assert kinds(d) == ["Ignore"] and "stale" in d.actions[0].reason  # type: ignore[union-attr]
    bad = start_cmd("n1", "run", 2, ("r0",), env={"RUNLEDGER_HEARTBEAT_INTERVAL_S": "-1"})
    assert kinds(run_all(bad)) == ["Reject"]
    ok = start_cmd("n1", "run", 2, ("r0",), env={"RUNLEDGER_HEARTBEAT_INTERVAL_S": "0.25"})
    launch = run_all(ok).actions[0]
    assert isinstance(launch, Launch) and launch.worker_env.heartbeat_interval_s == 0.25


def test_lookahead_skips_starts_a_batch_already_superseded() -> None:
    batch: list[GroupStartCommanded | GroupStopCommanded] = [
        start_cmd("n1", "run", 1, ("r0",)), stop_cmd("n1", "run", 1),
        start_cmd("n1", "run", 2, ("r0",))]
    d = run_all(*batch, state=lookahead(CFG, AgentState(), batch))
    assert kinds(d) == ["Ignore", "Launch"]
    assert [a.key.generation for a in d.actions if isinstance(a, Launch)] == [2]


def test_remembered_ids_are_bounded() -> None:
    cfg = AgentConfig(node="n1", slots=1, bootstrap="k", seen_limit=3)
    state = AgentState()
    for gen in range(1, 6):
        state = decide(cfg, state, stop_cmd("n1", "run", gen), NOW).state
    assert state.seen == ("run/g3/n1/stop", "run/g4/n1/stop", "run/g5/n1/stop")


# --- the agent process --------------------------------------------------------


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


def start_agent(bootstrap: str, tmp: Path, slots: int) -> Running:
    node = f"node-{uuid.uuid4().hex[:8]}"
    tail = Tail(bootstrap)
    log = tmp / f"{node}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runledger.cli", "agent", "--node", node, "--slots", str(slots),
             "--domain", "rack-7", "--heartbeat-interval", "0.3", "--grace", "2",
             "--work-dir", str(tmp / node)],
            env={**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap}, stdout=out, stderr=out,
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
    (reg,) = agent.tail.of(key, AgentRegistered)
    assert (reg.node, reg.slots, reg.domain, reg.generation) == (agent.node, 3, "rack-7", 0)
    assert reg.header.producer == f"agent/{agent.node}"
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
    agent.send(start_cmd(agent.node, run_id, 1, ("r0", "r1"), "--steps", "1000",
                         "--step-time", "0.1", at=now))
    agent.tail.wait_for("a step", lambda: bool(agent.tail.of(run_id, StepCommitted)))
    agent.send(stop_cmd(agent.node, run_id, 2, at=now))  # newer than what runs: stops g1 too
    exits = agent.wait_exits(run_id, 2, timeout_s=15)
    assert {lid: (e.exit_code, e.generation) for lid, e in exits.items()} == {
        "r0": (TERM_EXIT_CODE, 1), "r1": (TERM_EXIT_CODE, 1)}
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
    agent.send(crash, too_big, missing)
    assert agent.wait_exits(run_id, 1)["r0"].exit_code == CRASH_EXIT_CODE
    big = agent.wait_exits(f"{run_id}-big", 4)
    assert {e.exit_code for e in big.values()} == {REJECTED_EXIT_CODE}
    assert agent.wait_exits(f"{run_id}-nx", 1)["x"].exit_code == 127


@pytest.mark.kafka
def test_sigkill_after_grace_and_a_deferred_start_on_the_freed_slots(
    agent: Running, run_id: str
) -> None:
    now = int(time.time() * 1000)
    stubborn = replace(start_cmd(agent.node, run_id, 1, ("a0", "a1", "a2"), at=now),
                       argv=("/bin/sh", "-c", "trap '' TERM; sleep 60"))
    agent.send(stubborn)
    agent.wait_log(f"{run_id}/g1/a2: started pid")
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
            assert not Path(f"/proc/{pid}").exists() or b"controller.testworker" not in Path(
                f"/proc/{pid}/cmdline").read_bytes()
    finally:
        stop_agent(own)
