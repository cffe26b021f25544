"""ETTR closure over a simulated run's log, by the real query (``queries/ettr.sql``).

The simulator (``proof.sim``) projects a seed's facts through the projector's
own mapping (``projectors.tables.rows_for``) into an in-memory DuckDB and runs
``queries.ettr.ettr`` on it, then checks what docs/queries.md promises of it
against what the log itself says:

- the allocation is admission to the fact that ended the run;
- the parts sum to the allocation, and none is negative;
- ``productive`` is at most the accepted steps' compute (step time less input
  wait) that no later generation redid, and ``lost_work`` at most the time of
  the steps one did (a generation resumes from its ``resume_step``, or from
  before its first step if its restore fell back further).

A failure is a :class:`proof.props.Violation` of ``E``.

Tested in tests/proof/test_sim.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import duckdb

from events.model import Event, GenerationStarted, RunAdmitted, RunCancelled, RunFinished
from events.model import StepCommitted as Step
from events.record import Record
from events.topics import RUNS
from projectors.tables import DDL, TABLE_OF, rows_for
from proof.props import Violation
from queries.ettr import Ettr, ettr

SLACK_S = 1e-6


def measure(facts: Sequence[Event], run_id: str) -> Ettr:
    """The real ETTR query over ``facts`` (one run's ``runledger.runs``, in log order)."""
    con = duckdb.connect()
    try:
        for table, columns in DDL.items():
            con.execute(f"CREATE TABLE {table} ({columns})")
        rows: dict[str, list[tuple[object, ...]]] = defaultdict(list)
        for offset, e in enumerate(facts):
            record = Record(RUNS, 0, offset, e.header.occurred_at, e, e.header.schema_version)
            for row in rows_for(record):
                rows[TABLE_OF[type(row)].name].append(tuple(row))
        for table, batch in rows.items():
            marks = ", ".join("?" * len(batch[0]))
            con.executemany(f"INSERT INTO {table} VALUES ({marks})", batch)
        return ettr(con, run_id)
    finally:
        con.close()


def closes(facts: Sequence[Event], run_id: str) -> Ettr:
    """Check the query's ETTR of the run against its log; the ETTR, if it closes."""
    e = measure(facts, run_id)
    admitted = [f.header.occurred_at for f in facts if isinstance(f, RunAdmitted)]
    ends = [f.header.occurred_at for f in facts if isinstance(f, RunFinished | RunCancelled)]
    if admitted and ends and abs(e.allocated_s - (max(ends) - admitted[0]) / 1000) > SLACK_S:
        raise Violation("E", f"allocated {e.allocated_s} s; the log says "
                             f"{(max(ends) - admitted[0]) / 1000} s from admission to the end")
    if abs(e.unexplained_s) > SLACK_S or any(v < -SLACK_S for v in e.parts_s.values()):
        raise Violation("E", f"parts {e.parts_s} do not close over {e.allocated_s} s")
    steps = [f for f in facts if isinstance(f, Step)]
    first: dict[int, int] = {}
    for s in steps:
        first.setdefault(s.generation, s.step)
    resumed = {f.generation: min(f.resume_step or 0, first.get(f.generation, 1 << 62) - 1)
               for f in facts if isinstance(f, GenerationStarted)}

    def redone(s: Step) -> bool:
        return any(g > s.generation and r < s.step for g, r in resumed.items())
    compute = sum(s.step_time_ms - s.input_wait_ms for s in steps if not redone(s)) / 1000
    lost = sum(s.step_time_ms for s in steps if redone(s)) / 1000
    if e.parts_s["productive"] > compute + SLACK_S or e.parts_s["lost_work"] > lost + SLACK_S:
        raise Violation("E", f"productive {e.parts_s['productive']} s and lost work "
                             f"{e.parts_s['lost_work']} s; the steps hold {compute} s of "
                             f"kept compute and {lost} s redone")
    return e
