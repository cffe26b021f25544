"""Forged and bad inputs against a real controller, while a healthy run keeps committing steps.

The drills of issue "Boundaries", kept as tests: each forged type on a wrong
topic is quarantined by the controller's door with its origin; each claim the
controller can check is refused with a named reason; a zombie's flood costs
one record; a spec value that once crashed the controller fails only its run.
Throughout, an unrelated run keeps committing steps and succeeds.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from events.kafka.clients import EventProducer
from events.kafka.runkeys import ENV as RUN_KEY_ENV
from events.kafka.runkeys import RunKey, send_report
from events.model import (
    CheckpointIntervalChanged,
    CheckpointWriteFailed,
    Event,
    GroupStartCommanded,
    Header,
    HeartbeatRecorded,
    Member,
    RunCancelled,
    RunFinished,
    RunSubmitted,
    StepCommitted,
    WorkerExited,
)
from events.signed.signing import SigningKey
from events.topics import QUARANTINE, REPORTS, REQUESTS
from runledger.signer import signed_record
from tests.e2e.harness import Cluster, _environ, of_type, spec, wait, worker_pids

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def _h(run_id: str, gen: int, event_id: str, at_ms: int | None = None) -> Header:
    at = at_ms if at_ms is not None else int(time.time() * 1000)
    return Header(event_id, run_id, gen, at, "forger")


def _quarantined(cluster: Cluster, count: int) -> list[dict[str, Any]]:
    """What ``runledger events dump --topic runledger.quarantine --json`` lists, as
    docs/architecture.md §7 tells an operator to look, once it lists ``count`` records."""
    def listed() -> list[dict[str, Any]] | None:
        done = cluster.cli("events", "dump", "--topic", QUARANTINE, "--json")
        assert done.returncode == 0, done.stderr
        docs = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        return docs if len(docs) >= count else None
    return wait(listed, 60, f"{count} quarantined records")


def _steps_after(facts: list[Event], at_ms: int) -> int:
    return sum(1 for e in of_type(facts, "StepCommitted") if e.header.occurred_at > at_ms)


def test_forged_types_claims_floods_and_bad_specs_never_stop_a_healthy_run(
    cluster: Cluster,
) -> None:
    cluster.controller()
    cluster.agent("n1", 2)
    run = cluster.submit(spec("healthy", ["--steps", "150", "--step-time", "0.1"]))
    facts = cluster.wait_facts(run, lambda f: len(of_type(f, "StepCommitted")) >= 5,
                               what="the healthy run committing steps")
    (gen,) = {g.generation for g in of_type(facts, "GenerationStarted")}
    forged_at = int(time.time() * 1000)
    producer = EventProducer(cluster.bootstrap, client_id="forger")
    sends: list[tuple[str, Event]] = [
        # Facts and commands sent as inputs: strays, each on a wrong topic.
        (REPORTS, RunFinished(header=_h(run, gen, "f-1"), outcome="failed", reason="forged")),
        (REQUESTS, RunCancelled(header=_h(run, gen, "f-2"), principal="x", reason="forged")),
        (REPORTS, CheckpointIntervalChanged(
            header=_h(run, gen, "f-3"), interval_steps=1, interval_s=None, cost_s=None,
            mtbf_s=None, mtbf_source="fixed")),
        (REPORTS, GroupStartCommanded(
            header=_h(run, gen, "f-4"), command_id="f-4", node="n1",
            members=(Member("r0", "n1", 0),), world_size=1, master_addr="127.0.0.1",
            master_port=1, argv=("true",), env={})),
        # Oversize: a report far over the 256 KiB limit.
        (REPORTS, CheckpointWriteFailed(header=_h(run, gen, "f-5"), step=1, logical_id="r0",
                                        stage="shards", detail="x" * 400_000)),
        # Claims the controller checks: a step 10**12; an exit reported from the wrong
        # node, which no node key signed (events.kafka.reportdoor: quarantined, unsigned).
        (REPORTS, StepCommitted(header=_h(run, gen, "f-6"), step=10**12, tokens=1,
                                loss_tokens=1, step_time_ms=1.0, input_wait_ms=0.0)),
        (REPORTS, WorkerExited(header=_h(run, gen, "f-7"), logical_id="r0", node="n2",
                               exit_code=1)),
    ]
    # A zombie of generation 0 floods heartbeats: 300 refusals.
    sends += [(REPORTS, HeartbeatRecorded(header=_h(run, 0, f"z-{i}"), logical_id="r0",
                                          node="n1", step=0)) for i in range(300)]
    # A spec value that once crashed the controller, sent past the CLI's checks, signed
    # by the stack's operator key (the controller refuses an unsigned request first).
    bad = json.loads(facts[0].spec_json) if isinstance(facts[0], RunSubmitted) else {}
    bad.update(name="overflow", checkpoint={"policy": "auto", "mtbf_prior_s": 1e300})
    assert cluster.keys is not None
    overflowing = RunSubmitted(
        header=_h("overflow-1", 0, "f-8"), spec_digest="sha256:" + "0" * 64,
        spec_json=json.dumps(bad), principal="operator", world_size=2)
    value, headers = signed_record(producer.codec, overflowing,
                                   SigningKey.load(cluster.keys / "operator.key"))
    producer.send_bytes(REQUESTS, "overflow-1", value, headers)
    # A run id that would escape a directory, sent past the CLI.
    sends.append((REQUESTS, RunSubmitted(
        header=_h("../escape", 0, "f-9"), spec_digest="sha256:" + "1" * 64,
        spec_json="{}", principal="mallory", world_size=1)))
    # The claims and the zombie's flood are signed as a job on n1 could sign them: with
    # the run's own key (read from its worker's environment) and, for generation 0, a
    # key n1's node key certifies (the job can read that key file too). So they pass
    # the door of reports and reach the checks of the run itself.
    pid = wait(lambda: worker_pids(run) or None, 30, "the run's worker")[0]
    keys = {gen: RunKey.load(_environ(pid)[RUN_KEY_ENV]),
            0: RunKey.issue(SigningKey.load(cluster.work / "node.n1.key"), run, 0, "n1")}
    for topic, event in sends:
        if isinstance(event, StepCommitted | HeartbeatRecorded):
            send_report(producer, event, keys[event.header.generation])
        else:
            producer.send(topic, event)
    producer.flush(30)

    # Every stray, the oversize report and the unsigned exit are on the quarantine
    # topic with their origin.
    quarantined = _quarantined(cluster, 7)
    by_reason = sorted((q["quarantined"]["reason"], q["quarantined"]["origin_topic"], q["type"])
                       for q in quarantined)
    assert by_reason == [
        ("bad_name", REQUESTS, "RunSubmitted"),
        ("oversize", REPORTS, "CheckpointWriteFailed"),
        ("stray", REPORTS, "CheckpointIntervalChanged"),
        ("stray", REPORTS, "GroupStartCommanded"),
        ("stray", REPORTS, "RunFinished"),
        ("stray", REQUESTS, "RunCancelled"),
        ("unsigned", REPORTS, "WorkerExited"),
    ], quarantined
    human = cluster.cli("events", "dump", "--topic", QUARANTINE).stdout
    assert "[QUARANTINED stray from runledger.reports[" in human
    assert "RunFinished is sent by the controller on runledger.runs" in human

    facts = cluster.wait_facts(
        run, lambda f: any(isinstance(e, RunFinished) for e in f), timeout=120,
        what="the healthy run finishing")
    finished: list[Any] = of_type(facts, "RunFinished")
    assert [f.outcome for f in finished] == ["succeeded"], finished
    assert _steps_after(facts, forged_at) >= 20  # it kept committing throughout
    assert of_type(facts, "RunCancelled") == []
    assert of_type(facts, "CheckpointIntervalChanged") == []
    rejected = {(r.rejected_event_id, r.reason) for r in of_type(facts, "WriteRejected")}
    assert ("f-6", "step_jump") in rejected
    floods = [r for r in of_type(facts, "WriteRejected") if r.rejected_event_id.startswith("z-")]
    assert len(floods) <= 2, [(r.rejected_event_id, r.repeats) for r in floods]
    assert max(f.step for f in of_type(facts, "StepCommitted")) == 150

    # The overflowing spec failed its own run, with the reason; the controller lived on.
    overflow = wait(lambda: [e for e in cluster.facts("overflow-1")
                             if isinstance(e, RunFinished)] or None, 60, "the bad run failing")
    assert overflow[0].outcome == "failed" and "mtbf_prior_s" in overflow[0].reason
    assert cluster.procs[0].poll() is None, cluster.log_of("controller")[-2000:]
