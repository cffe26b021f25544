"""``runledger nodes``' view, folded from agents' reports and node facts (runledger.nodeview)."""

from __future__ import annotations

import pytest

from runledger.nodeview import UnknownNode, check_known, lines, rows
from tests.events.builders import Ev

EV = Ev("x", start=1_000_000, tick=1_000)


def test_a_quarantined_node_shows_why_and_since_and_uncordon_makes_it_ready() -> None:
    beat = EV.agent_heartbeat("n1", slots=4, domain="rack-1", busy_slots=0)
    fail = [EV.failure(1, "restart", node="n1", signature="worker_crash:signal=9")
            for _ in range(3)]
    quarantine = EV.quarantined("n1", reason="3 failures on the node")
    now = quarantine.header.occurred_at + 5_000
    [row] = rows([beat, *fail, quarantine], now)
    assert (row["node"], row["slots"], row["domain"], row["state"], row["failures"]) == (
        "n1", 4, "rack-1", "quarantined", 3)
    assert row["why"] == "3 failures on the node"
    assert row["since_ms"] == quarantine.header.occurred_at and row["since"].endswith("Z")
    assert row["heartbeat_age_s"] == (now - beat.header.occurred_at) / 1000
    assert "quarantined" in lines([row])[1]
    [freed] = rows([beat, *fail, quarantine, EV.uncordoned("n1")], now)
    assert (freed["state"], freed["failures"], freed["why"]) == ("ready", 0, "")


def test_lost_and_cordoned_nodes() -> None:
    beat = EV.agent_heartbeat("n1", slots=2, domain="d", busy_slots=0)
    later = beat.header.occurred_at + 60_000
    [lost] = rows([beat], later)
    assert lost["state"] == "lost" and "no heartbeat for 60 s" in lost["why"]
    [cordoned] = rows([beat, EV.cordoned("n1")], beat.header.occurred_at + 2_000)
    assert cordoned["state"] == "cordoned" and cordoned["why"] == "maintenance (by alice)"


def test_an_unknown_node_is_named_with_the_known_ones() -> None:
    events = [EV.agent_registered("n1"), EV.agent_registered("n2")]
    check_known("n1", events)
    with pytest.raises(UnknownNode, match=r"unknown node 'ghost'.*known nodes: n1, n2"):
        check_known("ghost", events)
    with pytest.raises(UnknownNode, match="none: no agent has registered yet"):
        check_known("ghost", [])
