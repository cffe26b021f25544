"""ETTR as a typed result: the parts of the allocation, in seconds, and the ratio.

Tested in tests/queries/test_queries.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb

from queries.runner import run_query

PARTS = ("productive", "checkpoint", "lost_work", "detection", "recovery", "input_stall",
         "idle", "resize_stop", "resize_rendezvous", "resize_restore", "other")


@dataclass(frozen=True, slots=True)
class Ettr:
    run_id: str
    allocated_s: float
    parts_s: dict[str, float]  # every part of PARTS, seconds

    @property
    def ratio(self) -> float | None:
        """T_productive / T_allocated; None before the run has allocated time."""
        if self.allocated_s <= 0:
            return None
        return self.parts_s["productive"] / self.allocated_s

    @property
    def unexplained_s(self) -> float:
        """Allocated time the parts do not add up to (0 up to rounding, by construction)."""
        return self.allocated_s - sum(self.parts_s.values())


def ettr(con: duckdb.DuckDBPyConnection, run_id: str) -> Ettr:
    rows = {r["part"]: float(r["seconds"]) for r in run_query(con, "ettr", run_id).records()}
    allocated = rows.pop("allocated", 0.0)
    return Ettr(run_id, allocated, {p: rows.get(p, 0.0) for p in PARTS})


def ettr_all(con: duckdb.DuckDBPyConnection, recent_ended: int = 20) -> dict[str, float]:
    """Run id -> ETTR for every live run and the ``recent_ended`` runs that ended
    last; older runs are a query away."""
    out: dict[str, float] = {}
    for run_id in listed(con, recent_ended):
        ratio = ettr(con, run_id).ratio
        if ratio is not None:
            out[run_id] = ratio
    return out


def listed(con: duckdb.DuckDBPyConnection, recent_ended: int = 20) -> list[str]:
    """Every live run and the ``recent_ended`` runs that ended last, by run id."""
    rows = con.execute(
        """
        SELECT run_id FROM runs WHERE run_id NOT IN (SELECT run_id FROM endings)
        UNION
        SELECT run_id FROM (SELECT run_id, max(occurred_at) AS ended FROM endings
                            GROUP BY run_id ORDER BY ended DESC, run_id LIMIT ?)
        ORDER BY run_id
        """, [recent_ended]).fetchall()
    return [run_id for (run_id,) in rows]


@dataclass
class EttrBook:
    """ETTR of every live run and the latest ended ones, for a page scraped often.

    One run's ETTR is a query over that run's log. With 1,000 live runs a
    scrape that computed every one took seconds of the projector's database
    (bench/cluster.py), and the projector waits for its database meanwhile.
    Each call brings runs up to date for at most ``budget_s`` (at least one run),
    those computed longest ago first, and answers the others from their last
    computation; a run no longer listed is forgotten. So a value is at most
    about ``runs x cost / budget_s`` calls old, and a call costs ``budget_s``
    however many runs are live.
    """

    budget_s: float = 0.25
    recent_ended: int = 20
    clock: Callable[[], float] = time.monotonic
    # run -> (its ratio, or None before it has allocated time; when it was computed)
    book: dict[str, tuple[float | None, float]] = field(default_factory=dict)

    def __call__(self, con: duckdb.DuckDBPyConnection) -> dict[str, float]:
        runs = listed(con, self.recent_ended)
        self.book = {r: self.book[r] for r in runs if r in self.book}
        began = self.clock()
        due = sorted(runs, key=lambda r: self.book[r][1] if r in self.book else -1.0)
        for i, run_id in enumerate(due):
            if i and self.clock() - began >= self.budget_s:
                break
            self.book[run_id] = (ettr(con, run_id).ratio, self.clock())
        return {r: ratio for r, (ratio, _) in self.book.items() if ratio is not None}
