"""The simulator's truth about operators' requests and the nodes' cordons (proof.nodes, via
proof.truth): node operations by epoch (N), a request taken once (X), placements kept off
cordoned and drained nodes (G), and the bookkeeping of generations and queues (U), the agent's
fencing of an older generation (K). Each on a small log that keeps it, then with one thing
wrong, which it must name."""

from __future__ import annotations

import pytest

from agent.decide import WorkerKey
from controller.emitter import Out
from controller.replays import REPLAYED, SUPERSEDED
from events.model import (
    AgentRegistered,
    CancelRequested,
    GenerationStarted,
    GroupStartCommanded,
    GroupStopCommanded,
    Header,
    Member,
    NodeCordoned,
    NodeOperationRequested,
    NodeUncordoned,
    RunCancelled,
    RunQueued,
    RunSubmitted,
    WriteRejected,
    node_key,
)
from events.topics import COMMANDS, RUNS
from proof import truth
from proof.props import Violation
from proof.truth import stop_obeyed
from proof.world import NODES, RUN, Worker, World, plan
from tests.proof.logs import GANG, h, opened


def _request(op: str, node: str, epoch: int | None, rid: str = "op") -> NodeOperationRequested:
    return NodeOperationRequested(header=Header(rid, node_key(node), 0, 5, "operator/oncall"),
                                  node=node, operation=op, principal="oncall", reason="r",
                                  epoch=epoch)


def _fact(e: NodeOperationRequested) -> Out:
    hdr = h(f"{e.header.event_id}/{e.operation}", 0, 6, e.header.event_id, node_key(e.node))
    if e.operation == "uncordon":
        return (RUNS, NodeUncordoned(header=hdr, node=e.node, principal="oncall", reason="r",
                                     failures_cleared=0))
    return (RUNS, NodeCordoned(header=hdr, node=e.node, mode=e.operation, principal="oncall",
                               reason="r"))


def _refusal(e: NodeOperationRequested, reason: str) -> Out:
    return (RUNS, WriteRejected(header=h(f"w{e.header.event_id}", 0, 6, run=e.run_id),
                                rejected_event_id=e.header.event_id,
                                rejected_event_type=e.event_type, reason=reason, detail="d"))


def _judge(t: truth.Truth, e: NodeOperationRequested | CancelRequested, outs: list[Out]) -> None:
    """As the simulator does: about to read, the transaction appended, then read."""
    t.reading(e)
    t.appended(outs)
    t.read(e, True, outs, 10)


def _known(t: truth.Truth) -> truth.Truth:
    for n in NODES:
        t.read(AgentRegistered(header=Header(f"reg{n}", node_key(n), 0, 3, "agent"), node=n,
                               slots=1, domain=n), True, [], 3)
    return t


def test_n_an_operation_at_the_current_epoch_becomes_its_fact_an_older_one_is_refused() -> None:
    cordon = _request("drain", "n3", 0)
    with pytest.raises(Violation, match=r"N: drain of n3 at the current epoch 0 appended "
                                        r"\[\], refused \['superseded'\]; want one NodeCordoned"):
        _judge(_known(opened()), cordon, [_refusal(cordon, SUPERSEDED)])
    t = _known(opened())
    _judge(t, cordon, [_fact(cordon)])
    assert t.ops.cordons == {"n3": "drain"} and t.ops.epochs == {"n3": 1}
    stale = _request("uncordon", "n3", 0, "op2")
    with pytest.raises(Violation, match=r"N: uncordon of n3 seen at epoch 0, the node at 1: "
                                        r"appended \['NodeUncordoned'\]"):
        _judge(t, stale, [_fact(stale)])
    t = _known(opened())
    _judge(t, cordon, [_fact(cordon)])
    _judge(t, stale, [_refusal(stale, SUPERSEDED)])
    _judge(t, _request("uncordon", "n3", 1, "op3"), [_fact(_request("uncordon", "n3", 1, "op3"))])
    assert t.ops.cordons == {}


def test_n_a_node_the_controller_has_not_heard_of_is_refused() -> None:
    e = _request("cordon", "n2", 0)
    _judge(opened(), e, [_refusal(e, "unknown_node")])
    with pytest.raises(Violation, match=r"N: cordon of n2, a node the controller has not heard"):
        _judge(opened(), e, [_fact(e)])


def test_x_a_request_already_applied_is_refused_when_read_again() -> None:
    e = _request("cordon", "n2", 0)
    t = _known(opened())
    _judge(t, e, [_fact(e)])
    with pytest.raises(Violation, match=r"X: NodeOperationRequested op, already taken, was "
                                        r"read again: appended \['NodeCordoned'\]"):
        _judge(t, e, [_fact(e)])
    t = _known(opened())
    _judge(t, e, [_fact(e)])
    _judge(t, e, [_refusal(e, REPLAYED)])
    _judge(t, e, [])  # a refusal the rejection window only counted
    cancel = CancelRequested(header=Header("can", RUN, 0, 5, "operator/oncall"),
                             principal="oncall", reason="r")
    t = _known(opened())
    ended: list[Out] = [(RUNS, RunCancelled(header=h("rc", 1, 9, "can"), principal="oncall",
                                            reason="r"))]
    _judge(t, cancel, ended)
    with pytest.raises(Violation, match=r"X: CancelRequested can, already taken"):
        _judge(t, cancel, [_refusal(_request("cordon", "n1", 0, "can"), "terminal")])


def test_g_admission_keeps_off_cordons_and_a_restart_off_drains_and_new_cordons() -> None:
    def stopped(t: truth.Truth) -> None:
        t.appended([(COMMANDS, GroupStopCommanded(header=h(f"s{n}", 1, 20), command_id=f"c{n}",
                                                  node=n, reason="x")) for n in ("n1", "n2")])

    def restart(members: tuple[Member, ...], reason: str = "restart") -> list[Out]:
        return [(RUNS, GenerationStarted(header=h("g2", 2, 30), members=members, reason=reason,
                                         resume_step=0))]
    for mode, members, ok in (("cordon", GANG, True), ("drain", GANG, False),
                              ("cordon", (GANG[0], Member("r1", "n3", 0)), False)):
        t = _known(opened())
        node = members[1].node
        e = _request(mode, node, 0)
        _judge(t, e, [_fact(e)])
        stopped(t)
        if ok:
            t.appended(restart(members))
        else:
            with pytest.raises(Violation, match=rf"G: generation 2 .*quarantined or cordoned: "
                                                rf"{node}"):
                t.appended(restart(members))


def test_u_generations_follow_one_another_and_a_queue_repeats_no_reason() -> None:
    t = opened()
    t.appended([(COMMANDS, GroupStopCommanded(header=h(f"s{n}", 1, 20), command_id=f"c{n}",
                                              node=n, reason="x")) for n in ("n1", "n2")])
    with pytest.raises(Violation, match=r"U: generation 3 starts after generation 1"):
        t.appended([(RUNS, GenerationStarted(header=h("g3", 3, 30), members=GANG,
                                             reason="restart", resume_step=0))])
    t = truth.Truth(plan(), frozenset(NODES), RUN, World())
    queued: list[Out] = [
        (RUNS, RunSubmitted(header=h("sub", 0, 1), spec_digest="sha256:x", spec_json="{}",
                            principal="alice", world_size=2, dataset_id="ds")),
        (RUNS, RunQueued(header=h("q1", 0, 2), reason="needs 2 slots"))]
    t.appended(queued)
    t.appended([(RUNS, RunQueued(header=h("q2", 0, 3), reason="another reason"))])
    with pytest.raises(Violation, match=r"U: RunQueued q3 repeats the reason the run is already "
                                        r"queued for: another reason"):
        t.appended([(RUNS, RunQueued(header=h("q3", 0, 4), reason="another reason"))])


def test_k_a_newer_generation_launched_leaves_no_older_one_running() -> None:
    world = World()
    a = world.agents["n1"]
    world.workers.append(Worker(WorkerKey(RUN, 1, "r0"), "n1", 0, ("r0", "r1"), ()))
    start = GroupStartCommanded(header=h("st2", 2, 20), command_id="c2", node="n1",
                                members=GANG[:1], world_size=2, master_addr="a", master_port=1,
                                argv=("x",), env={})
    world.commands.append(start)
    a.read = 1
    stop_obeyed(world, a)  # generation 2 not launched here (yet): nothing owed
    world.workers.append(Worker(WorkerKey(RUN, 2, "r0"), "n1", 0, ("r0", "r1"), ()))
    with pytest.raises(Violation, match=r"K: agent n1 read c2; still running: sim-run/g1/r0"):
        stop_obeyed(world, a)
    world.workers[0].phase = "exited"
    stop_obeyed(world, a)
