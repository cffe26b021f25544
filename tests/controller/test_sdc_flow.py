"""Silent data corruption through the controller: suspicion, rollback, replay, verdict."""

from __future__ import annotations

import json
from dataclasses import replace

from controller.emitter import Emitter
from controller.inputs import rule_for, take
from events.codec import default_codec
from events.model import (
    CheckpointRevoked,
    CorruptionClassified,
    Event,
    FailureClassified,
    GroupStartCommanded,
    NodeQuarantined,
    WriteRejected,
    node_key,
)
from events.sdcenv import SDC_REPLAY, SdcReplay
from events.state import Status
from events.workerenv import CheckpointEnv, TierEnv
from tests.controller.test_reconcile import PLAN, Sim, types

NODES = ("n1", "n2")
CODEC = default_codec()


def two_nodes(checkpoint: CheckpointEnv | None = None) -> Sim:
    """A run of two ranks, r0 on n1 and r1 on n2, Running, with checkpoints at 2 and 4."""
    sim = Sim(plan=replace(PLAN, slots_per_node=1, checkpoint=checkpoint))
    for node in NODES:
        sim.agent(node, 1)
    sim.submit()
    sim.tick()
    assert [m.node for m in sim.state.members] == list(NODES)
    sim.beat(1)
    sim.tick()
    for step in range(1, 5):
        sim.step()
        if step % 2 == 0:
            commit(sim, 1, step)
    assert [c.step for c in sim.state.checkpoints] == [2, 4]
    return sim


def commit(sim: Sim, gen: int, step: int) -> list[str]:
    for lid in ("r0", "r1"):
        sim.send(sim.ev.shard(gen, step, lid))
    return types(sim.send(sim.ev.proposed(gen, step, dataset_id=None)))


def suspect(sim: Sim, step: int, gen: int = 1) -> list[str]:
    return types(sim.send(sim.ev.suspected(gen, step, ranks=(1,), fingerprints=("x", "y"),
                                           nodes=NODES)))


def restart(sim: Sim) -> GroupStartCommanded:
    """Every rank exits 87; the controller restarts; the first start command."""
    gen = sim.state.generation
    for lid, node in zip(("r0", "r1"), NODES, strict=True):
        sim.send(sim.ev.exited(gen, lid, exit_code=87, node=node))
    out = sim.tick()
    assert "FailureClassified" in types(out)
    for _ in range(20):
        out = sim.tick(1_000)
        starts = [e for _, e in out if isinstance(e, GroupStartCommanded)]
        if starts:
            return starts[0]
    raise AssertionError("no restart")


def test_a_suspicion_revokes_later_checkpoints_and_refuses_new_ones() -> None:
    sim = two_nodes()
    sim.step()  # step 5
    assert suspect(sim, 4) == ["CorruptionSuspected", "CheckpointRevoked"]
    revoked = [e for _, e in sim.log if isinstance(e, CheckpointRevoked)]
    assert [(r.step, r.reason) for r in revoked] == [(4, "corruption_suspected")]
    assert revoked[0].header.causation_id == sim.log[-2][1].header.event_id  # why: the suspicion
    assert sim.state.checkpoint is not None and sim.state.checkpoint.step == 2
    out = sim.send(sim.ev.proposed(1, 6, dataset_id=None))
    assert isinstance(out[0][1], WriteRejected) and out[0][1].reason == "corruption_suspected"
    assert "agreement at step 4 of generation 1 (ranks [1], part params)" in out[0][1].detail


def test_every_checkpoint_at_or_after_the_step_goes_newest_first() -> None:
    sim = two_nodes()
    for _ in range(2):
        sim.step()
    assert commit(sim, 1, 6) == ["ManifestCommitted"]
    assert suspect(sim, 3) == ["CorruptionSuspected", "CheckpointRevoked", "CheckpointRevoked"]
    assert [e.step for _, e in sim.log if isinstance(e, CheckpointRevoked)] == [6, 4]
    assert [c.step for c in sim.state.checkpoints] == [2]
    # A second, later suspicion changes nothing: the earlier one already distrusts it.
    assert suspect(sim, 5) == ["CorruptionSuspected"]
    assert sim.state.suspicion is not None and sim.state.suspicion.step == 3


def test_the_restart_resumes_before_the_suspicion_and_replays_it() -> None:
    sim = two_nodes()
    suspect(sim, 4)
    start = restart(sim)
    assert start.resume_step == 2 and sim.state.generation == 2
    # Every rank exits 87: the member classified first says nothing about a node.
    [failure] = [e for _, e in sim.log if isinstance(e, FailureClassified)]
    assert failure.signature == "silent_corruption:exit=87:suspected"
    assert "its replay, not this exit, judges the node" in failure.detail
    assert dict(sim.model.node_failures) == {}
    # The replay swaps the suspect rank's node with the other rank's.
    assert [(m.logical_id, m.node) for m in sim.state.members] == [("r0", "n2"), ("r1", "n1")]
    assert start.node == "n1" and [m.logical_id for m in start.members] == ["r1"]
    replay = SdcReplay.from_environ(start.env)
    assert replay == SdcReplay(step=4, generation=1, fingerprints=("x", "y"), ranks=(1,))
    assert json.loads(start.env[SDC_REPLAY])["step"] == 4
    # A transient flip: the replay agrees with rank 0; the verdict closes the suspicion.
    out = sim.send(sim.ev.replayed(2, 4, 1, fingerprints=("x", "x"), nodes=("n2", "n1")))
    assert types(out) == ["StepReplayed", "CorruptionClassified"]
    verdict = out[1][1]
    assert isinstance(verdict, CorruptionClassified)
    assert (verdict.verdict, verdict.ranks, verdict.nodes) == ("transient", (1,), ("n2",))
    assert sim.state.suspicion is None
    assert not [e for _, e in sim.log if isinstance(e, NodeQuarantined)]
    # The run goes on: a checkpoint at the suspect step commits now.
    sim.beat(2)
    sim.tick()
    for _ in range(2):
        sim.step()
    assert commit(sim, 2, 4) == ["ManifestCommitted"]
    assert sim.state.status == Status.RUNNING


def test_a_deviation_again_on_the_same_node_quarantines_it_with_the_evidence() -> None:
    sim = two_nodes()
    suspect(sim, 4)
    restart(sim)
    assert [m.node for m in sim.state.members] == ["n2", "n1"]
    # The replay swapped the ranks' nodes: n2 is wrong whichever rank runs there.
    out = sim.send(sim.ev.replayed(2, 4, 1, fingerprints=("z", "x"), nodes=("n2", "n1")))
    assert types(out) == ["StepReplayed", "CorruptionClassified", "NodeQuarantined"]
    quarantine = out[2][1]
    assert isinstance(quarantine, NodeQuarantined) and quarantine.node == "n2"
    assert quarantine.header.run_id == node_key("n2")
    assert "silent data corruption in run run-1" in quarantine.reason
    assert "rank 1 on n2 held y" in quarantine.reason
    assert sim.model.inventory.nodes["n2"].quarantined
    for _, e in sim.log:  # every record the controller appended fits its schema
        CODEC.encode(e)
    # A replay of the same step again settles nothing more: the suspicion is closed.
    assert types(sim.send(sim.ev.replayed(2, 4, 1, fingerprints=("z", "x"),
                                          nodes=("n2", "n1")))) == ["StepReplayed"]


def test_checkpoints_only_on_the_nodes_keep_the_replay_in_place() -> None:
    tier = TierEnv("local", "/nvme/ckpt", "process")
    sim = two_nodes(CheckpointEnv(root="/nvme/ckpt", tiers=(tier,)))
    suspect(sim, 4)
    start = restart(sim)
    assert [m.node for m in sim.state.members] == list(NODES)  # a move would lose its shards
    assert CheckpointEnv.from_environ(start.env).failure_domain == "process"
    shared = two_nodes(CheckpointEnv(root="/shared/ckpt"))
    suspect(shared, 4)
    start = restart(shared)
    assert [m.node for m in shared.state.members] == ["n2", "n1"]
    assert CheckpointEnv.from_environ(start.env).failure_domain == "host"


def test_an_exit_87_waits_for_the_suspicion_its_coordinator_reports() -> None:
    sim = two_nodes()
    # Rank 1 exits first; its coordinator's suspicion is still on its way.
    sim.send(sim.ev.exited(1, "r1", exit_code=87, node="n2"))
    assert "FailureClassified" not in types(sim.tick(1_000))
    assert suspect(sim, 4) == ["CorruptionSuspected", "CheckpointRevoked"]
    sim.send(sim.ev.exited(1, "r0", exit_code=87, node="n1"))
    out = sim.tick()
    [failure] = [e for _, e in out if isinstance(e, FailureClassified)]
    assert failure.signature == "silent_corruption:exit=87:suspected"
    # A job's own exit 87 without a suspicion is classified once the wait is over.
    sim = two_nodes()
    sim.send(sim.ev.exited(1, "r1", exit_code=87, node="n2"))
    assert "FailureClassified" not in types(sim.tick(1_000))
    sim.now += 10_000
    for node in NODES:  # both agents alive (else r0's silent node would be the lost one)
        sim.send(sim.ev.agent_heartbeat(node, slots=1, domain="d1", busy_slots=1))
    out = sim.tick()
    [failure] = [e for _, e in out if isinstance(e, FailureClassified)]
    assert failure.signature == "silent_corruption:exit=87" and failure.node == "n2"


def test_a_node_another_controller_owns_is_quarantined_under_the_runs_key() -> None:
    sim = two_nodes()
    suspect(sim, 4)
    restart(sim)
    event = sim.ev.replayed(2, 4, 1, fingerprints=("z", "x"), nodes=("n2", "n1"))
    em = Emitter(sim.model, sim.now, sim.plan_of, owns=lambda key: not key.startswith("node/"))
    rule = rule_for(event)
    assert rule is not None
    take(em, event, rule)
    model, out = em.result()
    quarantines: list[Event] = [e for _, e in out if isinstance(e, NodeQuarantined)]
    assert [e.header.run_id for e in quarantines] == ["run-1"]
    assert model.inventory.nodes["n2"].quarantined


def test_a_requeued_replay_is_placed_with_its_suspect_rank_off_its_node() -> None:
    """The restart cannot keep n2 (an operator drains it), so the run is queued and
    admitted anew on n1 and n3; admission alone would put rank 0 back on n1, where it
    deviated, and a faulty n1 would then disagree with itself the same way twice (no
    node blamed: tests/proof's sim found it)."""
    sim = two_nodes(CheckpointEnv(root="/shared/ckpt"))
    sim.agent("n3", 1)
    sim.send(sim.ev.suspected(1, 4, ranks=(0,), fingerprints=("x", "y"), nodes=NODES))
    for lid, node in zip(("r0", "r1"), NODES, strict=True):
        sim.send(sim.ev.exited(1, lid, exit_code=87, node=node))
    assert "FailureClassified" in types(sim.tick())
    assert types(sim.send(sim.ev.node_request("drain", "n2", event_id="req-drain"))) == [
        "NodeCordoned"]
    starts: list[GroupStartCommanded] = []
    for _ in range(60):
        starts = [e for _, e in sim.tick(1_000) if isinstance(e, GroupStartCommanded)]
        if starts:
            break
    assert starts, "the run was never admitted again"
    assert sim.state.generation == 2
    assert "RunQueued" in [e.event_type for _, e in sim.log]
    placed = {m.logical_id: m.node for m in sim.state.members}
    assert placed == {"r0": "n3", "r1": "n1"}  # rank 0 swapped off n1
    assert CheckpointEnv.from_environ(starts[0].env).failure_domain == "host"
    assert SdcReplay.from_environ(starts[0].env) == SdcReplay(
        step=4, generation=1, fingerprints=("x", "y"), ranks=(0,))
