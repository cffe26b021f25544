"""The agent's ``/metrics`` (``agent.metrics``, ``agent.stats``): the pure pieces, an agent
driven in this process (real workers, a producer that keeps what it is given) and scraped over
HTTP as it goes, and a real ``runledger agent --metrics`` against the broker."""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.decide import AgentConfig, Defer, Ignore, Launch, Reject, Terminate, WorkerKey
from agent.metrics import AgentCollector, Snapshot, families
from agent.service import Agent, AgentOptions
from agent.stats import (
    DECISIONS,
    KINDS,
    OUTCOMES,
    AgentStats,
    Counted,
    LogDrops,
    decided,
    exit_outcome,
)
from events.record import Record
from events.topics import COMMANDS
from events.workerenv import WorkerEnv
from runledger.metricsserver import MetricsServer
from tests.agent.commands import start_cmd, stop_cmd
from tests.agent.test_service import start_agent, stop_agent
from tests.promtext import Samples, named, render, scrape, until

NOW = 1_800_000_000_000
CAP = 64 << 10
# 400000 bytes of output, then a wait for the stop: with a 64 KiB cap and one older file
# kept, the relay keeps the last 400000 - 5 * 65536 bytes and the cap drops the rest.
CHATTY = "import sys, time\nsys.stdout.write('x' * 400000)\nsys.stdout.flush()\ntime.sleep(120)\n"
CHATTY_DROPPED = 5 * CAP


def value(got: Samples, name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    (found,) = [v for k, v in named(got, name).items() if set(labels.items()) <= set(k)]
    return found


def commands(got: Samples) -> dict[tuple[str, str], float]:
    return {(dict(k)["kind"], dict(k)["decision"]): v
            for k, v in named(got, "runledger_agent_commands_total").items()}


def exits(got: Samples) -> dict[str, float]:
    return {dict(k)["outcome"]: v
            for k, v in named(got, "runledger_agent_worker_exits_total").items()}


# -- pure -------------------------------------------------------------------------


def test_what_a_decision_did_and_how_a_worker_ended() -> None:
    key = WorkerKey("r", 1, "w0")
    launch = Launch(key, ("x",), {}, WorkerEnv("r", 1, "w0", "n", 1, 0, 0, "h", 1, "b", 1.0),
                    "r/g1/w0.log", "c")
    assert decided((launch,)) == "applied"
    assert decided((Terminate(key, "fenced"), launch)) == "applied"
    assert decided(()) == "applied"  # a stop with nothing to stop still revokes
    assert decided((Terminate(key, "fenced"), Defer("c", "slots"))) == "deferred"
    assert decided((Reject(key, "bad", "c"), Reject(key, "bad", "c"))) == "rejected"
    assert decided((Ignore("c", "duplicate", "replayed"),)) == "ignored"
    assert exit_outcome(0, None, True) == "success"
    assert exit_outcome(3, None, True) == "failure"
    assert exit_outcome(None, 9, True) == "signal"
    assert exit_outcome(125, None, False) == "not_launched"


def test_dropped_log_bytes_never_go_back_whichever_way_a_scrape_and_an_exit_race() -> None:
    drops = LogDrops()
    drops.seen([("a", 100), ("b", 5)])
    drops.seen([("a", 40)])  # an older read: kept at its highest
    assert drops.total() == 105
    drops.ended("a", 150)  # the exit's final read moves it to the ended total
    assert drops.total() == 155
    drops.seen([("a", 150)])  # a scrape that listed the log before the reap: not twice
    drops.ended("a", 150)
    assert drops.total() == 155
    drops.ended("b", 0)  # its file gone at exit: what was seen stays counted
    assert drops.total() == 155


def test_every_label_value_is_there_at_0_and_no_age_before_the_first_heartbeat() -> None:
    stats = AgentStats()
    snap = Snapshot("n1", slots=4, busy=0, workers=0, counted=stats.read(), log_dropped=0)
    got = render(families(snap, NOW))
    assert commands(got) == {(k, d): 0 for k in KINDS for d in DECISIONS}
    assert exits(got) == dict.fromkeys(OUTCOMES, 0)
    assert not named(got, "runledger_agent_heartbeat_age_seconds")
    assert value(got, "runledger_agent_slots", state="free") == 4
    assert all(("node", "n1") in k for (_, k) in got)
    stats.heartbeat(NOW - 2_500)
    got = render(families(replace(snap, counted=stats.read(), busy=3), NOW))
    assert value(got, "runledger_agent_heartbeat_age_seconds") == 2.5
    assert value(got, "runledger_agent_heartbeats_total") == 1
    assert (value(got, "runledger_agent_slots", state="busy"),
            value(got, "runledger_agent_slots", state="free")) == (3, 1)
    counted = Counted(1, 0, NOW + 1_000, {}, {})  # a clock that moved back: age 0
    assert value(render(families(replace(snap, counted=counted), NOW)),
                 "runledger_agent_heartbeat_age_seconds") == 0


# -- an agent in this process -----------------------------------------------------------


class Producer:
    """What the agent's producer is asked to write, kept; ``fail`` makes every send raise."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.fail = False

    def send(self, topic: str, event: Any) -> None:
        if self.fail:
            raise RuntimeError("broker gone")
        self.sent.append(event)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float | None = None) -> int:
        return 0


class Verifier:
    def judge(self, record: Record) -> str | None:
        return "unsigned: no signature header"


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[Agent, Producer, str]]:
    agent = Agent(AgentConfig(node="n1", slots=2, bootstrap="127.0.0.1:1",
                              heartbeat_interval_s=0.05),
                  AgentOptions(work_dir=tmp_path / "agent", log_cap=CAP, log_keep=1,
                               grace_s=2.0))
    producer = Producer()
    agent._producer = producer  # type: ignore[assignment]
    agent._verifier = Verifier()  # type: ignore[assignment]
    server = MetricsServer(AgentCollector(agent))
    try:
        yield agent, producer, server.url
    finally:
        server.close()
        agent.procs.terminate_all("test over")
        until(lambda: (agent.procs.reap(), len(agent.procs) == 0)[1] or None, 30,
              "the workers gone")


def reaped(agent: Agent, n: int) -> None:
    done = [0]

    def more() -> bool | None:
        done[0] += agent._report_exits()
        return done[0] >= n or None

    until(more, 60, f"{n} exits")


def script(node: str, run: str, code: str, members: tuple[str, ...] = ("w0",)) -> Any:
    return replace(start_cmd(node, run, 1, members, at=int(time.time() * 1000)),
                   argv=(sys.executable, "-c", code))


def test_a_scrape_follows_what_the_agent_does(local: tuple[Agent, Producer, str]) -> None:
    agent, _, url = local
    got = scrape(url)
    assert value(got, "runledger_agent_workers_running") == 0
    assert value(got, "runledger_agent_log_dropped_bytes_total") == 0
    assert set(commands(got).values()) == {0} and set(exits(got).values()) == {0}

    chatty = script("n1", "run-chatty", CHATTY)
    agent._handle(chatty)
    got = until(lambda: (s if value(s := scrape(url), "runledger_agent_log_dropped_bytes_total")
                         == CHATTY_DROPPED else None), 60, "the chatty worker's drops")
    assert value(got, "runledger_agent_workers_running") == 1
    assert (value(got, "runledger_agent_slots", state="busy"),
            value(got, "runledger_agent_slots", state="free")) == (1, 1)
    assert commands(got)[("start", "applied")] == 1

    agent._handle(chatty)  # the same command again: a replay, nothing done
    agent._handle(stop_cmd("n1", "run-chatty", 1, at=int(time.time() * 1000)))
    reaped(agent, 1)
    agent._handle(script("n1", "run-ok", "pass"))
    agent._handle(script("n1", "run-bad", "raise SystemExit(3)"))
    reaped(agent, 2)
    agent._handle(script("n1", "run-big", "pass", ("a", "b", "c")))  # 3 members, 2 slots
    agent._trusted(Record(COMMANDS, 0, 7, 0, script("n1", "run-forged", "pass"), 1))
    got = scrape(url)
    assert commands(got) == {**{(k, d): 0 for k in KINDS for d in DECISIONS},
                             ("start", "applied"): 3, ("start", "ignored"): 1,
                             ("stop", "applied"): 1, ("start", "rejected"): 1,
                             ("start", "unverified"): 1}
    # The stopped worker died of SIGTERM; the three of run-big and run-forged's one were
    # never launched.
    assert exits(got) == {"success": 1, "failure": 1, "signal": 1, "not_launched": 4}
    assert value(got, "runledger_agent_workers_running") == 0
    assert value(got, "runledger_agent_slots", state="free") == 2
    # The chatty worker's drops stay counted after its exit.
    assert value(got, "runledger_agent_log_dropped_bytes_total") == CHATTY_DROPPED


def test_heartbeats_and_failed_ones_are_counted(local: tuple[Agent, Producer, str]) -> None:
    agent, producer, url = local
    assert not named(scrape(url), "runledger_agent_heartbeat_age_seconds")
    beating = threading.Thread(target=agent._heartbeat_loop, daemon=True)
    beating.start()
    try:
        got = until(lambda: (s if value(s := scrape(url), "runledger_agent_heartbeats_total")
                             >= 3 else None), 30, "3 heartbeats")
        assert 0 <= value(got, "runledger_agent_heartbeat_age_seconds") < 5
        assert value(got, "runledger_agent_heartbeat_errors_total") == 0
        producer.fail = True
        until(lambda: value(scrape(url), "runledger_agent_heartbeat_errors_total") >= 2 or None,
              30, "2 failed heartbeats")
    finally:
        agent.request_stop()
        beating.join(5)
    got = scrape(url)
    beats = sum(1 for e in producer.sent if e.event_type == "AgentHeartbeatRecorded")
    assert value(got, "runledger_agent_heartbeats_total") == beats >= 3


# -- a real agent --------------------------------------------------------------------


@pytest.mark.kafka
def test_runledger_agent_serves_its_metrics(bootstrap: str, tmp_path: Path,
                                            run_id: str) -> None:
    agent = start_agent(bootstrap, tmp_path, 2, extra=("--metrics", "127.0.0.1:0"))
    try:
        found = until(lambda: re.search(r"^metrics at (http://127\.0\.0\.1:\d+/metrics)$",
                                        agent.log.read_text(), re.M), 30, "the metrics line")
        url = found[1]
        got = until(lambda: (s if value(s := scrape(url), "runledger_agent_heartbeats_total")
                             >= 2 else None), 30, "2 heartbeats")
        assert value(got, "runledger_agent_slots", state="free") == 2
        assert all(("node", agent.node) in k for (_, k) in got)
        now = int(time.time() * 1000)
        agent.send(start_cmd(agent.node, run_id, 1, ("r0", "r1"), "--steps", "2",
                             "--step-time", "0.05", at=now))
        agent.wait_exits(run_id, 2)
        got = until(lambda: (s if exits(s := scrape(url))["success"] == 2 else None), 30,
                    "2 exits counted")
        assert commands(got)[("start", "applied")] == 1
        assert value(got, "runledger_agent_workers_running") == 0
        assert value(got, "runledger_agent_heartbeat_age_seconds") < 5
    finally:
        stop_agent(agent)
