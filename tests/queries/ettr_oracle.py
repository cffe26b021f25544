"""ETTR recomputed from raw events in plain Python, independently of queries/ettr.sql.

Same definitions as the SQL (docs/queries.md's ETTR row), different machinery:
each part's intervals are cut into elementary pieces at every boundary and each
piece goes to the highest-precedence part covering it. Used to check the SQL on
hand-made logs and on the demo's real log.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from events.model import (
    CheckpointStaged,
    Event,
    FailureClassified,
    GenerationStarted,
    MembershipConfirmed,
    NodeLost,
    RunAdmitted,
    RunCancelled,
    RunFinished,
    StepCommitted,
    WorkerExited,
)

ORDER = ("detection", "recovery", "checkpoint", "lost_work", "input_stall", "productive", "idle",
         "resize_stop", "resize_rendezvous", "resize_restore")


def ettr_parts(facts: list[Event]) -> dict[str, float]:
    """Seconds per part (plus ``allocated``) for one run's facts from runledger.runs."""
    at = [e.header.occurred_at for e in facts]
    admitted = min(e.header.occurred_at for e in facts if isinstance(e, RunAdmitted))
    ends = [e.header.occurred_at for e in facts if isinstance(e, RunFinished | RunCancelled)]
    end = max(ends) if ends else max(at)
    gens = {e.generation: e for e in facts if isinstance(e, GenerationStarted)}
    steps = [e for e in facts if isinstance(e, StepCommitted)]

    first = {g: min((s.step for s in steps if s.generation == g), default=None) for g in gens}
    # a generation whose first step is earlier than its resume_step fell back further
    resumed = {g: min(gs.resume_step or 0, (first[g] or 1 << 62) - 1) for g, gs in gens.items()}

    def lost(s: StepCommitted) -> bool:
        return any(g > s.generation and r < s.step for g, r in resumed.items())

    iv: dict[str, list[tuple[float, float]]] = defaultdict(list)
    first_start: dict[int, float] = {}
    last_end: dict[int, float] = {}
    for s in steps:
        b, e = s.header.occurred_at - s.step_time_ms, float(s.header.occurred_at)
        first_start[s.generation] = min(first_start.get(s.generation, b), b)
        last_end[s.generation] = max(last_end.get(s.generation, e), e)
        if lost(s):
            iv["lost_work"].append((b, e))
        else:
            iv["input_stall"].append((b, b + s.input_wait_ms))
            iv["productive"].append((b + s.input_wait_ms, e))
    for c in facts:
        if isinstance(c, CheckpointStaged):
            iv["checkpoint"].append((c.header.occurred_at - c.stall_ms, c.header.occurred_at))
    classified_at: list[int] = []
    for f in facts:
        if not isinstance(f, FailureClassified):
            continue
        g = f.generation
        exits = [x.header.occurred_at for x in facts if isinstance(x, WorkerExited)
                 and x.generation == g and (x.signal is not None or x.exit_code != 0)]
        fault = min(exits) if exits else last_end.get(g, gens[g].header.occurred_at)
        seen = [x.last_seen_at for x in facts if isinstance(x, NodeLost) and x.generation == g]
        if seen:  # the lost node's last report, but not before the generation's last step
            fault = min(fault, max(min(seen), last_end.get(g, gens[g].header.occurred_at)))
        fault = min(fault, f.header.occurred_at)
        iv["detection"].append((fault, f.header.occurred_at))
        later = [first_start[n] for n in first_start if n > g]
        if later:
            iv["recovery"].append((f.header.occurred_at, min(later)))
        classified_at.append(f.header.occurred_at)
    failed = {f.generation for f in facts if isinstance(f, FailureClassified)}
    order = sorted(gens)
    for prev, g in itertools.pairwise(order):
        if gens[g].reason not in ("grow", "shrink") or prev in failed:
            continue
        later = [gens[n].header.occurred_at for n in order if n > g]
        step = first_start.get(g, min(later) if later else None)
        confirmed = [c.header.occurred_at for c in facts
                     if isinstance(c, MembershipConfirmed) and c.generation == g]
        joined = min(confirmed) if confirmed else step
        started = gens[g].header.occurred_at
        iv["resize_stop"].append((last_end.get(prev, gens[prev].header.occurred_at), started))
        if joined is not None:
            iv["resize_rendezvous"].append((started, joined))
            if step is not None:
                iv["resize_restore"].append((joined, step))
    first_gen = min(gens)
    if first_gen in first_start:
        iv["idle"].append((gens[first_gen].header.occurred_at, first_start[first_gen]))
    if steps:
        tail = max(last_end.values())
        if not any(c >= tail for c in classified_at):
            iv["idle"].append((tail, end))

    cuts = sorted({admitted, end, *(x for ivs in iv.values() for p in ivs for x in p
                                    if admitted <= x <= end)})
    out = dict.fromkeys((*ORDER, "other"), 0.0)
    for lo, hi in itertools.pairwise(cuts):
        mid = (lo + hi) / 2
        part = next((p for p in ORDER if any(b <= mid < e for b, e in iv[p])), "other")
        out[part] += (hi - lo) / 1000
    out["allocated"] = (end - admitted) / 1000
    return out
