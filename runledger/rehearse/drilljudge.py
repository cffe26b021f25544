"""Whether a drill run showed what its fault should cause: rows, RPO, RTO, a verdict. Pure.

The shell reads the drill run's facts (``runledger.runs``) and the reports
its workers sent (``runledger.reports``, refused ones included), each in log
order, and the terminal rows (``runledger.rehearse.terminalcheck``). Each expectation a
fault lists (``runledger.rehearse.drillplan.FAULTS``) becomes one ``PreflightCheck``
row, by these rules:

1. ``restarted``: a generation after the first started;
2. ``bounded_retries``: the restarts decided (``FailureClassified`` with action
   restart or requeue) stay within the spec's attempts for their class;
3. ``classified:<class>``: a failure was classified with that class;
4. ``not_node``: no failure counted against a node (``controller.policy``
   ``counts_against_node``) and none quarantined (a data fault is the job's);
5. ``no_partial_commit``: nothing was committed at the step the fault cut;
6. ``verification_failed``: a restore refused the checkpoint at the fault step;
7. ``fallback``: the step restored is the newest committed checkpoint that was
   not cut or refused (before the fault);
8. ``cursor``: data cursor continuity: the first cursor committed after the
   restore lies exactly where the first generation's rate (position per step,
   from 0 before step 1, within one epoch) predicts from the restored cursor;
   skipped when no cursor is committed on both sides;
9. ``fenced``: the controller refused the old generation's writes
   (``WriteRejected stale_generation``) and accepted no fact of it after the new
   generation started; a first generation that ended before its first checkpoint
   (so nothing was paused) fails the row naming its failure;
10. ``no_stale_writes``: no shard report of the old generation after the new
   one started, that is no stale shard written under the checkpoint root (a
   worker that honours its fence stops before writing; skipped when the old
   worker never reported after the new generation started: nothing woke);
11. ``straggler_alert``: a ``straggler_rank`` alert names the slowed rank;
12. ``checkpoint_committed``: a checkpoint was committed despite the fault;
13. ``shrunk``: a later generation runs fewer replicas than the first;
14. ``completed``: the run finished ``succeeded``;
15. ``terminal``: the terminal rows as given (a skip row when none);
16. RPO is the steps lost (the last step of the first generation minus the
    step restored) times the median step time; RTO the time from that last
    step to the first step of a later generation; each a row against the
    spec's ``rpo_s``/``rto_s`` when measured (a fault with no restart loses
    nothing: RPO 0, RTO not measured);
17. the verdict is ``fail`` when any row failed, else ``pass``; the reason is the
    first failed row's, or a summary.

Tested in tests/runledger/rehearse/test_drill.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from controller.policy import counts_against_node
from events.model import (
    AlertRaised,
    CheckpointRestored,
    CheckpointVerificationFailed,
    CursorAdvanced,
    Event,
    FailureClassified,
    GenerationStarted,
    ManifestCommitted,
    NodeQuarantined,
    PreflightCheck,
    RunFinished,
    ShardWritten,
    StepCommitted,
    WriteRejected,
)
from runledger.rehearse.drillplan import FAULTS, Planned, Shape, attempts_for

PASS, FAIL, SKIP = "pass", "fail", "skip"
STALE_FACTS = ("StepCommitted", "ShardWritten", "ManifestCommitted", "CursorAdvanced",
               "WorkerExited", "MembershipConfirmed")


@dataclass(frozen=True, slots=True)
class Judged:
    verdict: str
    reason: str
    rpo_s: float | None
    rto_s: float | None
    checks: tuple[PreflightCheck, ...]


def _row(check: str, verdict: str, figure: float | None, threshold: float | None, unit: str,
         reason: str, subject: str = "drill run") -> PreflightCheck:
    return PreflightCheck(check, subject, verdict, figure, threshold, unit, reason)


def _ok(check: str, good: bool, figure: float | None, threshold: float | None, unit: str,
        reason: str) -> PreflightCheck:
    return _row(check, PASS if good else FAIL, figure, threshold, unit, reason)


@dataclass(frozen=True, slots=True)
class Timeline:
    """What the facts say about the fault and the recovery."""

    last_step: int  # the first generation's last committed step
    last_ms: int | None
    restored: int | None  # the step a later generation resumed from
    first_after_ms: int | None
    second_start_ms: int | None  # when the second generation started
    step_ms: float | None  # median step time


def timeline(facts: Sequence[Event], reports: Sequence[Event]) -> Timeline:
    steps = [e for e in facts if isinstance(e, StepCommitted)]
    first = [e for e in steps if e.generation == 1]
    later = [e for e in steps if e.generation > 1]
    last = max(first, key=lambda e: e.step, default=None)
    gens = [e for e in facts if isinstance(e, GenerationStarted) and e.generation > 1]
    loaded = [e.step for e in reports
              if isinstance(e, CheckpointRestored) and e.generation > 1]
    restored = (min(loaded) if loaded else (gens[0].resume_step or 0) if gens else None)
    times = [e.step_time_ms for e in steps]
    return Timeline(
        last_step=last.step if last else 0,
        last_ms=last.header.occurred_at if last else None, restored=restored,
        first_after_ms=later[0].header.occurred_at if later else None,
        second_start_ms=gens[0].header.occurred_at if gens else None,
        step_ms=statistics.median(times) if times else None)


def rpo_rto(t: Timeline) -> tuple[float | None, float | None]:
    """Rule 16: progress lost and time to recover, in seconds (None: not measured)."""
    if t.restored is None:
        return 0.0, None
    rpo = (max(t.last_step - t.restored, 0) * t.step_ms / 1000.0
           if t.step_ms is not None else None)
    rto = ((t.first_after_ms - t.last_ms) / 1000.0
           if t.first_after_ms is not None and t.last_ms is not None else None)
    return rpo, rto


def expectation(kind: str, plan: Planned, shape: Shape, facts: Sequence[Event],
                reports: Sequence[Event], t: Timeline) -> PreflightCheck:
    """One expectation (rules 1-14) judged from the drill run's events; rules 1-6 here."""
    fails = [e for e in facts if isinstance(e, FailureClassified)]
    commits = [e for e in facts if isinstance(e, ManifestCommitted)]
    gens = [e for e in facts if isinstance(e, GenerationStarted)]
    if kind.startswith("classified:"):
        want = kind.partition(":")[2]
        found = sorted({f.failure_class for f in fails})
        return _ok(kind, want in found, len(fails), None, "failures",
                   f"failures classified: {', '.join(found) or 'none'}; expected {want}")
    match kind:
        case "restarted":
            n = len({g.generation for g in gens})
            return _ok(kind, n >= 2, n, 2, "generations",
                       f"{n} generation(s) started; a restart needs a second")
        case "bounded_retries":
            return _bounded(fails, shape)
        case "not_node":
            blamed = sorted({f"{f.signature} on {f.node}" for f in fails
                             if counts_against_node(f.failure_class, f.signature)})
            q = [e.node for e in facts if isinstance(e, NodeQuarantined)]
            return _ok(kind, not blamed and not q, len(blamed) + len(q), 0, "failures",
                       f"counted against a node: {', '.join(blamed + q)}" if blamed or q else
                       "no failure was counted against a node")
        case "no_partial_commit":
            cut = [c for c in commits if c.step == plan.at_step and c.generation == 1]
            return _ok(kind, not cut, len(cut), 0, "commits",
                       f"checkpoint {plan.at_step}, cut mid-write, was "
                       + ("committed" if cut else "never committed"))
        case "verification_failed":
            bad = sorted({e.step for e in reports if isinstance(e, CheckpointVerificationFailed)})
            return _ok(kind, plan.at_step in bad, len(bad), None, "checkpoints",
                       f"restores refused the checkpoints at steps {bad or 'none'}; expected"
                       f" {plan.at_step}")
    return _outcome(kind, plan, facts, reports, t)


def _outcome(kind: str, plan: Planned, facts: Sequence[Event], reports: Sequence[Event],
             t: Timeline) -> PreflightCheck:
    """Rules 7-14: what the recovery and the run's end show."""
    commits = [e for e in facts if isinstance(e, ManifestCommitted)]
    gens = [e for e in facts if isinstance(e, GenerationStarted)]
    match kind:
        case "fallback":
            return _fallback(plan, commits, t)
        case "cursor":
            return _cursor(facts, t)
        case "fenced":
            return _fenced(facts)
        case "no_stale_writes":
            return _stale_writes(reports, t)
        case "straggler_alert":
            a = [e.subject for e in facts if isinstance(e, AlertRaised)
                 and e.alert == "straggler_rank"]
            slowed = f"r{plan.rank}"
            return _ok(kind, slowed in a, len(a), 1, "alerts",
                       f"straggler_rank alerts on {', '.join(a) or 'no rank'}; {slowed} was"
                       " the one slowed")
        case "checkpoint_committed":
            return _ok(kind, bool(commits), len(commits), 1, "checkpoints",
                       f"{len(commits)} checkpoint(s) committed under the fault")
        case "shrunk":
            sizes = [g.replicas for g in gens if g.replicas is not None]
            ok = len(sizes) >= 2 and min(sizes[1:]) < sizes[0]
            return _ok(kind, ok, min(sizes[1:], default=None), sizes[0] if sizes else None,
                       "replicas", f"replicas per generation: {sizes or 'not recorded'}")
        case "completed":
            end = [e for e in facts if isinstance(e, RunFinished)]
            outcome = end[-1].outcome if end else "not finished"
            return _ok(kind, outcome == "succeeded", None, None, "",
                       f"the drill run ended {outcome}"
                       + (f" ({end[-1].reason})" if end and outcome != "succeeded" else ""))
    raise ValueError(f"unknown expectation {kind!r}")


def _bounded(fails: Sequence[FailureClassified], shape: Shape) -> PreflightCheck:
    per: dict[str, int] = {}
    for f in fails:
        if f.action in ("restart", "requeue"):
            per[f.failure_class] = per.get(f.failure_class, 0) + 1
    over = {c: n for c, n in per.items() if n > attempts_for(shape, c)}
    total = sum(per.values())
    listed = ", ".join(f"{c}: {n} of {attempts_for(shape, c)}" for c, n in sorted(per.items()))
    return _ok("bounded_retries", not over, total, None, "restarts",
               f"restarts per class within the spec's attempts ({listed or 'none'})" if not over
               else f"restarts beyond the spec's attempts: {listed}")


def _fallback(plan: Planned, commits: Sequence[ManifestCommitted], t: Timeline
              ) -> PreflightCheck:
    # The cut (kill_checkpoint) or truncated checkpoint is not a usable one.
    usable = [c.step for c in commits if c.generation == 1 and c.step <= t.last_step
              and not (plan.fault == "truncated_shard" and c.step == plan.at_step)]
    want = max(usable, default=0)
    got = t.restored
    return _ok("fallback", got == want, got, want, "step",
               f"restored step {got}; the newest verified checkpoint before the fault was {want}")


def _cursor(facts: Sequence[Event], t: Timeline) -> PreflightCheck:
    cursors = [e for e in facts if isinstance(e, CursorAdvanced)]
    one = [c for c in cursors if c.generation == 1]
    after = [c for c in cursors if c.generation > 1]
    base = [c for c in one if c.step == t.restored]
    if t.restored is None or not base or not after:
        return _row("cursor", SKIP, None, None, "samples",
                    "no committed data cursor on both sides of the restart to compare")
    # A fresh run starts at position 0 before step 1: the rate from there to its last cursor.
    rate = one[-1].position / one[-1].step if one[-1].step else 0.0
    nxt = after[0]
    predicted = base[-1].position + rate * (nxt.step - base[-1].step)
    off = nxt.position - predicted
    return _ok("cursor", off == 0, off, 0, "samples",
               f"after restoring step {t.restored} (position {base[-1].position}) the cursor"
               f" committed at step {nxt.step} is {nxt.position}; continuity predicts"
               f" {predicted:g}")


def _fenced(facts: Sequence[Event]) -> PreflightCheck:
    gens = [e for e in facts if isinstance(e, GenerationStarted) and e.generation > 1]
    if not gens:
        return _row("fenced", FAIL, None, None, "facts", "no second generation started,"
                    " so nothing was fenced")
    if not any(isinstance(e, ManifestCommitted) and e.generation == 1 for e in facts):
        # The drill pauses a worker only after generation 1's first checkpoint: without
        # one nothing stale existed, and "0 refusals" would blame the fence.
        why = next((f"{f.signature}: {f.detail}" for f in facts
                    if isinstance(f, FailureClassified) and f.generation == 1), "no failure")
        return _row("fenced", FAIL, None, None, "facts",
                    f"generation 1 ended before its first checkpoint ({why}), so no worker"
                    " was paused and nothing stale could be fenced; run the drill again, and"
                    " if it recurs look at that failure first")
    after = facts[facts.index(gens[0]) + 1:]
    accepted = [e for e in after if e.generation < gens[0].generation
                and e.event_type in STALE_FACTS]
    refused = [e for e in after if isinstance(e, WriteRejected)
               and e.reason == "stale_generation"]
    ok = not accepted and bool(refused)
    return _ok("fenced", ok, len(accepted), 0, "stale facts",
               f"{len(accepted)} stale fact(s) accepted after generation {gens[0].generation}"
               f" started; {len(refused)} stale_generation refusal(s)")


def _stale_writes(reports: Sequence[Event], t: Timeline) -> PreflightCheck:
    if t.second_start_ms is None:
        return _row("no_stale_writes", FAIL, None, None, "shards",
                    "no second generation started")
    start = t.second_start_ms
    woke = [e for e in reports if e.generation == 1 and e.header.occurred_at > start]
    if not woke:
        return _row("no_stale_writes", SKIP, None, None, "shards",
                    "the old generation sent nothing after the new one started (its agent"
                    " killed it before it woke: start the agent with a longer --grace)")
    shards = [e for e in woke if isinstance(e, ShardWritten)]
    steps = sorted({e.step for e in shards})
    return _ok("no_stale_writes", not shards, len(shards), 0, "shards",
               f"the fenced generation 1 wrote {len(shards)} shard(s) under the checkpoint"
               f" root after generation 2 started (steps {steps}): it ignored its fence"
               if shards else "the fenced generation woke and wrote no shard")


def judge(plan: Planned, shape: Shape, facts: Sequence[Event], reports: Sequence[Event],
          terminal: Sequence[PreflightCheck]) -> Judged:
    """Every expectation of the fault (rules 1-15), RPO and RTO (16), the verdict (17)."""
    fault = next(f for f in FAULTS if f.name == plan.fault)
    t = timeline(facts, reports)
    rows = [expectation(k, plan, shape, facts, reports, t)
            for k in fault.expects if k != "terminal"]
    if "terminal" in fault.expects:
        rows += list(terminal) or [_row("terminal", SKIP, None, None, "",
                                        "the terminal transition was not judged")]
    rpo, rto = rpo_rto(t)
    if rpo is not None:
        rows.append(_ok("rpo", rpo <= shape.rpo_s, round(rpo, 3), shape.rpo_s, "s",
                        f"{t.last_step} - {t.restored or 0} steps lost = {rpo:.3f} s"
                        f" (spec rpo_s {shape.rpo_s:g})"))
    if rto is not None:
        rows.append(_ok("rto", rto <= shape.rto_s, round(rto, 3), shape.rto_s, "s",
                        f"{rto:.3f} s from the last step before the fault to the first after"
                        f" (spec rto_s {shape.rto_s:g})"))
    failed = [r for r in rows if r.verdict == FAIL]
    reason = (f"{failed[0].check}: {failed[0].reason}" if failed else
              f"every expected outcome held ({len(rows)} checks)")
    return Judged(FAIL if failed else PASS, reason, rpo, rto, tuple(rows))


def skipped_judgement(reason: str) -> Judged:
    return Judged(SKIP, reason, None, None, ())


