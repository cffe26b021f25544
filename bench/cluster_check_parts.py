"""bench/cluster.py's verdict on the whole log once the scenario has stopped.

Read back from offset 0 (``read_committed``, as every reader of ``runs`` reads):

- **lost**: a step a live run's coordinator reported with no fact; a history
  run without exactly one ``RunFinished`` (succeeded); a live run that did not
  stay on its first generation (a handover that failed a healthy run);
- **duplicated**: any fact id twice (two deciders, or one input taken twice);
- **one owner at a time**: per partition, the writers of its facts in offset
  order, one stretch each, must appear in the order the group gave that
  partition to its members (``cluster_watch_parts.ownership_summary``): a
  writer that appends after the group moved its partition on would appear out
  of turn; and no ``foreign_writer`` alert;
- **the fold accepts every fact** of every run in log order (two deciders
  would start or finish a run twice, which the fold refuses).

``runledger audit verify --json`` then checks every run's signed hash chain,
continued across each handover by the next owner.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from bench.cluster_fleet_parts import Fleet
from controller.ownership import FOREIGN_WRITER
from events.fold import apply
from events.kafka.consume import read_log
from events.model import (
    AlertRaised,
    FailureClassified,
    GenerationStarted,
    RunFinished,
    StepCommitted,
    WriteRejected,
)
from events.record import Record
from events.topics import RUNS


def in_turn(writers: list[str], turns: list[str]) -> bool:
    """Whether ``writers`` (a partition's stretches, in log order) is a subsequence of
    ``turns`` (its owners in the order the group gave it)."""
    it = iter(turns)
    return all(any(w == t for t in it) for w in writers)


def stretches(records: list[Record]) -> dict[int, list[str]]:
    """Per partition of ``runs``, the writers of its facts, one entry per stretch."""
    out: dict[int, list[str]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        seq = out[r.partition]
        if not seq or seq[-1] != r.writer:
            seq.append(r.writer)
    return dict(out)


def _fold_refusals(by_run: dict[str, list[Record]]) -> list[str]:
    refused: list[str] = []
    for run, records in by_run.items():
        state = None
        for r in records:
            step = apply(state, r.event)
            if not step.verdict.accepted and not isinstance(r.event, WriteRejected):
                refused.append(f"{run}: {r.event.event_type} by {r.writer}: {step.verdict}")
            state = step.state if step.state is not None else state
    return refused


def check_log(bootstrap: str, fleet: Fleet, turns: dict[int, list[str]]) -> dict[str, Any]:
    records = list(read_log(bootstrap, RUNS))
    ids = Counter(r.event.header.event_id for r in records)
    by_run: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_run[r.event.run_id].append(r)
    steps_seen = {r.event.header.event_id for r in records if isinstance(r.event, StepCommitted)}
    history = [p.run_id for p in fleet.planned.values() if not p.live]
    live = [p.run_id for p in fleet.planned.values() if p.live]

    def finished_ok(run: str) -> bool:
        ends = [r.event for r in by_run[run] if isinstance(r.event, RunFinished)]
        return [e.outcome for e in ends] == ["succeeded"]

    def stayed(run: str) -> bool:
        starts = sum(isinstance(r.event, GenerationStarted) for r in by_run[run])
        failed = any(isinstance(r.event, FailureClassified | RunFinished) for r in by_run[run])
        return starts == 1 and not failed

    per_partition = stretches(records)
    out_of_turn = {p: w for p, w in per_partition.items()
                   if not in_turn(w, turns.get(p, []))}
    foreign = [r.event.run_id for r in records
               if isinstance(r.event, AlertRaised) and r.event.alert == FOREIGN_WRITER]
    return {
        "facts": len(records),
        "runs": len(by_run),
        "duplicated_fact_ids": sum(1 for n in ids.values() if n > 1),
        "steps_reported": len(fleet.lat.sent),
        "steps_without_fact": len(set(fleet.lat.sent) - steps_seen),
        "history_not_finished_once": sum(not finished_ok(r) for r in history),
        "live_restarted_or_failed": sum(not stayed(r) for r in live),
        "failures": Counter(f"{r.event.failure_class}: {r.event.signature} ({r.writer})"
                            for r in records
                            if isinstance(r.event, FailureClassified)).most_common(10),
        "fold_refused": _fold_refusals(by_run)[:20],
        "writers_per_partition": per_partition,
        "writers_out_of_turn": out_of_turn,
        "foreign_writer_alerts": len(foreign),
        "rejections": Counter(r.event.reason for r in records
                              if isinstance(r.event, WriteRejected)).most_common(10),
    }


def audit_summary(answer: Any) -> dict[str, Any]:
    """``runledger audit verify --json``'s answer, counted."""
    if not isinstance(answer, dict):
        return {"ok": False, "runs": 0, "problems": ["no JSON answer"]}
    problems = [p for v in answer.get("runs", []) for p in v.get("problems", [])]
    problems += answer.get("keys", {}).get("problems", [])
    return {"ok": bool(answer.get("ok")), "runs": len(answer.get("runs", [])),
            "problems": [f"{p.get('run_id')}: {p.get('reason')} {p.get('detail')}"
                         for p in problems[:20]], "problem_count": len(problems)}
