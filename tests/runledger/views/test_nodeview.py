"""``runledger nodes``' view, folded from agents' reports and node facts (views.nodeview)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runledger.views.nodeview import UnknownNode, check_known, lines, rows
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


def test_a_quarantine_says_when_it_expires_and_then_the_node_is_on_probation() -> None:
    beat = EV.agent_heartbeat("n1", slots=2, domain="d", busy_slots=0)
    fail = [EV.failure(1, "restart", node="n1", signature="worker_crash:signal=9")
            for _ in range(3)]
    quarantine = EV.quarantined("n1", reason="3 failures on the node")
    expiry = quarantine.header.occurred_at + 3_600_000  # the controller's default
    quarantine = replace(quarantine, expires_at=expiry)
    [row] = rows([beat, *fail, quarantine], quarantine.header.occurred_at + 1_000)
    assert (row["quarantine_expires_ms"], row["probation"]) == (expiry, False)
    assert row["why"] == "3 failures on the node"  # the controller's reason, as recorded
    assert row["quarantine_expires"].endswith("Z")
    assert lines([row])[1].endswith(
        f"3 failures on the node; expires {row['quarantine_expires']}, then on probation")
    # A quarantine recorded without an expiry (--quarantine-expiry-s 0, or a v1 record).
    [forever] = rows([beat, *fail, EV.quarantined("n1", reason="3 failures on the node")],
                     quarantine.header.occurred_at + 1_000)
    assert forever["quarantine_expires"] is None
    assert lines([forever])[1].endswith(
        "no expiry: `runledger node uncordon n1 --reason R` frees it")

    expired = EV.quarantine_expired("n1")  # failures=2: one short of a quarantine
    beat_again = EV.agent_heartbeat("n1", slots=2, domain="d", busy_slots=0)
    [row] = rows([beat, *fail, quarantine, expired, beat_again],
                 beat_again.header.occurred_at + 1_000)
    assert (row["state"], row["failures"], row["probation"], row["quarantine_expires"]) == (
        "ready", 2, True, None)
    assert row["probation_since_ms"] == expired.header.occurred_at
    text = lines([row])[1]
    assert text.split()[5:7] == ["ready", "2"]  # state, failures
    assert text.endswith(f"on probation since {row['probation_since']} (its quarantine "
                         "expired): 1 more failure(s) quarantine it again")
    # An uncordon ends the probation; a new quarantine replaces it.
    [freed] = rows([beat, *fail, quarantine, expired, EV.uncordoned("n1")],
                   beat_again.header.occurred_at + 1_000)
    assert (freed["probation"], freed["failures"]) == (False, 0)
    again = EV.quarantined("n1", reason="3 failures on the node")
    [back] = rows([beat, *fail, quarantine, expired, fail[0], again],
                  again.header.occurred_at + 1_000)
    assert (back["state"], back["probation"], back["failures"]) == ("quarantined", False, 3)


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
