"""The record under load: every verdict holds on a saturated machine.

A GPU node's host CPU is busy (``tests.load``: four spinning processes per
core, started and stopped here). On such a machine each scenario that the
controller classifies runs ``RUNLEDGER_SOAK_ROUNDS`` times at once (2 in
``make test``, 5 in ``make soak``), on real processes, a real broker and the run spec's
default heartbeat settings (no fast test timeouts: the defaults are what a user
gets), and the record must say what happened every time:

- a clean finish (the README's own training script, real torch and gloo) is
  ``Succeeded`` with no failure recorded;
- an exception at step k is ``worker_crash:exit=1`` with its traceback and log
  path, and the restarted generation succeeds;
- an exception at import on every rank is ``job:start_exit=1``, not retried;
- ``sys.exit(3)`` at step k is ``worker_crash:exit=3`` and recovers;
- a SIGKILLed rank is ``worker_crash:signal=9``, a hung one (heartbeats stop,
  the process lives) ``hang:no_heartbeat``, and ``sys.exit(75)``
  (EX_TEMPFAIL) ``infrastructure:exit=75``: node faults, each counted against
  the node it ran on and recovered from;
- no user error is counted against a node, and no node is quarantined;
- a node lost mid-run (its agent and its worker SIGKILLed) in an elastic run is
  named (``NodeLost``, ``infrastructure:node_lost`` against it), the survivor
  is never blamed, and the run finishes on the survivor.

The node faults run one a node at a time (a node's two slots hold one run,
restarted there): each fault counts once, against the node its member ran on.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controller.policy import counts_against_node
from events.model import (
    Event,
    FailureClassified,
    GenerationStarted,
    NodeQuarantined,
    RunFinished,
    StepCommitted,
    node_key,
)
from tests.e2e.harness import PY, Cluster, of_type, spec, wait, worker_pids
from tests.e2e.harness import _environ as environ_of
from tests.load import Load, busy, saturate

pytestmark = [pytest.mark.soak, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
ROUNDS = int(os.environ.get("RUNLEDGER_SOAK_ROUNDS", "2"))
# Generous: under this load a torch worker takes tens of seconds to import, and a
# hang is only called one after the default heartbeat timeout and grace.
RUN_LIMIT_S = 420
TRAIN = re.compile(r"cat > myjob/train\.py <<'EOF'\n(.*?)\nEOF\n", re.S)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    command: list[str]
    failures: tuple[str, ...]  # the signatures the record must hold, in order
    outcome: str  # RunFinished.outcome
    evidence: str = ""  # a line the first failure's stderr tail must show


def worker_args(*args: str) -> list[str]:
    # Rank 1 fails at step 4 of generation 1 only: the restart must succeed.
    return [PY, "-m", "agent.testworker", "--steps", "8", "--step-time", "0.25",
            "--fail-at-step", "4", "--fail-generation", "1", "--fail-rank", "1", *args]


USER = (
    Scenario("clean", [PY, "train.py"], (), "succeeded"),
    Scenario("raises", worker_args("--fail-mode", "fail"), ("worker_crash:exit=1",),
             "succeeded", "InjectedFailure: injected failure at step 4"),
    Scenario("import", [PY, "broken.py"], ("job:start_exit=1",), "failed",
             "ModuleNotFoundError"),
    Scenario("exits", worker_args("--fail-mode", "exit", "--exit-code", "3"),
             ("worker_crash:exit=3",), "succeeded", "sys.exit(3) at step 4"),
)
NODE = (
    Scenario("killed", worker_args("--fail-mode", "kill"), ("worker_crash:signal=9",),
             "succeeded"),
    Scenario("hung", worker_args("--fail-mode", "hang"), ("hang:no_heartbeat",), "succeeded"),
    Scenario("tempfail", worker_args("--fail-mode", "exit", "--exit-code", "75"),
             ("infrastructure:exit=75",), "succeeded", "sys.exit(75) at step 4"),
)


@pytest.fixture(scope="module")
def load() -> Iterator[Load]:
    with saturate() as running:
        yield running


def readme_script() -> str:
    found = TRAIN.findall((REPO / "README.md").read_text())
    assert len(found) == 1, "README.md's own job must write myjob/train.py once"
    return str(found[0])


def job(scenario: Scenario, round_: int) -> dict[str, Any]:
    doc = spec(f"{scenario.name}-{round_}", [], command=scenario.command)
    # The defaults a user gets, not the harness's fast test heartbeats.
    del doc["heartbeat"]
    doc["checkpoint"] = {"policy": "fixed", "interval_steps": 5}
    return doc


def ended(facts: list[Event]) -> bool:
    return any(isinstance(e, RunFinished) for e in facts)


def services(cluster: Cluster, nodes: dict[str, int]) -> None:
    """A controller and agents, the agents' workers checkpointing as the README's do."""
    cluster.env["RUNLEDGER_CHECKPOINT_ROOT"] = str(cluster.work / "checkpoints")
    cluster.controller()
    for node, slots in nodes.items():
        cluster.agent(node, slots)
    services_ready(cluster, list(nodes))


def services_ready(cluster: Cluster, nodes: list[str]) -> None:
    """Returns once every agent has registered, so the runs spread over all of them."""

    def registered() -> bool:
        listed = cluster.cli("nodes", "--json")
        return listed.returncode == 0 and {
            n["node"] for n in json.loads(listed.stdout)["nodes"]} >= set(nodes)

    wait(registered, RUN_LIMIT_S, f"agents {sorted(nodes)} registered")


def run_all(cluster: Cluster, load: Load,
            scenarios: tuple[Scenario, ...]) -> list[tuple[Scenario, list[Event]]]:
    """Every scenario ``ROUNDS`` times, all submitted at once; each run's facts at its end."""
    (cluster.work / "train.py").write_text(readme_script())
    (cluster.work / "broken.py").write_text("import no_such_module_here  # a typo\n")
    runs = [(s, cluster.submit(job(s, r))) for r in range(ROUNDS) for s in scenarios]
    out = [(s, cluster.wait_facts(run, ended, timeout=RUN_LIMIT_S,
                                  what=f"{run}'s end under load ({load})"))
           for s, run in runs]
    assert busy(load) == len(load.pids), "the load must last the whole scenario"
    return out


def judge(scenario: Scenario, facts: list[Event]) -> list[str]:
    """What the record got wrong about one run (empty: nothing)."""
    wrong = []
    failures = [e for e in facts if isinstance(e, FailureClassified)]
    got = tuple(f.signature for f in failures)
    if got != scenario.failures:
        details = [f"{f.signature} on {f.node} ({f.detail})" for f in failures]
        wrong.append(f"{scenario.name}: failures {details}, expected {scenario.failures}")
    (end,) = of_type(facts, "RunFinished")
    if end.outcome != scenario.outcome:
        wrong.append(f"{scenario.name}: {end.outcome} ({end.reason}), expected "
                     f"{scenario.outcome}")
    if failures and scenario.evidence:
        first = failures[0]
        if scenario.evidence not in first.stderr_tail or not first.log_path:
            wrong.append(f"{scenario.name}: the failure lacks its evidence "
                         f"({scenario.evidence!r} in {first.stderr_tail[-300:]!r}, "
                         f"log {first.log_path!r})")
    return wrong


def against_nodes(facts: list[tuple[Scenario, list[Event]]]) -> Counter[str]:
    counted: Counter[str] = Counter()
    for _, events in facts:
        for f in of_type(events, "FailureClassified"):
            if f.node and counts_against_node(f.failure_class, f.signature):
                counted[f.node] += 1
    return counted


def misplaced(facts: list[tuple[Scenario, list[Event]]]) -> list[str]:
    """Failures counted against a node other than the one their member ran on."""
    wrong = []
    for _, events in facts:
        placed = {(g.generation, m.logical_id): m.node
                  for g in of_type(events, "GenerationStarted") for m in g.members}
        for f in of_type(events, "FailureClassified"):
            ran = placed.get((f.generation, f.logical_id))
            if counts_against_node(f.failure_class, f.signature) and f.node != ran:
                wrong.append(f"{f.run_id}: {f.signature} counted against {f.node}, but "
                             f"{f.logical_id} ran on {ran}")
    return wrong


def test_user_errors_under_load_are_the_job_s_own(cluster: Cluster, load: Load) -> None:
    services(cluster, {"n1": 2 * len(USER) * ROUNDS})
    facts = run_all(cluster, load, USER)
    wrong = [w for s, events in facts for w in judge(s, events)]
    assert not wrong, "\n".join(wrong)
    assert not against_nodes(facts), "a user's error was counted against a node"
    quarantined = [e for e in cluster.facts(node_key("n1")) if isinstance(e, NodeQuarantined)]
    assert not quarantined


def test_node_faults_under_load_are_named_and_recovered(cluster: Cluster, load: Load) -> None:
    services(cluster, {f"n{i}": 2 for i in range(1, len(NODE) * ROUNDS + 1)})
    facts = run_all(cluster, load, NODE)
    wrong = [w for s, events in facts for w in judge(s, events)]
    assert not wrong, "\n".join(wrong)
    counted = against_nodes(facts)
    assert sum(counted.values()) == len(facts), counted  # each fault counted once
    assert not misplaced(facts)


def lose_node(agent: subprocess.Popen[bytes], run: str, node: str) -> None:
    """The node's agent and the run's worker there die at once (the run's only worker
    on that node: one slot a node)."""
    victims = [p for p in worker_pids(run) if environ_of(p).get("RUNLEDGER_NODE") == node]
    assert victims, f"no worker of {run} on {node}"
    os.killpg(agent.pid, signal.SIGKILL)
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    agent.wait(30)


def test_a_node_lost_under_load_is_named_and_its_survivor_is_not_blamed(
        cluster: Cluster, load: Load) -> None:
    """An elastic run (min 1, max 2) loses the node of its rank 1 mid-run: the record
    names that node (``NodeLost``, ``infrastructure:node_lost`` against it), never the
    survivor's, and the run finishes on the survivor."""
    nodes = [f"n{i}" for i in range(1, 2 * ROUNDS + 1)]
    cluster.env["RUNLEDGER_CHECKPOINT_ROOT"] = str(cluster.work / "checkpoints")
    cluster.controller()
    agents = {node: cluster.agent(node, 1) for node in nodes}
    services_ready(cluster, nodes)
    runs = []
    for r in range(ROUNDS):
        doc = job(Scenario("elastic", worker_args(), (), "succeeded"), r)
        doc["command"] = [PY, "-m", "agent.testworker", "--steps", "60", "--step-time", "0.25"]
        doc["topology"] = {"replicas": 2, "slots_per_node": 1}
        doc["membership"] = {"kind": "elastic", "min": 1, "max": 2}
        runs.append(cluster.submit(doc))
    lost = {}
    for run in runs:
        facts = cluster.wait_facts(run, lambda fs: any(
            isinstance(e, StepCommitted) and e.step >= 3 for e in fs), RUN_LIMIT_S,
            f"{run}'s third step under load ({load})")
        first = next(e for e in facts if isinstance(e, GenerationStarted))
        victim = next(m.node for m in first.members if m.logical_id != "r0")
        lose_node(agents[victim], run, victim)
        lost[run] = (victim, next(m.node for m in first.members if m.logical_id == "r0"))
    wrong = []
    for run, (victim, survivor) in lost.items():
        facts = cluster.wait_facts(run, ended, RUN_LIMIT_S, f"{run}'s end under load")
        named = [e.node for e in of_type(facts, "NodeLost")]
        blamed = [(f.signature, f.node) for f in of_type(facts, "FailureClassified")]
        (end,) = of_type(facts, "RunFinished")
        if named != [victim] or blamed != [("infrastructure:node_lost", victim)]:
            wrong.append(f"{run}: lost {victim} (survivor {survivor}); NodeLost {named}, "
                         f"failures {blamed}")
        if end.outcome != "succeeded":
            wrong.append(f"{run}: {end.outcome} ({end.reason})")
    assert not wrong, "\n".join(wrong)
    assert busy(load) == len(load.pids), "the load must last the whole scenario"
