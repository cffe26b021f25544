"""What ``runledger nodes`` shows, folded from events. Pure.

The agents' ``AgentRegistered`` and ``AgentHeartbeatRecorded`` (reports) and
the node facts of ``runledger.runs`` are folded with the controller's own
inventory fold (``controller.inventory.observe``), and the failures attributed
to each node with its ``count_failures``, so the view says what the controller
decides on: a quarantine says when it expires (``NodeQuarantined.expires_at``,
the controller's ``--quarantine-expiry-s``), and a node whose quarantine expired
says it is on probation, with how many more failures quarantine it again. "Now"
is a parameter; heartbeat ages and lost nodes are judged by
the controller's node timeout.

Tested in tests/runledger/views/test_nodeview.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import reduce
from typing import Any

from controller.inventory import (
    EMPTY,
    NODE_RECORDS,
    QUARANTINED,
    Inventory,
    count_failures,
    observe,
    state_of,
)
from controller.run_decide import NODE_QUARANTINE_AFTER, NODE_TIMEOUT_MS
from events.model import Event, FailureClassified
from runledger.errors import RunledgerError


class UnknownNode(RunledgerError):
    """A node no agent has registered and no fact names."""


def inventory(events: Iterable[Event]) -> tuple[Inventory, Mapping[str, int]]:
    """The nodes and their failure counts after ``events`` (reports and facts, in order)."""
    inv: Inventory = EMPTY
    counts: Mapping[str, int] = {}
    for event in events:
        if isinstance(event, NODE_RECORDS):
            inv = observe(inv, event)
        if isinstance(event, (FailureClassified, *NODE_RECORDS)):
            counts = count_failures(counts, event)
    return inv, counts


def rows(events: Iterable[Event], now_ms: int) -> list[dict[str, Any]]:
    """One row per node, by name: slots, domain, heartbeat age, failures counted against
    it, state, why and since when, a quarantine's expiry and a probation."""
    inv, counts = inventory(events)
    out = []
    for n in sorted(inv.nodes.values(), key=lambda n: n.name):
        state, why, since = state_of(n, now_ms, NODE_TIMEOUT_MS)
        expires = n.quarantine_expires_at if n.quarantined else 0
        probation = n.probation_since if not n.quarantined else 0
        out.append({
            "node": n.name, "slots": n.slots, "busy_slots": n.busy_slots, "domain": n.domain,
            "address": n.address,
            "heartbeat_age_s": round((now_ms - n.last_seen) / 1000, 1) if n.last_seen else None,
            "state": state, "why": why, "since_ms": since or None,
            "since": _iso(since) if since else None, "failures": counts.get(n.name, 0),
            "quarantine_expires_ms": expires or None,
            "quarantine_expires": _iso(expires) if expires else None,
            "probation": bool(probation), "probation_since_ms": probation or None,
            "probation_since": _iso(probation) if probation else None,
        })
    return out


def lines(table: list[dict[str, Any]]) -> list[str]:
    head = f"{'node':<20} {'slots':>5} {'busy':>4} {'domain':<12} {'beat':>7}  {'state':<12} " \
           f"{'fails':>5}  since                 why"
    out = [head]
    for r in table:
        age = "-" if r["heartbeat_age_s"] is None else f"{r['heartbeat_age_s']:.0f}s"
        out.append(f"{r['node']:<20} {r['slots']:>5} {r['busy_slots']:>4} {r['domain']:<12} "
                   f"{age:>7}  {r['state']:<12} {r['failures']:>5}  {r['since'] or '-':<21} "
                   f"{_why(r)}")
    return out


def _why(row: dict[str, Any]) -> str:
    """The state's reason, with when a quarantine ends and what a probation allows."""
    why: str = row["why"]
    if row["state"] == QUARANTINED:
        if row["quarantine_expires"]:
            return f"{why}; expires {row['quarantine_expires']}, then on probation"
        return f"{why}; no expiry: `runledger node uncordon {row['node']} --reason R` frees it"
    if row["probation"]:
        left = max(NODE_QUARANTINE_AFTER - row["failures"], 1)
        on = (f"on probation since {row['probation_since']} (its quarantine expired): "
              f"{left} more failure(s) quarantine it again")
        return f"{why}; {on}" if why else on
    return why


def check_known(name: str, events: Iterable[Event]) -> None:
    """Raise ``UnknownNode`` naming ``name`` and the known nodes unless it is one of them."""
    known = sorted(reduce(observe, (e for e in events if isinstance(e, NODE_RECORDS)),
                          EMPTY).nodes)
    if name not in known:
        listed = ", ".join(known) if known else "none: no agent has registered yet"
        raise UnknownNode(f"unknown node {name!r}: no agent has registered it "
                          f"(known nodes: {listed}); `runledger nodes` lists them")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
