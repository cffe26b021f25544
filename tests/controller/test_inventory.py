"""The inventory fold (controller.inventory) and the node decisions (controller.node_decide):
example cases, and properties over random sequences of node records."""

from __future__ import annotations

import itertools
from functools import reduce

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.inventory import (
    CORDONED,
    DRAINING,
    EMPTY,
    LOST,
    QUARANTINED,
    READY,
    Inventory,
    count_failures,
    observe,
    state_of,
)
from controller.model import NodePolicy
from controller.node_decide import expiries
from events.model import Event
from tests.events.builders import Ev

EV = Ev("x", start=1_000, tick=10)
NODES = ("n1", "n2")
TIMEOUT = 15_000


def fold(events: list[Event]) -> Inventory:
    return reduce(observe, events, EMPTY)


def one_record(node: str, kind: str) -> Event:
    match kind:
        case "beat":
            return EV.agent_heartbeat(node, slots=2, domain="d", busy_slots=1)
        case "quarantine":
            return EV.quarantined(node)
        case "cordon" | "drain":
            return EV.cordoned(node, mode=kind)
        case "uncordon":
            return EV.uncordoned(node)
        case _:
            return EV.quarantine_expired(node)


records = st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(
    ("beat", "quarantine", "cordon", "drain", "uncordon", "expire"))), max_size=30)


@settings(max_examples=200, deadline=None)
@given(records)
def test_the_last_word_decides_and_nodes_do_not_interfere(steps: list[tuple[str, str]]) -> None:
    events = [one_record(n, k) for n, k in steps]
    inv = fold(events)
    for node in NODES:
        mine = [k for n, k in steps if n == node]
        # Folding one node's records alone gives that node the same state.
        alone = fold([e for e, (n, _) in zip(events, steps, strict=True) if n == node])
        assert alone.nodes.get(node) == inv.nodes.get(node)
        if not mine:
            assert node not in inv.nodes
            continue
        n = inv.nodes[node]
        lifted = [k for k in mine if k in ("quarantine", "uncordon", "expire")]
        assert n.quarantined == (bool(lifted) and lifted[-1] == "quarantine")
        cordons = [k for k in mine if k in ("cordon", "drain", "uncordon")]
        assert n.cordon == (cordons[-1] if cordons and cordons[-1] != "uncordon" else "")
        # Releases count the quarantines that an uncordon or an expiry lifted.
        assert n.releases == sum(1 for a, b in itertools.pairwise(lifted)
                                 if a == "quarantine" and b != "quarantine")
        assert n.placeable() == (not n.quarantined and not n.cordon)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(("fail", "job", "uncordon", "expire")), max_size=20))
def test_failure_counts_restart_at_an_uncordon_and_at_probation(steps: list[str]) -> None:
    """Node faults count (a worker killed by a signal); the job's own failures never do."""
    counts: dict[str, int] = {}
    expect = 0
    for step in steps:
        if step == "fail":
            event: Event = EV.failure(1, "restart", node="n1",
                                      signature="worker_crash:signal=9")
            expect += 1
        elif step == "job":
            event = EV.failure(1, "escalate", node="n1", failure_class="job",
                               signature="job:exit=2")
        elif step == "uncordon":
            event, expect = EV.uncordoned("n1"), 0
        else:
            event, expect = EV.quarantine_expired("n1"), 2
        counts = dict(count_failures(counts, event))
        assert counts.get("n1", 0) == expect


def test_states_for_people() -> None:
    beat = EV.agent_heartbeat("n1", slots=2, domain="d", busy_slots=1)
    now = beat.header.occurred_at
    n = fold([beat]).nodes["n1"]
    assert state_of(n, now, TIMEOUT) == (READY, "", 0)
    assert state_of(n, now + TIMEOUT + 1000, TIMEOUT)[0] == LOST
    drained = fold([beat, EV.cordoned("n1", mode="drain")]).nodes["n1"]
    assert state_of(drained, now, TIMEOUT)[0] == DRAINING  # a slot still busy
    idle = fold([beat, EV.cordoned("n1", mode="drain"),
                 EV.agent_heartbeat("n1", slots=2, domain="d", busy_slots=0)]).nodes["n1"]
    assert state_of(idle, now, TIMEOUT)[:2] == (CORDONED, "drained: maintenance (by alice)")
    q = fold([beat, EV.quarantined("n1")])
    state, why, since = state_of(q.nodes["n1"], now, TIMEOUT)
    assert (state, why) == (QUARANTINED, "3 crashes") and since > now


def test_expiry_only_after_the_policy_time_and_never_with_zero() -> None:
    q = fold([EV.agent_registered("n1"), EV.quarantined("n1", at=5_000)])
    policy = NodePolicy(expiry_ms=1_000, probation_failures=1)
    assert expiries(q, policy, 5_999) == []
    (expire,) = expiries(q, policy, 6_000)
    assert expire.node == "n1" and expire.failures == 1 and "3 crashes" in expire.reason
    assert expiries(q, NodePolicy(expiry_ms=0), 10 ** 12) == []


def test_a_node_remembers_its_agents_newest_registration_and_heartbeats_keep_it() -> None:
    first = EV.agent_registered("n1")
    beat = EV.agent_heartbeat("n1", slots=2, domain="d", busy_slots=1)
    again = EV.agent_registered("n1")
    assert fold([beat]).nodes["n1"].registered_at == 0  # a controller that began late
    assert fold([first, beat]).nodes["n1"].registered_at == first.header.occurred_at
    node = fold([first, beat, again, EV.agent_heartbeat("n1")]).nodes["n1"]
    assert node.registered_at == again.header.occurred_at > first.header.occurred_at
