"""What ``runledger pilot`` concludes from its run's events: figures, rows, a verdict. Pure.

The pilot run (``runledger.rehearse.trialplan``: the spec small and short, every rank
killed right after generation 1's first checkpoint commit) is read back as
its facts and reports; the rules here turn them into the figures Young's
interval needs and into rows (``events.model.PreflightCheck``):

1. step time: the median ``StepCommitted.step_time_ms`` (else of every
   ``StepTimesRecorded`` entry); a pilot without a step fails;
2. checkpoint cost: the median ``CheckpointStaged.stall_ms``, what the training
   loop waited per checkpoint: the C of Young's interval as the controller
   measures it (``controller.checkpoints``; in ``sync`` mode it includes the
   write and the commit, in ``async`` mode those run in the background);
3. checkpoint: at least one ``ManifestCommitted`` (the figure: how many);
4. restore: a ``CheckpointRestored`` of a checkpoint the run committed (and did
   not revoke); its figure, the restore time, is the slowest rank's
   ``verify_ms + load_ms`` of the first restoring generation;
5. recovery: from the first ``FailureClassified`` to the first step of a later
   generation, in seconds, judged against the spec's ``rto_s``;
6. run: ``RunFinished`` succeeded; otherwise the row names the outcome, the last
   ``FailureClassified`` (class and detail) and where the workers' logs are;
7. manifest: a ``RunManifestPublished`` (the post-run manifest) was recorded;
8. the verdict is ``fail`` when any row failed (``runledger.rehearse.preflight.verdict``).

Tested in tests/runledger/rehearse/test_pilot.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from events.model import (
    CheckpointRestored,
    CheckpointRevoked,
    CheckpointStaged,
    Event,
    FailureClassified,
    ManifestCommitted,
    PreflightCheck,
    RunCancelled,
    RunFinished,
    RunManifestPublished,
    StepCommitted,
    StepTimesRecorded,
)
from runledger.rehearse.preflight import FAIL, PASS

E = TypeVar("E", bound=Event)


@dataclass(frozen=True, slots=True)
class Figures:
    """What the pilot measured; None where its run never got that far."""

    step_time_ms: float | None
    checkpoint_ms: float | None
    restore_ms: float | None
    recovery_s: float | None
    commits: int


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _of(events: Sequence[Event], cls: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, cls)]


def figures(events: Sequence[Event]) -> Figures:
    """Rules 1-5's figures from the run's facts and reports."""
    steps = [e.step_time_ms for e in _of(events, StepCommitted)]
    if not steps:
        steps = [t for e in _of(events, StepTimesRecorded) for t in e.step_time_ms]
    stalls = [e.stall_ms for e in _of(events, CheckpointStaged)]
    return Figures(step_time_ms=_median(steps), checkpoint_ms=_median(stalls),
                   restore_ms=restore_ms(events), recovery_s=recovery_s(events),
                   commits=len(_of(events, ManifestCommitted)))


def _restores(events: Sequence[Event]) -> list[CheckpointRestored]:
    """Rule 4: restores of a checkpoint this run committed and did not revoke."""
    committed = {e.manifest_digest for e in _of(events, ManifestCommitted)}
    revoked = {e.manifest_digest for e in _of(events, CheckpointRevoked)}
    return [e for e in _of(events, CheckpointRestored)
            if e.manifest_digest in committed - revoked]


def restore_ms(events: Sequence[Event]) -> float | None:
    """The first restoring generation's slowest rank, verify plus load."""
    restores = _restores(events)
    if not restores:
        return None
    first = min(e.generation for e in restores)
    return round(max(e.verify_ms + e.load_ms for e in restores if e.generation == first), 3)


def recovery_s(events: Sequence[Event]) -> float | None:
    """Rule 5: first failure to the first step of a later generation."""
    failures = _of(events, FailureClassified)
    if not failures:
        return None
    fault = failures[0]
    after = [e.header.occurred_at for e in _of(events, StepCommitted)
             if e.generation > fault.generation]
    if not after:
        return None
    return round(max(0, min(after) - fault.header.occurred_at) / 1000.0, 3)


def _row(check: str, subject: str, ok: bool, figure: float | None, threshold: float | None,
         unit: str, reason: str) -> PreflightCheck:
    return PreflightCheck(check, subject, PASS if ok else FAIL, figure, threshold, unit, reason)


def rows(run_id: str, events: Sequence[Event], rto_s: float,
         waited: str | None = None) -> list[PreflightCheck]:
    """Rules 1-7's rows; ``waited``: what the pilot timed out waiting for, if it did."""
    f = figures(events)
    logs = logs_of(run_id)
    return [
        _row("pilot.steps", run_id, f.step_time_ms is not None, f.step_time_ms, None, "ms",
             f"median step time {f.step_time_ms} ms" if f.step_time_ms is not None
             else f"no step was reported; see {logs}"),
        _row("pilot.checkpoint", run_id, f.commits >= 1, f.commits, 1, "commits",
             f"{f.commits} checkpoint(s) committed, median stall {f.checkpoint_ms} ms"
             if f.commits else f"no checkpoint was committed; see {logs}"),
        _restore_row(run_id, events, f),
        _recovery_row(run_id, f, rto_s),
        _run_row(run_id, events, waited),
        _manifest_row(run_id, events),
    ]


def _restore_row(run_id: str, events: Sequence[Event], f: Figures) -> PreflightCheck:
    restores = _restores(events)
    if restores:
        r = min(restores, key=lambda e: e.generation)
        return _row("pilot.restore", run_id, True, f.restore_ms, None, "ms",
                    f"generation {r.generation} restored step {r.step} ({r.manifest_digest})"
                    f" in {f.restore_ms} ms (verify + load, slowest rank)")
    loaded = _of(events, CheckpointRestored)
    why = (f"restored only checkpoints the run did not commit or revoked"
           f" ({', '.join(sorted({e.manifest_digest for e in loaded}))})" if loaded
           else "no checkpoint was restored: the job must restore from RUNLEDGER_RESUME_MANIFEST"
           " (worker.session does) and honour RUNLEDGER_FAULT to crash after the first commit")
    return _row("pilot.restore", run_id, False, None, None, "ms", f"{why}; see {logs_of(run_id)}")


def _recovery_row(run_id: str, f: Figures, rto_s: float) -> PreflightCheck:
    if f.recovery_s is None:
        return _row("pilot.recovery", run_id, False, None, rto_s, "s",
                    "no step after the injected crash: the run did not recover;"
                    f" see {logs_of(run_id)}")
    ok = f.recovery_s <= rto_s
    return _row("pilot.recovery", run_id, ok, f.recovery_s, rto_s, "s",
                f"from the crash to the next step {f.recovery_s} s"
                f" ({'within' if ok else 'over'} rto_s {rto_s:g} s)")


def _run_row(run_id: str, events: Sequence[Event], waited: str | None) -> PreflightCheck:
    finished = _of(events, RunFinished)
    if finished and finished[-1].outcome == "succeeded":
        return _row("pilot.run", run_id, True, None, None, "", "the pilot run succeeded")
    failures = _of(events, FailureClassified)
    last = (f"; last failure: {failures[-1].failure_class}: {failures[-1].detail}"
            if failures else "")
    if finished:
        what = f"the pilot run failed: {finished[-1].reason}"
    elif _of(events, RunCancelled):
        what = f"the pilot run was cancelled: {_of(events, RunCancelled)[-1].reason}"
    else:
        what = f"the pilot run did not end: {waited or 'no terminal fact'}"
    return _row("pilot.run", run_id, False, None, None, "",
                f"{what}{last}; see `runledger status {run_id}` and {logs_of(run_id)}")


def _manifest_row(run_id: str, events: Sequence[Event]) -> PreflightCheck:
    published = _of(events, RunManifestPublished)
    if published:
        m = published[-1]
        where = m.path or "the log only (no checkpoint root)"
        return _row("pilot.manifest", run_id, True, None, None, "",
                    f"post-run manifest {m.digest} ({m.status}) at {where}")
    return _row("pilot.manifest", run_id, False, None, None, "",
                f"no RunManifestPublished for {run_id}; `runledger query manifest {run_id}`"
                " shows what the projection has")


def logs_of(run_id: str) -> str:
    return f"`runledger logs {run_id}`"


__all__ = ["Figures", "figures", "logs_of", "recovery_s", "restore_ms", "rows"]
