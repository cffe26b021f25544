"""ETTR closure over a simulated run's log, by the real query (``queries/ettr.sql``).

The simulator (``proof.sim``) projects a seed's facts through the projector's
own mapping (``projectors.tables.rows_for``) into an in-memory DuckDB and runs
``queries.ettr.ettr`` on it, then checks what docs/queries.md promises of it
against what the log itself says:

- the allocation is admission to the fact that ended the run;
- the parts sum to the allocation, and none is negative;
- every part equals the one :func:`labelled` gives: the documented rules
  (docs/queries.md, ``ettr``) applied in Python to the facts, sharing no
  code with the SQL, each millisecond labelled with the first part, in
  precedence, whose interval holds it (so recovery filed as idle, or a
  detection that starts at the wrong evidence, is a violation of its part);
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
from itertools import pairwise

import duckdb

from events.model import (
    CheckpointStaged,
    Event,
    FailureClassified,
    GenerationStarted,
    NodeLost,
    RunAdmitted,
    RunCancelled,
    RunFinished,
    WorkerExited,
)
from events.model import StepCommitted as Step
from events.record import Record
from events.topics import RUNS
from projectors.tables import DDL, TABLE_OF, rows_for
from proof.props import Violation
from queries.ettr import Ettr, ettr

SLACK_S = 1e-6
# The query rounds each part to the millisecond.
PART_SLACK_S = 0.0015
# The parts the simulated run can have (it never resizes), in their precedence.
LABELLED = ("detection", "recovery", "checkpoint", "lost_work", "input_stall", "productive",
            "idle", "other")
Interval = tuple[str, float, float]  # part, begin, end (ms; a stall may be fractional)


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
    want = labelled(facts, run_id)
    wrong = {p: (e.parts_s[p], s) for p, s in want.items() if abs(e.parts_s[p] - s) > PART_SLACK_S}
    if wrong:
        raise Violation("E", "the query's parts differ from the labels of the log: "
                        + ", ".join(f"{p} {q} s, labelled {s} s" for p, (q, s) in wrong.items()))
    if e.parts_s["productive"] > compute + SLACK_S or e.parts_s["lost_work"] > lost + SLACK_S:
        raise Violation("E", f"productive {e.parts_s['productive']} s and lost work "
                             f"{e.parts_s['lost_work']} s; the steps hold {compute} s of "
                             f"kept compute and {lost} s redone")
    return e


def labelled(facts: Sequence[Event], run_id: str) -> dict[str, float]:
    """Seconds of each part of ``LABELLED``, by docs/queries.md's rules over ``facts``."""
    mine = [f for f in facts if f.run_id == run_id]
    admitted = [f.header.occurred_at for f in mine if isinstance(f, RunAdmitted)]
    if not admitted:
        return {}
    ends = [f.header.occurred_at for f in mine if isinstance(f, RunFinished | RunCancelled)]
    a, z = admitted[0], max(ends) if ends else max(f.header.occurred_at for f in mine)
    starts = {f.generation: f for f in mine if isinstance(f, GenerationStarted)}
    steps = [f for f in mine if isinstance(f, Step)]
    by_gen: dict[int, list[Step]] = defaultdict(list)
    for s in steps:
        by_gen[s.generation].append(s)

    def resume(g: int) -> int:
        named = starts[g].resume_step or 0
        return min(named, min(s.step for s in by_gen[g]) - 1) if by_gen[g] else named

    def lost(s: Step) -> bool:
        return any(g > s.generation and resume(g) < s.step for g in starts)

    def last_end(g: int) -> int | None:
        return max((s.header.occurred_at for s in by_gen[g]), default=None)

    iv: list[Interval] = []
    for f in (f for f in mine if isinstance(f, FailureClassified)):
        g, at = f.generation, f.header.occurred_at
        bad = [x.header.occurred_at for x in mine if isinstance(x, WorkerExited)
               and x.generation == g and (x.signal is not None or x.exit_code != 0)]
        ended = last_end(g)
        base = ended if ended is not None else starts[g].header.occurred_at
        evidence = [at, min(bad) if bad else base]
        seen = [x.last_seen_at for x in mine if isinstance(x, NodeLost) and x.generation == g]
        if seen:
            evidence.append(max(min(seen), base))
        iv.append(("detection", min(evidence), at))
        later = [s.header.occurred_at - int(s.step_time_ms) for s in steps if s.generation > g]
        if later:
            iv.append(("recovery", at, min(later)))
    for c in (f for f in mine if isinstance(f, CheckpointStaged)):
        iv.append(("checkpoint", c.header.occurred_at - c.stall_ms, c.header.occurred_at))
    for s in steps:
        e = s.header.occurred_at
        b = e - int(s.step_time_ms)
        if lost(s):
            iv.append(("lost_work", b, e))
        else:
            iv += [("input_stall", b, b + int(s.input_wait_ms)),
                   ("productive", b + int(s.input_wait_ms), e)]
    if starts and by_gen[min(starts)]:
        first = min(starts)
        iv.append(("idle", starts[first].header.occurred_at,
                   min(s.header.occurred_at - int(s.step_time_ms) for s in by_gen[first])))
    if steps:
        tail = max(s.header.occurred_at for s in steps)
        if not any(f.header.occurred_at >= tail for f in mine if isinstance(f, FailureClassified)):
            iv.append(("idle", tail, z))
    else:  # no step at all: the whole allocation was idle
        iv.append(("idle", a, z))
    return _sweep(iv, a, z)


def _sweep(iv: list[Interval], a: int, z: int) -> dict[str, float]:
    """Each millisecond of [a, z) to the first part in ``LABELLED`` whose interval holds it."""
    clipped = [(p, max(b, a), min(e, z)) for p, b, e in iv if min(e, z) > max(b, a)]
    cuts = sorted({a, z, *(b for _, b, _ in clipped), *(e for _, _, e in clipped)})
    out: dict[str, float] = dict.fromkeys(LABELLED, 0.0)
    for t0, t1 in pairwise(cuts):
        held = {p for p, b, e in clipped if b <= t0 and e >= t1}
        out[next((p for p in LABELLED if p in held), "other")] += t1 - t0
    return {p: ms / 1000 for p, ms in out.items()}
