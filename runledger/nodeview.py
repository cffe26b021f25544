"""What ``runledger nodes`` shows, folded from events. Pure.

The agents' ``AgentRegistered`` and ``AgentHeartbeatRecorded`` (reports) and
the node facts of ``runledger.runs`` are folded with the controller's own
inventory fold (``controller.inventory.observe``), and the failures attributed
to each node with its ``count_failures``, so the view says what the controller
decides on. "Now" is a parameter; heartbeat ages and lost nodes are judged by
the controller's node timeout.

Tested in tests/runledger/test_nodeview.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import reduce
from typing import Any

from controller.inventory import EMPTY, NODE_RECORDS, Inventory, count_failures, observe, state_of
from controller.run_decide import NODE_TIMEOUT_MS
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
    """One row per node, by name: slots, domain, heartbeat age, state, why and since when."""
    inv, counts = inventory(events)
    out = []
    for n in sorted(inv.nodes.values(), key=lambda n: n.name):
        state, why, since = state_of(n, now_ms, NODE_TIMEOUT_MS)
        out.append({
            "node": n.name, "slots": n.slots, "busy_slots": n.busy_slots, "domain": n.domain,
            "address": n.address,
            "heartbeat_age_s": round((now_ms - n.last_seen) / 1000, 1) if n.last_seen else None,
            "state": state, "why": why, "since_ms": since or None,
            "since": _iso(since) if since else None, "failures": counts.get(n.name, 0),
        })
    return out


def lines(table: list[dict[str, Any]]) -> list[str]:
    head = f"{'node':<20} {'slots':>5} {'busy':>4} {'domain':<12} {'beat':>7}  {'state':<12} " \
           "since                 why"
    out = [head]
    for r in table:
        age = "-" if r["heartbeat_age_s"] is None else f"{r['heartbeat_age_s']:.0f}s"
        out.append(f"{r['node']:<20} {r['slots']:>5} {r['busy_slots']:>4} {r['domain']:<12} "
                   f"{age:>7}  {r['state']:<12} {r['since'] or '-':<21} {r['why']}")
    return out


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
