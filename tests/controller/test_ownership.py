"""One owner per run, the pure part: ownership by partition, the tail's fold, and
``handle``/``tick`` deciding only for owned runs (controller/ownership.py, reconcile.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Model
from controller.ownership import FOREIGN_WRITER, Ownership, assign, catch_up, follow
from controller.reconcile import handle, tick
from controller.runplan import RunPlan
from events.model import AlertRaised, Event, RunSubmitted, node_key
from events.partition import partition_for
from events.record import Record
from events.topics import RUNS
from tests.events.builders import Ev

PLAN = RunPlan(world_size=1, argv=("train",), slots_per_node=1, heartbeat_timeout_ms=10_000,
               stall_timeout_ms=30_000)
NOW = 1_000_000


def plan_of(_: RunSubmitted) -> RunPlan:
    return PLAN


def runs_on(partition: int, count: int, partitions: int = 6) -> list[str]:
    """Run ids that land on ``partition``."""
    found = (f"run-{i}" for i in range(10_000))
    return [r for r in found if partition_for(r, partitions) == partition][:count]


def owning(*parts: int, me: str = "ctl-a") -> Ownership:
    own = assign(Ownership(me, 6), parts, {})
    own, _ = catch_up(own, {})
    return own


def fact(event: Event, partition: int, offset: int, writer: str) -> Record:
    return Record(RUNS, partition, offset, 0, event, 1, writer)


def submitted_model(*runs: str) -> Model:
    model = Model(since=NOW)
    for run in runs:
        model, _ = handle(model, Ev(run, start=NOW).submitted(world_size=1, dataset_id=None),
                          NOW, plan_of)
    return model


def test_a_run_is_owned_only_on_a_ready_partition_and_never_when_foreign() -> None:
    (run,) = runs_on(2, 1)
    own = assign(Ownership("ctl-a", 6), [2, 3], {2: 10, 3: 0})
    assert not own.owns(run)  # held until the tail reaches offset 10 of runs[2]
    own, ready = catch_up(own, {2: 9})
    assert ready == {3} and not own.owns(run)
    own, ready = catch_up(own, {2: 10})
    assert ready == {2} and own.owns(run)
    assert catch_up(own, {2: 11}) == (own, frozenset())
    assert not assign(own, [3], {}).owns(run)  # a new assignment replaces the old one


def test_handle_leaves_a_run_it_does_not_own_alone_but_takes_every_node() -> None:
    mine, = runs_on(0, 1)
    theirs, = runs_on(1, 1)
    own = owning(0)
    model = Model(since=NOW)
    model, out = handle(model, Ev(theirs).submitted(world_size=1, dataset_id=None), NOW,
                        plan_of, owns=own.owns)
    assert out == [] and theirs not in model.runs
    model, out = handle(model, Ev(mine).submitted(world_size=1, dataset_id=None), NOW,
                        plan_of, owns=own.owns)
    assert [e.event_type for _, e in out] == ["RunSubmitted"]
    # Agents' offers are cluster-wide, whoever's partition they came on.
    model, out = handle(model, Ev(node_key("n9")).agent_registered("n9", slots=4), NOW,
                        plan_of, owns=owning().owns)
    assert out == [] and "n9" in model.inventory.nodes


def test_tick_decides_only_owned_runs_but_counts_every_runs_slots() -> None:
    mine, = runs_on(0, 1)
    theirs, = runs_on(1, 1)
    # Another controller admits its run to the only slot; this controller reads it.
    model = submitted_model(theirs)
    model, _ = handle(model, Ev(node_key("n1")).agent_registered("n1", slots=1), NOW, plan_of)
    model, theirs_out = tick(model, NOW, plan_of, owning(1, me="ctl-b").owns)
    assert {e.run_id for _, e in theirs_out} == {theirs}
    model, _ = handle(model, Ev(mine).submitted(world_size=1, dataset_id=None), NOW, plan_of)
    model, out = tick(model, NOW, plan_of, owning(0).owns)
    assert {e.run_id for _, e in out} == {mine}
    assert [e.event_type for _, e in out] == ["RunQueued"]  # n1's slot is taken


@settings(max_examples=30, deadline=None)
@given(st.sets(st.integers(0, 5)))
def test_tick_never_writes_for_a_run_outside_the_owned_partitions(parts: set[int]) -> None:
    runs = [r for p in range(6) for r in runs_on(p, 1)]
    model = submitted_model(*runs)
    own = owning(*parts)
    _, out = tick(model, NOW, plan_of, own.owns)
    assert {e.run_id for _, e in out} <= {r for r in runs if own.owns(r)}


def test_the_tail_folds_other_writers_facts_and_skips_its_own() -> None:
    mine, = runs_on(0, 1)
    ev = Ev(mine, start=NOW)
    own = owning(0)
    model, own2, out = follow(Model(since=NOW), [
        fact(ev.submitted(world_size=1, dataset_id=None), 0, 0, "ctl-a")], [], own, NOW,
        plan_of)
    assert mine not in model.runs and out == [] and own2 == own
    model, own2, out = follow(Model(since=NOW), [
        fact(ev.submitted(world_size=1, dataset_id=None), 0, 0, "ctl-b")],
        [Ev(node_key("n1")).agent_heartbeat("n1")], assign(own, [], {}), NOW, plan_of)
    assert mine in model.runs and "n1" in model.inventory.nodes and out == []


def test_another_writer_after_the_takeover_makes_the_run_foreign_and_raises_an_alert() -> None:
    run, = runs_on(3, 1)
    ev = Ev(run, start=NOW)
    own = assign(Ownership("ctl-a", 6), [3], {3: 1})
    before = fact(ev.submitted(world_size=1, dataset_id=None), 3, 0, "ctl-b")  # the old owner
    after = fact(ev.generation_started(1), 3, 1, "ctl-b")
    model, own, out = follow(Model(since=NOW), [before], [], own, NOW, plan_of)
    assert out == [] and own.foreign == {}
    own, _ = catch_up(own, {3: 1})
    assert own.owns(run)
    model, own, out = follow(model, [after], [], own, NOW, plan_of)
    assert own.foreign == {run: "ctl-b"} and not own.owns(run)
    ((topic, alert),) = out
    assert topic == RUNS and isinstance(alert, AlertRaised)
    assert (alert.alert, alert.subject, alert.severity) == (FOREIGN_WRITER, "ctl-b", "critical")
    assert alert.header.event_id == f"{run}/alert/{FOREIGN_WRITER}/ctl-b/by/ctl-a"
    assert model.runs[run].open_alerts  # folded: the alert is a fact of the run
    # Found once: later facts of the same writer raise nothing more.
    _, _, again = follow(model, [fact(ev.step(1, 5), 3, 2, "ctl-b")], [], own, NOW, plan_of)
    assert again == []


def test_a_node_is_quarantined_only_by_the_owner_of_its_key() -> None:
    node = "n1"
    key_part = partition_for(node_key(node), 6)
    # Three failures on n1, classified by the owners of other runs and read from the tail.
    model = Model(since=NOW, node_failures={node: 3})
    assert model.node_failures[node] == 3
    _, out = tick(model, NOW, plan_of, owning(*(set(range(6)) - {key_part})).owns)
    assert not [e for _, e in out if e.event_type == "NodeQuarantined"]
    _, out = tick(model, NOW, plan_of, owning(key_part).owns)
    quarantined = [e for _, e in out if e.event_type == "NodeQuarantined"]
    assert [e.header.event_id for e in quarantined] == [f"{node_key(node)}/NodeQuarantined/3"]
