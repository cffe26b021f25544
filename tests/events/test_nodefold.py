"""The node-facts fold (events.nodefold): examples, and properties over random sequences of
node facts for two nodes, mixed with events of other kinds."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import reduce

from hypothesis import given, settings
from hypothesis import strategies as st

from events import nodefold
from events.model import Event
from events.nodefold import CORDONED, NOTHING, QUARANTINED, READY, NodeFacts, fold, observe
from tests.events.builders import Ev

NODES = ("n1", "n2")
KINDS = ("quarantine", "cordon", "drain", "uncordon", "expire", "beat")


def one(ev: Ev, node: str, kind: str, i: int) -> Event:
    """The ``i``-th record: a node fact (the quarantine expiring at a time of its own, the
    expiry with a probation count of its own), or an agent's heartbeat (no fact)."""
    match kind:
        case "quarantine":
            return ev.quarantined(node, reason=f"q{i}", expires_at=10_000 + i)
        case "cordon" | "drain":
            return ev.cordoned(node, mode=kind, reason=f"c{i}", principal=f"p{i}")
        case "uncordon":
            return ev.uncordoned(node)
        case "expire":
            return ev.quarantine_expired(node, failures=i)
        case _:
            return ev.agent_heartbeat(node)


steps = st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(KINDS)), max_size=30)


def events_of(plan: list[tuple[str, str]]) -> list[Event]:
    ev = Ev("x", start=1_000, tick=10)
    return [one(ev, n, k, i) for i, (n, k) in enumerate(plan)]


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_last_word_decides_and_nodes_do_not_interfere(plan: list[tuple[str, str]]) -> None:
    events = events_of(plan)
    for node in NODES:
        mine = [(i, k, e) for i, ((n, k), e) in enumerate(zip(plan, events, strict=True))
                if n == node]
        facts = fold(node, events)
        # Another node's facts and the heartbeats are passed over: a fold of this node's
        # facts alone, with observe, gives the same.
        assert facts == reduce(observe, [e for _, k, e in mine if k != "beat"], NOTHING)
        lifts = [(i, k, e) for i, k, e in mine if k in ("quarantine", "uncordon", "expire")]
        cordons = [(i, k, e) for i, k, e in mine if k in ("cordon", "drain", "uncordon")]
        last_lift = lifts[-1] if lifts else None
        last_cordon = cordons[-1] if cordons else None
        assert facts.quarantined == (last_lift is not None and last_lift[1] == "quarantine")
        if facts.quarantined and last_lift is not None:
            i, _, e = last_lift
            assert (facts.quarantine_reason, facts.quarantined_at,
                    facts.quarantine_expires_at) == (f"q{i}", e.header.occurred_at, 10_000 + i)
        else:
            assert (facts.quarantine_reason, facts.quarantined_at,
                    facts.quarantine_expires_at) == ("", 0, 0)
        if last_cordon is None or last_cordon[1] == "uncordon":
            assert (facts.cordon, facts.cordon_reason, facts.cordoned_by,
                    facts.cordoned_at) == ("", "", "", 0)
        else:
            i, k, e = last_cordon
            assert (facts.cordon, facts.cordon_reason, facts.cordoned_by,
                    facts.cordoned_at) == (k, f"c{i}", f"p{i}", e.header.occurred_at)
        # Probation: from the last expiry, until a quarantine or an uncordon ends it.
        if last_lift is not None and last_lift[1] == "expire":
            i, _, e = last_lift
            assert (facts.probation_since, facts.probation_failures) == (
                e.header.occurred_at, i)
        else:
            assert (facts.probation_since, facts.probation_failures) == (0, 0)
        # Releases count the quarantines that an uncordon or an expiry lifted.
        kinds = [k for _, k, _ in lifts]
        assert facts.releases == sum(1 for a, b in itertools.pairwise(kinds)
                                     if a == "quarantine" and b != "quarantine")
        assert facts.placeable() == (not facts.quarantined and not facts.cordon)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_standing_is_quarantine_first_then_the_cordon(plan: list[tuple[str, str]]) -> None:
    for node in NODES:
        facts = fold(node, events_of(plan))
        what, why, since = nodefold.standing(facts)
        if facts.quarantined:
            assert (what, why, since) == (
                QUARANTINED, facts.quarantine_reason, facts.quarantined_at)
        elif facts.cordon:
            words = f"{facts.cordon_reason} (by {facts.cordoned_by})"
            assert (what, since) == (CORDONED, facts.cordoned_at)
            assert why == (f"drained: {words}" if facts.cordon == "drain" else words)
        else:
            assert (what, why, since) == (READY, "", 0)


@dataclass(frozen=True, slots=True)
class Tagged(NodeFacts):
    """A caller's own node: its fields first, the facts after them by keyword."""

    name: str
    seen: int = 0


@settings(max_examples=100, deadline=None)
@given(steps)
def test_a_subclass_keeps_its_own_fields_and_folds_the_same(
        plan: list[tuple[str, str]]) -> None:
    events = [e for e, (n, k) in zip(events_of(plan), plan, strict=True)
              if n == "n1" and k != "beat"]
    tagged = reduce(observe, events, Tagged("n1", seen=7))
    assert type(tagged) is Tagged and (tagged.name, tagged.seen) == ("n1", 7)
    plain = fold("n1", events)
    assert all(getattr(tagged, f) == getattr(plain, f) for f in NodeFacts.__dataclass_fields__)


def test_events_of_other_kinds_change_nothing() -> None:
    ev = Ev("x")
    facts = fold("n1", [ev.cordoned("n1", mode="drain")])
    for other in (ev.agent_heartbeat("n1"), ev.submitted(), ev.failure(1, node="n1")):
        assert observe(facts, other) is facts


def test_an_uncordon_frees_everything_and_an_expiry_only_the_quarantine() -> None:
    ev = Ev("x", start=1_000, tick=10)
    drained = [ev.cordoned("n1", mode="drain"), ev.quarantined("n1", expires_at=5_000)]
    assert nodefold.standing(fold("n1", drained)) == (QUARANTINED, "3 crashes", 1_020)
    expired = fold("n1", [*drained, ev.quarantine_expired("n1", failures=2)])
    assert nodefold.standing(expired) == (CORDONED, "drained: maintenance (by alice)", 1_010)
    assert (expired.releases, expired.probation_since, expired.probation_failures) == (
        1, 1_030, 2)
    freed = fold("n1", [*drained, ev.uncordoned("n1")])
    assert freed == NodeFacts(releases=1)
    assert nodefold.standing(freed) == (READY, "", 0)
