"""A corruption suspicion through real processes on a real broker: the controller
restarts the group to replay the step, classifies the replay, and the run goes on.

The test worker stands in for the torch session's detectors (``agent.testworker``,
mode ``corrupt``): in generation 1 its rank 0 reports that rank 1 disagrees at step
4 and every rank exits 87; the replaying generation recomputes what rank 0 held.
"""

from __future__ import annotations

import json

import pytest

from events.model import GroupStartCommanded, RunFinished
from events.sdcenv import SDC, SDC_REPLAY
from tests.e2e.harness import Cluster, of_type, spec

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def test_a_one_off_disagreement_is_replayed_classified_transient_and_the_run_succeeds(
        cluster: Cluster) -> None:
    cluster.controller()
    cluster.agent("n1", 2)
    run = cluster.submit(spec(
        "sdc", ["--steps", "8", "--step-time", "0.1", "--fail-mode", "corrupt",
                "--fail-at-step", "4", "--fail-generation", "1"],
        sdc={"agreement": {"every": 1}}))
    facts = cluster.wait_facts(
        run, lambda f: any(isinstance(e, RunFinished) for e in f), timeout=120,
        what="the run's end")
    assert of_type(facts, "RunFinished")[0].outcome == "succeeded"
    (suspected,) = of_type(facts, "CorruptionSuspected")
    assert (suspected.generation, suspected.step, suspected.ranks) == (1, 4, (1,))
    (failure,) = of_type(facts, "FailureClassified")
    assert failure.signature == "silent_corruption:exit=87:suspected"
    assert failure.action == "restart"
    (replayed,) = of_type(facts, "StepReplayed")
    assert (replayed.generation, replayed.step, replayed.suspected_generation) == (2, 4, 1)
    (verdict,) = of_type(facts, "CorruptionClassified")
    assert (verdict.verdict, verdict.ranks, verdict.nodes) == ("transient", (1,), ("n1",))
    assert not of_type(facts, "NodeQuarantined")
    starts = {e.generation: e for e in cluster.commands(run) if isinstance(e, GroupStartCommanded)}
    assert json.loads(starts[1].env[SDC])["agreement_every"] == 1
    assert SDC_REPLAY not in starts[1].env
    assert json.loads(starts[2].env[SDC_REPLAY])["step"] == 4
