"""Elastic membership end to end (issue #15): real agents, real torch workers (gloo),
a real broker. Two nodes of one slot each; a node is lost with its agent and its
worker (both SIGKILLed at once, as a host loss takes them).

- A fixed run of 2 replicas under that loss does what it always did: it never runs
  smaller, and once the node is back it finishes at its size.
- The same run declared elastic (min 1, max 2) continues on the survivor from the
  last commit (``shrink``: one replica, two micro-batches a step, the restore told
  to survive a host loss), then grows back at a checkpoint boundary when the node
  returns (``grow``), the survivor keeping its logical id throughout.
- "The global batch keeps its meaning" is checked against the fixed run, from what
  the workers served (``RUNLEDGER_TRACE_BATCHES``): for every step, the rows the
  generation that kept the step served are the fixed run's rows of that step, no
  row twice, none skipped; and the loss of every step equals the fixed run's within
  1e-3 relative (the same samples and optimizer steps; only the order floats are
  summed in differs between sizes, with dropout off).
- Storage tiers: checkpoints go to a host-local tier and are copied to a remote
  one. The host loss takes the local tier's files with it; the shrink restores
  from the remote tier without trying the local one.
- Every generation is fenced: every fact of the run is accepted by the fold in log
  order, and nothing of a generation is appended after the next one started.
- The record is right about the loss (issue #32): ``NodeLost`` names n2 and the failure
  is n2's, never the survivor's; ``status``, ``query incidents``, ``query recovery``
  and the report name it; ETTR names the detection from n2's last report and the
  grow's parts, so ``other`` stays under 2% of the allocation, which the parts sum to.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from events.fold import apply
from events.model import (
    CheckpointRestored,
    Event,
    GenerationStarted,
    StepCommitted,
    WriteRejected,
)
from events.topics import REPORTS
from events.workerenv import NODE
from tests.e2e.ckpt_setup import dataset, tiny_spec
from tests.e2e.harness import Cluster, _environ, of_type, worker_pids

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]

STEPS = 72
INTERVAL = 4
Row = tuple[tuple[int, ...], ...]


def _spec(cluster: Cluster, name: str, ds: str, elastic: bool) -> dict[str, Any]:
    doc = tiny_spec(cluster, name, ds, steps=STEPS, interval=INTERVAL,
                    model={"dropout": 0.0, "step_sleep_s": 0.3})
    doc["topology"] = {"replicas": 2, "slots_per_node": 1}
    # A host-local tier (its files die with the host) and a remote one. Tier roots
    # are the operator's to provide (a missing one is a storage fault naming it).
    for tier in ("local", "remote"):
        (cluster.work / tier).mkdir(exist_ok=True)
    doc["checkpoint"] = {"policy": "fixed", "interval_steps": INTERVAL, "tiers": [
        {"name": "local", "root": str(cluster.work / "local"), "protects": ["process"]},
        {"name": "remote", "root": str(cluster.work / "remote"), "protects": ["cluster"]}]}
    if elastic:
        doc["membership"] = {"kind": "elastic", "min": 1, "max": 2}
    return doc


def _lose_node(agent: subprocess.Popen[bytes], run: str, node: str,
               disk: Path | None) -> None:
    """The agent and the run's worker on ``node`` die at once, and with them the
    host-local tier's files (``disk``) when the host held them."""
    victims = [p for p in worker_pids(run) if _environ(p).get(NODE) == node]
    assert victims, f"no worker of {run} on {node}"
    os.killpg(agent.pid, signal.SIGKILL)
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    agent.wait(10)
    if disk is not None:
        shutil.rmtree(disk)


def _committed(gen: int, step: int):  # type: ignore[no-untyped-def]
    return lambda facts: any(e.event_type == "ManifestCommitted" and e.generation == gen
                             and e.step >= step for e in facts)


def _started(reason: str):  # type: ignore[no-untyped-def]
    return lambda facts: any(isinstance(e, GenerationStarted) and e.reason == reason
                             for e in facts)


def _done(facts: list[Event]) -> bool:
    return any(e.event_type == "RunFinished" for e in facts)


def _kept(trace: Path) -> dict[int, list[Row]]:
    """Per step, the rows served by the last generation that served it (ranks in order)."""
    lines = []
    for path in sorted(trace.glob("g*-r*.jsonl")):
        lines += [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    last = {}
    for x in lines:
        last[x["step"]] = max(last.get(x["step"], 0), x["generation"])
    rows: dict[int, list[Row]] = {}
    for x in sorted(lines, key=lambda x: (x["step"], x["rank"])):
        if x["generation"] == last[x["step"]]:
            rows.setdefault(x["step"], []).extend(
                tuple(tuple(span) for span in row) for row in x["spans"])
    return rows


def _losses(facts: list[Event]) -> dict[int, float]:
    """The loss of each step as the generation that kept it reported it."""
    return {e.step: float(e.loss) for e in facts
            if isinstance(e, StepCommitted) and e.loss is not None}


def _assert_fenced(facts: list[Event]) -> None:
    state = None
    newest = 0
    for e in facts:
        verdict = apply(state, e)
        assert verdict.verdict.accepted or isinstance(e, WriteRejected), (
            f"{e.event_type} (generation {e.generation}) refused: {verdict.verdict}")
        state = verdict.state if verdict.state is not None else state
        if isinstance(e, GenerationStarted):
            newest = e.generation
        elif e.generation and not isinstance(e, WriteRejected):
            assert e.generation == newest, f"{e.event_type} of generation {e.generation}" \
                                           f" after generation {newest} started"


def _assert_rpo_matches_the_loss(cluster: Cluster, run: str, facts: list[Event],
                                 shrink: GenerationStarted, restored: int) -> None:
    """`runledger query recovery` (over a projection replayed from the log) said, when
    the host was lost, that a host loss would go back to the step the shrink then
    restored from the remote tier, and a process loss to the newest local commit."""
    db = cluster.work / "projection.duckdb"
    done = cluster.cli("replay", "--db", str(db))
    assert done.returncode == 0, done.stderr
    out = cluster.cli("query", "recovery", run, "--db", str(db), "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["rows"]
    at_loss: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["event_type"] == "FailureClassified":
            break
        at_loss[row["domain"]] = row
    host, process = at_loss["host"], at_loss["process"]
    assert host["recoverable_step"] == restored, (host, restored)
    assert process["recoverable_step"] == shrink.resume_step, (process, shrink.resume_step)
    reached = max(e.step for e in facts[:facts.index(shrink)] if isinstance(e, StepCommitted))
    lost = reached - restored  # what the host loss cost, as the restore shows it
    print(f"host loss: reached step {reached}, restored {restored} from the remote tier,"
          f" {lost} steps lost; the local tier held {shrink.resume_step}")
    assert lost >= 0 and host["recoverable_step"] <= process["recoverable_step"]
    out = cluster.cli("query", "incidents", run, "--db", str(db), "--json")
    assert out.returncode == 0, out.stderr
    incident = json.loads(out.stdout)["rows"][0]  # the host loss
    assert (incident["resumed_from"], incident["restored_tier"]) == (restored, "remote")
    assert incident["rpo_steps"] == lost


def _assert_the_lost_node_is_named(cluster: Cluster, run: str, facts: list[Event]) -> None:
    """The record is right about the loss (issue #32): n2 is named as lost, the failure
    is n2's (the survivor's exit a consequence), and `status`, `query incidents`,
    `query recovery` and the report say so; ETTR names every part of the allocation
    (`other` under 2%) and the parts still sum to it."""
    (lost,) = of_type(facts, "NodeLost")
    assert (lost.node, lost.members) == ("n2", ("r1",)), lost
    assert all(c.startswith("r0 on n1 ") for c in lost.consequences), lost.consequences
    first = of_type(facts, "FailureClassified")[0]
    assert facts.index(lost) < facts.index(first)
    assert (first.signature, first.node) == ("infrastructure:node_lost", "n2"), first
    assert not [f for f in of_type(facts, "FailureClassified") if f.node == "n1"], \
        "the survivor was blamed"
    status = cluster.cli("status", run)
    assert status.returncode == 0, status.stderr
    assert "infrastructure:node_lost" in status.stdout and "node n2 lost" in status.stdout
    db = str(cluster.work / "projection.duckdb")
    out = cluster.cli("query", "incidents", run, "--db", db, "--json")
    incident = json.loads(out.stdout)["rows"][0]
    assert (incident["node"], incident["lost_node"]) == ("n2", "n2"), incident
    print(f"incident: detection {incident['detection_s']} s, RTO {incident['rto_s']} s;"
          f" consequences {incident['consequences']}")
    out = cluster.cli("query", "recovery", run, "--db", db, "--json")
    hosts = [r for r in json.loads(out.stdout)["rows"]
             if r["event_type"] == "FailureClassified" and r["domain"] == "host"]
    assert [r["node"] for r in hosts] == ["n2"], hosts
    html = cluster.work / "report.html"
    done = cluster.cli("report", run, "--db", db, "--html", str(html))
    assert done.returncode == 0, done.stderr
    page = html.read_text()
    section = page[page.index('id="incidents"'):page.index('id="sdc"')]
    assert "n2" in section and "infrastructure:node_lost" in section
    out = cluster.cli("query", "ettr", run, "--db", db, "--json")
    parts = {r["part"]: r["seconds"] for r in json.loads(out.stdout)["rows"]}
    allocated = parts.pop("allocated")
    print("ETTR parts (s):", parts, "allocated", allocated)
    assert sum(parts.values()) == pytest.approx(allocated, abs=0.001 * len(parts))
    assert parts["other"] < 0.02 * allocated, parts
    assert parts["resize_rendezvous"] > 0 and parts["detection"] > 0


def _run_with_a_node_loss(cluster: Cluster, agents: dict[str, subprocess.Popen[bytes]],
                          doc: dict[str, Any], lost_until: str) -> tuple[str, list[Event]]:
    run = cluster.submit(doc)
    cluster.wait_facts(run, _committed(1, 8), timeout=240, what="a commit at step 8 or later")
    _lose_node(agents["n2"], run, "n2", cluster.work / "local" / run if lost_until else None)
    if lost_until:
        cluster.wait_facts(run, _started(lost_until), timeout=120, what=f"a {lost_until}")
    else:  # the fixed run: the node is back once its loss was seen
        cluster.wait_facts(run, lambda f: len(of_type(f, "FailureClassified")) >= 1,
                           timeout=120, what="the failure classified")
    agents["n2"] = cluster.agent("n2", 1)
    facts = cluster.wait_facts(run, _done, timeout=300, what="the run to finish")
    (end,) = of_type(facts, "RunFinished")
    assert end.outcome == "succeeded", cluster.log_of("controller")[-3000:]
    return run, facts


def test_an_elastic_run_shrinks_on_a_node_loss_and_grows_back_serving_the_same_batches(
        cluster: Cluster) -> None:
    ds = dataset(cluster)
    trace = cluster.work / "trace"
    cluster.env["RUNLEDGER_TRACE_BATCHES"] = str(trace)
    cluster.controller()
    agents = {"n1": cluster.agent("n1", 1), "n2": cluster.agent("n2", 1)}

    fixed, fixed_facts = _run_with_a_node_loss(cluster, agents, _spec(cluster, "fixed", ds, False),
                                               "")
    starts = of_type(fixed_facts, "GenerationStarted")
    assert len(starts) >= 2 and all(len(g.members) == 2 for g in starts), \
        [(g.reason, len(g.members)) for g in starts]
    assert all(g.reason in ("admitted", "restart") for g in starts)

    run, facts = _run_with_a_node_loss(cluster, agents, _spec(cluster, "elastic", ds, True),
                                       "shrink")
    starts = of_type(facts, "GenerationStarted")
    story = [(g.reason, [(m.logical_id, m.node) for m in g.members], g.replicas,
              g.accumulation) for g in starts]
    assert story[0] == ("admitted", [("r0", "n1"), ("r1", "n2")], 2, 1), story
    shrink = starts[1]  # at once: never a full-size restart onto the dead node first
    assert shrink.reason == "shrink", story
    assert [(m.logical_id, m.node) for m in shrink.members] == [("r0", "n1")], story
    assert (shrink.replicas, shrink.accumulation) == (1, 2), story
    assert shrink.resume_step is not None and shrink.resume_step >= 8
    grow = starts[-1]
    assert grow.reason == "grow" and grow.generation > shrink.generation, story
    assert [(m.logical_id, m.node) for m in grow.members] == [("r0", "n1"), ("r1", "n2")]
    assert (grow.replicas, grow.accumulation) == (2, 1)
    commands = [c for c in cluster.commands(run) if c.event_type == "GroupStartCommanded"
                and c.header.generation == shrink.generation]
    assert [c.env.get("RUNLEDGER_FAILURE_DOMAIN") for c in commands] == ["host"]
    _assert_fenced(facts)
    # The host loss never reads the host's tier: the shrink restores from the remote
    # copy, without so much as trying the local one.
    reports = [r.event for r in cluster.records(run, REPORTS)
               if r.event.header.generation == shrink.generation]
    restored = [e for e in reports if isinstance(e, CheckpointRestored)]
    assert restored and {e.tier for e in restored} == {"remote"}, restored
    assert not [e for e in reports if e.event_type == "CheckpointVerificationFailed"
                and "tier local" in e.detail]
    _assert_rpo_matches_the_loss(cluster, run, facts, shrink, restored[0].step)
    _assert_the_lost_node_is_named(cluster, run, facts)

    served, reference = _kept(trace / run), _kept(trace / fixed)
    assert sorted(served) == sorted(reference) == list(range(1, STEPS + 1))
    for step in served:
        assert sorted(served[step]) == sorted(reference[step]), f"step {step} served other rows"
    every = Counter(span for rows in served.values() for row in rows for span in row)
    assert not [s for s, n in every.items() if n > 1], "a sample served twice"

    mine, theirs = _losses(facts), _losses(fixed_facts)
    assert sorted(mine) == list(range(1, STEPS + 1))
    worst = max(abs(mine[s] - theirs[s]) / abs(theirs[s]) for s in mine)
    print(f"largest relative loss difference from the fixed run: {worst:.2e}")
    off = {s: (mine[s], theirs[s]) for s in mine
           if abs(mine[s] - theirs[s]) > 1e-3 * abs(theirs[s])}
    assert not off, f"losses differ from the fixed run's beyond 1e-3: {off}"
