"""ETTR as a typed result: the parts of the allocation, in seconds, and the ratio.

Tested in tests/queries/test_queries.py.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    last (for the metrics endpoint: a scrape stays bounded however long the
    history grows; older runs are a query away)."""
    rows = con.execute(
        """
        SELECT run_id FROM runs WHERE run_id NOT IN (SELECT run_id FROM endings)
        UNION
        SELECT run_id FROM (SELECT run_id, max(occurred_at) AS ended FROM endings
                            GROUP BY run_id ORDER BY ended DESC, run_id LIMIT ?)
        ORDER BY run_id
        """, [recent_ended]).fetchall()
    out: dict[str, float] = {}
    for (run_id,) in rows:
        ratio = ettr(con, run_id).ratio
        if ratio is not None:
            out[run_id] = ratio
    return out
