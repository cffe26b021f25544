"""The node lifecycle through the controller's pure core: operators' requests, a quarantine's
expiry, and the queue reasons that name blocked nodes (controller.node_decide, inputs)."""

from __future__ import annotations

from dataclasses import replace

from controller.model import NodePolicy, replay
from controller.node_decide import UNKNOWN_NODE, WRONG_KEY
from controller.runplan import RunPlan
from controller.spec.parts import RetryPolicy
from events.model import (
    NodeCordoned,
    NodeQuarantined,
    NodeQuarantineExpired,
    NodeUncordoned,
    WriteRejected,
    node_key,
)
from events.state import Status
from tests.controller.test_reconcile import Sim, running, types

FLAKY = RunPlan(world_size=2, argv=("train",), slots_per_node=2,
                retry={"worker_crash": RetryPolicy(attempts=20, backoff_base_s=0.0,
                                                   backoff_cap_s=0.0, escalate_after=20)})


def request(sim: Sim, operation: str, node: str = "n1", **kw: object) -> list[str]:
    ev = sim.ev.node_request(operation, node, event_id=f"req-{operation}-{sim.now}", **kw)
    return types(sim.send(ev))


def quarantined_sim() -> Sim:
    sim = running(FLAKY)
    for _ in range(3):  # three node faults on n1: its worker killed by a signal
        sim.step()
        sim.send(sim.ev.exited(sim.state.generation, "r0", exit_code=None, signal=9,
                               node="n1"))
        sim.tick()
        sim.tick(1)
    assert sim.model.inventory.nodes["n1"].quarantined
    return sim


def test_a_quarantined_node_is_named_in_the_queue_reason_and_uncordon_frees_it() -> None:
    sim = quarantined_sim()
    sim.agent("n1", 2)  # the agent keeps heartbeating: it is alive, only quarantined
    sim.tick(1)
    assert sim.state.status == Status.QUEUED
    reason = sim.state.queue_reason
    assert "n1 is quarantined (3 failures on the node)" in reason, reason
    assert "runledger node uncordon n1" in reason
    assert "no live agent has registered" not in reason
    assert request(sim, "uncordon") == ["NodeUncordoned"]
    freed = [e for _, e in sim.log if isinstance(e, NodeUncordoned)][-1]
    assert freed.failures_cleared == 3 and freed.run_id == node_key("n1")
    assert sim.model.node_failures["n1"] == 0 and not sim.model.inventory.nodes["n1"].quarantined
    assert "RunAdmitted" in types(sim.tick(1))


def test_a_freed_node_is_quarantined_again_under_a_new_event_id() -> None:
    sim = quarantined_sim()
    sim.agent("n1", 2)
    request(sim, "uncordon")
    sim.tick(1)
    for _ in range(3):
        sim.step()
        sim.send(sim.ev.exited(sim.state.generation, "r0", exit_code=None, signal=9,
                               node="n1"))
        sim.tick()
        sim.tick(1)
    ids = [e.header.event_id for _, e in sim.log if isinstance(e, NodeQuarantined)]
    assert ids == [f"{node_key('n1')}/NodeQuarantined/3", f"{node_key('n1')}/NodeQuarantined/3/r1"]


def test_cordon_blocks_admission_but_keeps_a_restart_and_drain_moves_it() -> None:
    sim = running(FLAKY)
    assert request(sim, "cordon") == ["NodeCordoned"]
    sim.step()
    sim.send(sim.ev.exited(sim.state.generation, "r0", exit_code=1, node="n1"))
    sim.tick()
    out = sim.tick(1)
    assert "GenerationStarted" in types(out)  # a cordon keeps the runs placed there
    assert request(sim, "drain") == ["NodeCordoned"]
    assert sim.model.inventory.nodes["n1"].cordon == "drain"
    sim.step()
    sim.send(sim.ev.exited(sim.state.generation, "r0", exit_code=1, node="n1"))
    sim.tick()
    sim.tick(1)
    assert sim.state.status == Status.QUEUED  # drained: no restart there
    assert "n1 is drained (maintenance)" in sim.state.queue_reason
    sim.agent("n2", 2)
    assert "RunAdmitted" in types(sim.tick(1))
    assert {m.node for m in sim.state.members} == {"n2"}


def test_unknown_node_and_wrong_key_are_refused_and_change_nothing() -> None:
    sim = running()
    before = sim.model.inventory
    assert request(sim, "uncordon", "ghost") == ["WriteRejected"]
    refused = sim.log[-1][1]
    assert isinstance(refused, WriteRejected) and refused.reason == UNKNOWN_NODE
    assert "'ghost'" in refused.detail and "known nodes: n1" in refused.detail
    assert request(sim, "cordon", "n1", run_id=node_key("n2")) == ["WriteRejected"]
    assert sim.log[-1][1].reason == WRONG_KEY  # type: ignore[attr-defined]
    assert sim.model.inventory == before


def test_a_quarantine_expires_on_the_clock_into_probation() -> None:
    sim = quarantined_sim()
    # The fact says when the controller's expiry (default 3600 s) frees the node.
    (first,) = [e for _, e in sim.log if isinstance(e, NodeQuarantined)]
    assert first.expires_at == first.header.occurred_at + 3_600_000
    assert sim.model.inventory.nodes["n1"].quarantine_expires_at == first.expires_at
    sim.model = replace(sim.model, node_policy=NodePolicy(expiry_ms=60_000,
                                                          probation_failures=2))
    sim.agent("n1", 2)
    assert "NodeQuarantineExpired" not in types(sim.tick(59_000))
    out = sim.tick(1_000)
    expired = [e for _, e in out if isinstance(e, NodeQuarantineExpired)]
    assert len(expired) == 1 and expired[0].failures == 2
    assert sim.model.node_failures["n1"] == 2
    node = sim.model.inventory.nodes["n1"]
    assert not node.quarantined and node.quarantine_expires_at == 0
    assert (node.probation_since, node.probation_failures) == (
        expired[0].header.occurred_at, 2)
    # Probation: the next node fault quarantines it again at once.
    sim.agent("n1", 2)
    assert "RunAdmitted" in types(sim.tick(1))
    sim.beat(sim.state.generation)
    sim.step()
    sim.send(sim.ev.exited(sim.state.generation, "r0", exit_code=None, signal=9, node="n1"))
    assert "NodeQuarantined" in types(sim.tick())
    again = [e for _, e in sim.log if isinstance(e, NodeQuarantined)][-1]
    assert again.expires_at == again.header.occurred_at + 60_000
    assert sim.model.inventory.nodes["n1"].probation_since == 0  # quarantined, not on probation


def test_no_expiry_when_the_policy_says_never() -> None:
    sim = quarantined_sim()
    sim.model = replace(sim.model, node_policy=NodePolicy(expiry_ms=0))
    assert "NodeQuarantineExpired" not in types(sim.tick(10 ** 9))
    assert NodePolicy(expiry_ms=0).expires_at(10 ** 9) == 0  # what its quarantines record


def test_replay_rebuilds_the_same_inventory_and_counts() -> None:
    sim = quarantined_sim()
    sim.agent("n1", 2)
    request(sim, "uncordon")
    request(sim, "drain")
    facts = [e for topic, e in sim.log if topic == "runledger.runs"]
    agents = [sim.ev.agent_registered("n1", slots=2, domain="d1", at=sim.now)]
    rebuilt = replay([*agents, *facts], sim.model.since, sim.plan_of)
    node = rebuilt.inventory.nodes["n1"]
    assert node.cordon == "drain" and not node.quarantined and node.releases == 1
    assert rebuilt.node_failures["n1"] == sim.model.node_failures["n1"] == 0
    assert isinstance(facts[-1], NodeCordoned)
