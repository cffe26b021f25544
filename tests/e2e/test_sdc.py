"""Silent data corruption end to end: a bit flipped in one replica's state is caught by
cross-replica agreement within the step, nothing after it is committed, the run rolls
back and replays the step; a one-off flip is judged transient and the run finishes, a
flip that comes back on the same node at every replay quarantines that node, and a
parameter flipped at rest between steps is transient on the rank that consumed it.

Two torch processes (gloo), a real broker, a controller and agents as real processes;
the flips come from the worker's injector (``RUNLEDGER_FAULT=bitflip@...``).
"""

from __future__ import annotations

from typing import Any

import pytest

from events.model import Event, NodeQuarantined, RunFinished, node_key
from tests.e2e.ckpt_setup import dataset, tiny_spec
from tests.e2e.harness import Cluster, of_type

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]

AGREEMENT = {"agreement": {"every": 1, "full_every": 4}}


def _spec(cluster: Cluster, name: str, ds: str, **over: Any) -> dict[str, Any]:
    doc = tiny_spec(cluster, name, ds, steps=10, interval=2, model={"dropout": 0.0})
    doc["sdc"] = AGREEMENT
    doc.update(over)
    return doc


def _has(name: str) -> Any:
    return lambda facts: bool(of_type(facts, name))


def _succeeded(cluster: Cluster, fault: str, doc: dict[str, Any]) -> list[Event]:
    """The facts of a run on one node of two slots, injected with ``fault``, that must
    end succeeded."""
    cluster.env["RUNLEDGER_FAULT"] = fault
    cluster.controller()
    cluster.agent("n1", 2)
    run = cluster.submit(doc)
    facts = cluster.wait_facts(run, _has("RunFinished"), timeout=240, what="the run to end")
    (end,) = of_type(facts, "RunFinished")
    assert end.outcome == "succeeded", cluster.log_of("agent-n1")[-3000:]
    return facts


def test_a_one_off_flip_is_caught_rolled_back_replayed_and_judged_transient(
        cluster: Cluster) -> None:
    ds = dataset(cluster)
    # one bit of one of rank 1's parameters, at step 5 of generation 1 only
    facts = _succeeded(cluster, "bitflip@5:rank=1:gen=1:target=param:seed=3",
                       _spec(cluster, "sdc-once", ds))
    (suspect,) = of_type(facts, "CorruptionSuspected")
    assert (suspect.step, suspect.generation, suspect.detector) == (5, 1, "agreement")
    assert suspect.part.startswith("param:")
    assert suspect.fingerprints[0] != suspect.fingerprints[1]
    # nothing at or after the suspect step was committed by the generation that saw it
    assert all(c.step < 5 for c in of_type(facts, "ManifestCommitted") if c.generation == 1)
    failure = next(f for f in of_type(facts, "FailureClassified") if f.generation == 1)
    assert failure.failure_class == "silent_corruption"
    start = of_type(facts, "GenerationStarted")[1]
    assert start.resume_step == 4  # the newest checkpoint before the suspicion
    (replayed,) = of_type(facts, "StepReplayed")
    assert (replayed.step, replayed.suspected_generation, replayed.generation) == (5, 1, 2)
    # the replay recomputed, bit for bit, what the unflipped rank held
    assert replayed.fingerprints == (suspect.fingerprints[0],) * 2
    (verdict,) = of_type(facts, "CorruptionClassified")
    assert (verdict.verdict, verdict.ranks, verdict.step) == ("transient", (1,), 5)
    assert [c.step for c in of_type(facts, "ManifestCommitted")] == [2, 4, 6, 8, 10]
    assert not of_type(cluster.facts(node_key("n1")), "NodeQuarantined")


def test_a_parameter_flipped_at_rest_is_judged_transient_on_the_flipped_rank(
        cluster: Cluster) -> None:
    ds = dataset(cluster)
    # one bit of one of rank 1's parameters, at rest between steps 4 and 5, generation 1
    # only: rank 1's step 5 consumes it and the all-reduce carries it into rank 0
    facts = _succeeded(cluster, "bitflip@5:rank=1:gen=1:target=param:when=rest:seed=3",
                       _spec(cluster, "sdc-at-rest", ds))
    (suspect,) = of_type(facts, "CorruptionSuspected")
    assert (suspect.step, suspect.generation, suspect.detector) == (5, 1, "agreement")
    # rank 1 consumed other state than rank 0 and than its own recomputation
    (replayed,) = of_type(facts, "StepReplayed")
    assert replayed.consumed == (suspect.consumed[0],) * 2 != suspect.consumed
    (verdict,) = of_type(facts, "CorruptionClassified")
    assert (verdict.verdict, verdict.ranks, verdict.step) == ("transient", (1,), 5), \
        verdict.detail
    assert not of_type(cluster.facts(node_key("n1")), "NodeQuarantined")


def test_a_flip_at_every_replay_on_one_node_quarantines_that_node(cluster: Cluster) -> None:
    ds = dataset(cluster)
    # node n2 flips a gradient bit at step 5 in every generation: a bad node
    cluster.env["RUNLEDGER_FAULT"] = "bitflip@5:node=n2:target=grad:seed=11"
    cluster.controller()
    cluster.agent("n1", 1)
    cluster.agent("n2", 1)
    run = cluster.submit(_spec(cluster, "sdc-bad-node", ds,
                               topology={"replicas": 2, "slots_per_node": 1}))

    def quarantined(facts: list[Event]) -> bool:
        return any(isinstance(e, NodeQuarantined) for e in facts)

    node_facts = cluster.wait_facts(node_key("n2"), quarantined, timeout=240,
                                    what="n2 quarantined")
    (q,) = of_type(node_facts, "NodeQuarantined")
    assert "silent" in q.reason and "step 5" in q.reason, q.reason
    facts = cluster.facts(run)
    suspicions = of_type(facts, "CorruptionSuspected")
    assert [s.step for s in suspicions][:2] == [5, 5]
    verdict = of_type(facts, "CorruptionClassified")[0]
    assert (verdict.verdict, verdict.nodes) == ("node_fault", ("n2",)), verdict.detail
    assert not any(isinstance(e, RunFinished) and e.outcome == "succeeded" for e in facts)
    assert all(c.step < 5 for c in of_type(facts, "ManifestCommitted"))
    assert not of_type(cluster.facts(node_key("n1")), "NodeQuarantined")
