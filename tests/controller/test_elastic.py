"""Elastic membership: the sizing rules (controller/elastic.py), their place in a run's
lifecycle (controller/run_decide.py rules 2-4) and a whole shrink-then-grow scenario
through the pure core, replayed."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import elastic
from controller.elastic import Elastic, Where
from controller.exits import Evidence, ExitNote
from controller.inventory import Inventory, Node
from controller.model import Tracked, replay
from controller.reconcile import tick
from controller.run_decide import Admit, Queue, Start, Stop, World, decide
from controller.runplan import RunPlan
from controller.spec.runspec import SpecError, parse_spec
from events.model import GenerationStarted, GroupStartCommanded, GroupStopCommanded, Member
from events.state import Checkpoint, RunState, Status
from events.topics import COMMANDS, RUNS
from tests.controller.test_reconcile import RUN, Sim, types

NOW = 100_000
E12 = Elastic(min=1, max=2, reference=2)
PLAN = RunPlan(world_size=2, argv=("train",), slots_per_node=1, elastic=E12)
FIXED = replace(PLAN, elastic=None)
TWO = (Member("r0", "n1", 0, "d1"), Member("r1", "n2", 0, "d1"))


def inv(*names: str, slots: int = 1, seen: int = NOW - 1_000) -> Inventory:
    return Inventory({n: Node(n, slots, "d1", seen) for n in names})


def world(inventory: Inventory, used: dict[str, int] | None = None) -> World:
    return World(NOW, 0, inventory, {}, lambda: used or {})


def state(status: Status, **kw: Any) -> RunState:
    base = RunState(run_id=RUN, status=status, spec_digest="s", principal="alice",
                    world_size=2, dataset_id=None, submitted_at=0, updated_at=0)
    return replace(base, **kw)


def test_sizes_accumulation_and_the_generation_shape() -> None:
    e = Elastic(min=2, max=8, step=3, ranks_per_replica=2, reference=5)
    assert list(e.sizes()) == [2, 5, 8]
    assert [e.accumulation(r) for r in (2, 5, 8)] == [3, 1, 1]
    assert elastic.shape(e, 2, 4) == (2, 3)
    assert elastic.shape(None, 2, 8) == (4, 1)  # a fixed run: one micro-batch per replica


def test_2_admission_takes_the_largest_size_that_fits_or_names_min_and_capacity() -> None:
    admit, start = decide(Tracked(state(Status.SUBMITTED), PLAN), world(inv("n1", "n2")))
    assert admit == Admit(TWO, 1) and start == Start(TWO, 1, "admitted")
    admit, _ = decide(Tracked(state(Status.SUBMITTED), PLAN), world(inv("n1", "n2"), {"n2": 1}))
    assert isinstance(admit, Admit) and admit.members == TWO[:1]  # min 1 starts smaller
    big = replace(PLAN, elastic=Elastic(min=3, max=4, reference=3))
    (queued,) = decide(Tracked(state(Status.SUBMITTED), big), world(inv("n1", "n2")))
    assert isinstance(queued, Queue)
    assert queued.reason.startswith("elastic min 3 replicas x 1 ranks: needs 3 slots, 2 free")
    assert "every registered node together has 2 slots" in queued.reason
    assert "membership.min" in queued.reason


def recovering(members: tuple[Member, ...] = TWO) -> RunState:
    return state(Status.RECOVERING, generation=1, members=members, awaiting_generation=True,
                 retry_not_before=NOW)


def test_3_a_loss_with_no_replacement_shrinks_and_the_survivor_keeps_its_id() -> None:
    lost = inv("n2")  # n1's agent is gone
    (start,) = decide(Tracked(recovering(), PLAN), world(lost, {"n1": 1, "n2": 1}))
    # r1 keeps its id, now rank 0; n1 is gone, so restore must survive a host loss
    assert start == Start((TWO[1],), 2, "shrink", "host")
    # A fixed run under the same loss goes back to the queue, as it always has.
    (queued,) = decide(Tracked(recovering(), FIXED), world(lost, {"n1": 1, "n2": 1}))
    assert isinstance(queued, Queue) and queued.reason.startswith("placement lost: n1")
    # A replacement node: the same size again, the newcomer takes the free id.
    (start,) = decide(Tracked(recovering(), PLAN), world(inv("n2", "n3"), {"n1": 1, "n2": 1}))
    assert start == Start((TWO[1], Member("r0", "n3", 0, "d1")), 2, "restart", "host")
    # Not even min fits: queued, naming the loss and min.
    (queued,) = decide(Tracked(recovering(), PLAN), world(inv(), {}))
    assert isinstance(queued, Queue) and "not even membership.min 1 replicas fit" in queued.reason


def test_3_a_restart_waits_for_a_node_not_heard_from_since_the_failure_then_shrinks() -> None:
    """A whole node lost at once: r0's collective breaks and it exits at once, while
    n2's agent, dead with r1, still looks fresh. Sized now the run would restart at
    full size onto n2; it waits until n2 falls silent, then shrinks, naming a host loss."""
    crashed = replace(recovering(), exits={"r0": 1}, heartbeats={"r0": NOW - 900,
                                                                  "r1": NOW - 900})
    note = ExitNote("r0", "n1", 1, None, at=NOW - 300)
    run = Tracked(crashed, PLAN, evidence=Evidence({"r0": note}))
    # n1 reported well after the exit (alive); n2 last reported before it.
    seen = {"n1": NOW + 300, "n2": NOW - 400}
    both = Inventory({n: Node(n, 1, "d1", t) for n, t in seen.items()})
    assert decide(run, world(both)) == ()
    later = World(NOW - 400 + elastic.FRESH_MS + 1, 0, Inventory({
        "n1": Node("n1", 1, "d1", NOW + 5_000), "n2": Node("n2", 1, "d1", NOW - 400)}),
        {}, lambda: {})
    (start,) = decide(run, later)
    assert start == Start((TWO[0],), 2, "shrink", "host")
    # n2's agent reports after the failure (it is alive): the same size again at once.
    back = Inventory({n: Node(n, 1, "d1", NOW + 300) for n in ("n1", "n2")})
    (start,) = decide(run, world(back))
    assert start == Start(TWO, 2, "restart", "process")
    # A fixed run does not wait: it restarts on the nodes it keeps, as it always has.
    (start,) = decide(replace(run, plan=FIXED), world(both))
    assert start == Start(TWO, 2, "restart")


@given(st.integers(0, 20_000), st.integers(0, 20_000), st.integers(0, 20_000))
def test_undecided_is_exactly_a_silent_member_on_a_node_unheard_since_the_failure(
        beat: int, seen: int, later: int) -> None:
    members = (Member("r0", "n1", 0, "d1"),)
    now = seen + later
    got = elastic.undecided(members, {}, {"r0": beat}, {"n1": seen}, now)
    unheard = seen < beat + elastic.REPORTED_AFTER_MS
    assert got == (("r0",) if unheard and later <= elastic.FRESH_MS else ())
    assert elastic.undecided(members, {"r0": beat}, {}, {"n1": seen}, now) == ()  # exited


def running(members: tuple[Member, ...], committed_at: int = NOW - 1_000,
            ckpt_gen: int = 2) -> RunState:
    ckpt = Checkpoint(10, "m", "d", ckpt_gen, committed_at)
    return state(Status.RUNNING, generation=2, members=members, checkpoint=ckpt,
                 checkpoints=(ckpt,), heartbeats={m.logical_id: NOW for m in members},
                 generation_started_at=NOW - 5_000, last_progress_at=NOW)


def test_4_growth_waits_for_a_commit_of_this_generation_and_stops_at_max() -> None:
    one = (TWO[1],)
    back = world(inv("n1", "n2"), {"n2": 1})
    stop, start = decide(Tracked(running(one), PLAN), back)
    assert stop == Stop("grow to 2 replicas at checkpoint step 10")
    assert start == Start((TWO[1], Member("r0", "n1", 0, "d1")), 3, "grow")
    # Not at a boundary: the commit is too old, or belongs to an earlier generation.
    old = running(one, committed_at=NOW - elastic.GROW_WINDOW_MS - 1)
    assert decide(Tracked(old, PLAN), back) == ()
    assert decide(Tracked(running(one, ckpt_gen=1), PLAN), back) == ()
    # At max, or a fixed run: never.
    assert decide(Tracked(running(TWO), PLAN), world(inv("n1", "n2", "n3"), {})) == ()
    assert decide(Tracked(running(one), replace(FIXED, world_size=1)), back) == ()
    # No room: nothing.
    assert decide(Tracked(running(one), PLAN), world(inv("n2"), {"n2": 1})) == ()


NODES = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 4), st.sampled_from(["d1", "d2"])),
                 min_size=0, max_size=5)


@settings(max_examples=300, deadline=None)
@given(NODES, st.integers(1, 4), st.integers(0, 4), st.integers(1, 3), st.integers(1, 2),
       st.integers(1, 3), st.data())
def test_a_size_is_allowed_maximal_keeps_survivors_and_never_oversubscribes(
    spec: list[tuple[int, int, str]], lo: int, span: int, step: int, rpr: int, cap: int,
    data: st.DataObject,
) -> None:
    e = Elastic(min=lo, max=lo + span * step, step=step, ranks_per_replica=rpr, reference=lo)
    nodes = [Node(f"n{i}", slots, dom, 0) for i, (slots, _, dom) in enumerate(spec)]
    used = {n.name: min(u, n.slots) for n, (_, u, _) in zip(nodes, spec, strict=True)}
    pool = [Member(f"r{i}", n.name, i, n.domain) for i, n in enumerate(nodes)]
    keep = data.draw(st.lists(st.sampled_from(pool), unique=True, max_size=3) if pool
                     else st.just([]))
    where = Where(nodes, used, cap, None)
    got = elastic.largest(e, keep, where, e.min)
    if got is None:  # refused only when min does not fit beside the survivors
        need = e.min * rpr - len(keep)
        held = {n.name: sum(1 for m in keep if m.node == n.name) for n in nodes}
        free = sum(max(0, min(cap - held[n.name], n.slots - used[n.name] - held[n.name]))
                   for n in nodes)
        assert need > 0 and free < need
        return
    assert got.replicas in e.sizes() and len(got.members) == got.replicas * rpr
    assert len({m.logical_id for m in got.members}) == len(got.members)
    # Survivors first, with their ids, nodes and slots, as far as the size takes them.
    assert list(got.members[:len(keep)]) == keep[:len(got.members)]
    for n in nodes:  # newcomers fit beside the other runs and under the per-node cap
        mine = sum(1 for m in got.members if m.node == n.name)
        new = sum(1 for m in got.members[len(keep):] if m.node == n.name)
        assert mine <= cap or new == 0
        assert new == 0 or used[n.name] + mine <= n.slots
    bigger = [s for s in e.sizes() if s > got.replicas]
    if bigger:  # maximal: the next allowed size does not fit
        assert elastic.largest(e, keep, where, bigger[0]) is None


def test_the_spec_checks_step_and_the_largest_world() -> None:
    base = dict(name="e", code_version="a" * 40, command=["python", "t.py"], model={},
                dataset="sha256:" + "0" * 64, resume="exact", rpo_s=60.0, rto_s=60.0,
                cancel_authority=["ops"], checkpoint={"policy": "fixed", "interval_steps": 10},
                code={"workdir": "/w"})
    ok = parse_spec(json.dumps({**base, "topology": {"replicas": 2, "slots_per_node": 1},
                                "membership": {"kind": "elastic", "min": 1, "max": 3}}), "t")
    assert ok.membership.kind == "elastic"
    for topology, membership, words in (
        ({"replicas": 2, "slots_per_node": 1}, {"kind": "elastic", "min": 1, "max": 4, "step": 2},
         "is not min 1 plus a multiple of step 2"),
        ({"replicas": 2, "slots_per_node": 1}, {"kind": "elastic", "min": 1, "max": 3, "step": 2},
         "topology.replicas 2 is not an allowed size"),
        ({"replicas": 2, "slots_per_node": 1, "ranks_per_replica": 65536},
         {"kind": "elastic", "min": 1, "max": 3}, "lower membership.max"),
    ):
        with pytest.raises(SpecError, match=words):
            parse_spec(json.dumps({**base, "topology": topology, "membership": membership}), "t")


def sim_two_nodes() -> Sim:
    sim = Sim(plan=PLAN)
    for node in ("n1", "n2"):
        sim.send(sim.ev.agent_registered(node, slots=1, domain="d1"))
    sim.send(sim.ev.submitted(spec_digest="sha256:x", world_size=2, dataset_id=None))
    sim.tick()
    beat_all(sim)
    sim.tick()
    assert sim.state.status == Status.RUNNING and sim.state.members == TWO
    return sim


def beat_all(sim: Sim) -> None:
    st_ = sim.state
    for m in st_.members:
        sim.send(sim.ev.heartbeat(st_.generation, m.logical_id, step=st_.step, node=m.node))
    for m in st_.members:
        sim.send(sim.ev.agent_heartbeat(m.node, slots=1, domain="d1", busy_slots=1))


def commit(sim: Sim, step: int) -> None:
    gen = sim.state.generation
    sim.send(sim.ev.step(gen, step, step_time_ms=1.0, input_wait_ms=0.0, loss=None))
    for m in sim.state.members:
        sim.send(sim.ev.shard(gen, step, m.logical_id))
    sim.send(sim.ev.proposed(gen, step, dataset_id=None))
    assert sim.state.checkpoint is not None and sim.state.checkpoint.step == step


def starts(out: list[Any]) -> list[GenerationStarted]:
    return [e for _, e in out if isinstance(e, GenerationStarted)]


def test_a_lost_node_shrinks_the_run_and_its_return_grows_it_at_the_next_commit() -> None:
    sim = sim_two_nodes()
    (g1,) = starts(sim.log)
    assert (g1.replicas, g1.accumulation) == (2, 1)
    commit(sim, 5)
    # n1's agent and worker fall silent; n2 keeps beating.
    for _ in range(12):
        sim.now += 1_500
        sim.send(sim.ev.heartbeat(1, "r1", step=5, node="n2"))
        sim.send(sim.ev.agent_heartbeat("n2", slots=1, domain="d1", busy_slots=1))
        sim.tick()
    shrink = starts(sim.log)[-1]
    assert (shrink.header.generation, shrink.reason, shrink.members) == (2, "shrink", TWO[1:])
    assert (shrink.replicas, shrink.accumulation, shrink.resume_step) == (1, 2, 5)
    cmd = [e for t, e in sim.log if t == COMMANDS and isinstance(e, GroupStartCommanded)][-1]
    assert cmd.env["RUNLEDGER_ACCUMULATION"] == "2" and cmd.world_size == 1
    beat_all(sim)
    sim.tick()
    # The old generation is fenced: its late reports are refused (rejections of one
    # key are aggregated, so this one may only be counted), never folded.
    before = sim.state.heartbeats["r1"]
    sim.now += 10
    late = sim.send(sim.ev.heartbeat(1, "r1", step=6, node="n2"))
    assert types(late) in ([], ["WriteRejected"]) and sim.state.heartbeats["r1"] == before
    proposal = sim.send(sim.ev.proposed(1, 7, dataset_id=None))
    assert types(proposal) == ["WriteRejected"] and sim.state.checkpoint.step == 5
    # n1 returns: no grow before a commit of generation 2, then one at it.
    sim.send(sim.ev.agent_heartbeat("n1", slots=1, domain="d1", busy_slots=0))
    assert starts(sim.tick(100)) == []
    commit(sim, 8)
    out = sim.tick(100)
    assert types(out)[:2] == ["GroupStopCommanded", "GenerationStarted"]
    (grow,) = starts(out)
    assert (grow.reason, grow.replicas, grow.accumulation, grow.resume_step) == ("grow", 2, 1, 8)
    assert grow.members == (TWO[1], TWO[0])  # r1 stays rank 0; r0 comes back on n1
    stop = out[0][1]
    assert isinstance(stop, GroupStopCommanded) and stop.header.generation == 2
    # Every generation fact advanced the token, and replay decides nothing new.
    gens = [e.header.generation for e in starts(sim.log)]
    assert gens == sorted(set(gens)) == [1, 2, 3]
    facts = [e for t, e in sim.log if t == RUNS]
    rebuilt = replay(facts, since=sim.now, plan_of=sim.plan_of)
    assert rebuilt.runs[RUN] == sim.state
    _, again = tick(rebuilt, sim.now + 100, sim.plan_of)
    assert starts(again) == []
