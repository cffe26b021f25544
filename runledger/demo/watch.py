"""Following one run from the log while the demo waits on it.

:class:`RunWatch` tails ``runledger.runs`` from the beginning with an
``events.kafka.reader.LogReader`` and folds the run's facts with :func:`events.fold.apply`,
as ``runledger status`` does. The controller copies every report it accepts
(steps, exits, restores, checkpoint commits) onto ``runs``, so that one topic
tells the whole story in its authoritative order. :func:`follow` drives the
demo's stages: one line per change of (status, generation, step, latest
checkpoint), a line per notable event, and an error naming what did not happen
when progress stalls. :func:`wait_for_snapshot` waits until the running
projector's snapshot holds the run's end.

Tested in tests/e2e/test_demo.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from events.errors import EventsError
from events.fold import apply
from events.kafka.reader import LogReader
from events.model import (
    CheckpointRestored,
    Event,
    FailureClassified,
    GenerationStarted,
    ManifestCommitted,
    RunFinished,
    RunQueued,
    StepCommitted,
    WorkerExited,
)
from events.state import RunState
from events.topics import RUNS
from projectors.snapshot import SnapshotError, SnapshotMeta, read_meta, snapshot_path
from runledger.demo.procs import DemoError, tail


@dataclass(slots=True)
class RunWatch:
    """The run's folded state, and the facts the demo checks at the end."""

    bootstrap: str
    run_id: str
    state: RunState | None = None
    generations: list[GenerationStarted] = field(default_factory=list)
    failures: list[FailureClassified] = field(default_factory=list)
    commits: list[ManifestCommitted] = field(default_factory=list)
    finished: RunFinished | None = None
    # The newest accepted step of each generation.
    steps: dict[int, int] = field(default_factory=dict)
    _reader: LogReader | None = None

    def open(self) -> None:
        try:
            # Only this run's records are decoded (every topic is keyed by run id);
            # read_committed: facts of aborted controller transactions never show.
            self._reader = LogReader(self.bootstrap, [RUNS], key_partition=True, key=self.run_id,
                                     name=f"runledger-demo-{self.run_id}")
        except EventsError as exc:
            raise DemoError(f"cannot read {RUNS} at {self.bootstrap}: {exc}") from None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def poll(self, timeout_s: float) -> list[Event]:
        """The run's new facts, folded."""
        assert self._reader is not None, "open() first"
        try:
            # An undecodable record is logged; `runledger events dump` reports it too.
            records = self._reader.read_records(500, timeout_s, batch=True)
        except EventsError as exc:
            raise DemoError(f"reading the log: {exc}") from None
        out: list[Event] = []
        for record in records:
            event = record.event
            if event.run_id != self.run_id:
                continue
            self._fact(event)
            out.append(event)
        return out

    def _fact(self, event: Event) -> None:
        transition = apply(self.state, event)
        self.state = transition.state
        if not transition.verdict.accepted:
            return
        if isinstance(event, GenerationStarted):
            self.generations.append(event)
        elif isinstance(event, FailureClassified):
            self.failures.append(event)
        elif isinstance(event, ManifestCommitted):
            self.commits.append(event)
        elif isinstance(event, RunFinished):
            self.finished = event
        elif isinstance(event, StepCommitted):
            self.steps[event.generation] = event.step

    @property
    def generation(self) -> int:
        return self.state.generation if self.state else 0

    def snapshot(self) -> tuple[str, int, int, str]:
        state = self.state
        ckpt = state.checkpoint if state else None
        where = f"step {ckpt.step} (g{ckpt.generation})" if ckpt else "none"
        if state is None:
            return ("Submitted", 0, 0, where)
        return (state.status.value, state.generation, state.step, where)


@dataclass(frozen=True, slots=True)
class Stage:
    """A milestone the demo waits for, and the log that tells why when it does not come."""

    what: str  # "no <what> within N s"
    done: Callable[[RunWatch], bool]
    log: Path
    hint: str = ""  # more places to look, after the log's path

    def failed(self, why: str) -> DemoError:
        lines = tail(self.log)
        return DemoError(f"{why}; see {self.log}{self.hint}" + (f"\n{lines}" if lines else ""))


def follow(watch: RunWatch, stages: list[Stage], *, steps: int, stall_s: float,
           deadline: float, say: Callable[[str], None],
           check: Callable[[], None] = lambda: None) -> None:
    """Print progress until every stage is done, in order; raise DemoError otherwise.

    ``stall_s`` counts from the run's last new fact, so a slow machine is not a
    failure as long as the run moves; ``deadline`` (monotonic) bounds the
    whole wait. ``check`` raises when a service the run depends on has died.
    """
    t0 = time.monotonic()
    last_change = t0
    shown: tuple[str, int, int, str] | None = None
    pending = list(stages)
    while pending:
        events = watch.poll(0.5)
        now = time.monotonic()
        if events:
            last_change = now
        for event in events:
            note = describe(event)
            if note:
                say(f"{now - t0:7.1f}s  {note}")
        snap = watch.snapshot()
        if snap != shown:
            status, gen, step, ckpt = snap
            say(f"{now - t0:7.1f}s  {status:<11} generation {gen}  step {step:>4}/{steps}"
                f"  checkpoint {ckpt}")
            shown = snap
        while pending and pending[0].done(watch):
            pending.pop(0)
        if not pending:
            return
        stage = pending[0]
        end = watch.finished
        if end is not None:
            raise stage.failed(f"the run {end.outcome} ({end.reason}) before the {stage.what}")
        check()
        if now - last_change > stall_s:
            raise stage.failed(f"no {stage.what} within {stall_s:.0f} s of the run's last"
                               " change")
        if now > deadline:
            raise stage.failed(f"no {stage.what} before the demo's --timeout")


def describe(event: Event) -> str | None:
    """A one-line note for the events worth narrating; None for the rest."""
    if isinstance(event, RunQueued):
        return f"queued: {event.reason}"
    if isinstance(event, GenerationStarted):
        resume = (f", resuming from the checkpoint of step {event.resume_step}"
                  if event.resume_step is not None else "")
        return f"generation {event.generation} started ({event.reason}){resume}"
    if isinstance(event, WorkerExited):
        how = f"signal {event.signal}" if event.signal is not None else f"status {event.exit_code}"
        return f"worker {event.logical_id} of generation {event.generation} exited ({how})"
    if isinstance(event, FailureClassified):
        return (f"failure classified: {event.failure_class} ({event.signature})"
                f" -> {event.action}, attempt {event.attempt}")
    if isinstance(event, CheckpointRestored):
        return (f"worker {event.logical_id} restored the checkpoint of step {event.step}"
                f" (verified in {event.verify_ms:.0f} ms)")
    if isinstance(event, RunFinished):
        return f"run finished: {event.outcome} ({event.reason})"
    return None


def wait_for_snapshot(db: Path, run_id: str, timeout_s: float, log: Path) -> SnapshotMeta:
    """The running projector's first snapshot that holds ``run_id``'s end (its last
    fact). Not "nothing behind": agents keep heartbeating, so a live log is rarely
    fully projected at the moment a snapshot is taken."""
    deadline = time.monotonic() + timeout_s
    path = snapshot_path(db)
    while time.monotonic() < deadline:
        meta = _ended_in_snapshot(path, run_id)
        if meta is not None:
            return meta
        time.sleep(0.5)
    raise DemoError(f"the projector published no snapshot holding the end of run {run_id} at"
                    f" {path} within {timeout_s:.0f} s; its log:\n{tail(log)}")


def _ended_in_snapshot(path: Path, run_id: str) -> SnapshotMeta | None:
    if not path.exists():
        return None
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return None
    try:
        meta = read_meta(con, path)
        row = con.execute("SELECT count(*) FROM endings WHERE run_id = ?", [run_id]).fetchone()
        return meta if row and row[0] else None
    except (SnapshotError, duckdb.Error):
        return None
    finally:
        con.close()
