"""The simulator's properties, checked after every step: P1-P6 of the model, and ETTR closure.

:class:`Ghost` reads the log as it grows, with rules of its own that share
no code with the fold: which generation is live and which are revoked,
which checkpoints are committed (committed minus revoked, by digest), when
the run was admitted, and each generation's last accepted step. The checks
compare it, the controller's model and the storage:

- P1 no fact of a revoked generation (or after the end) is appended;
- P2 every committed checkpoint has its manifest and every member's shard
  written (acknowledged by the store: a torn or lost one is P4's to catch);
- P3 the data cursor names a committed checkpoint's step, never past the
  latest;
- P4 a restore loads only a committed checkpoint that verifies, and a new
  generation resumes from a committed step (:func:`restored`);
- P5 the model's latest checkpoint is the newest committed one;
- P6 a stop command is appended only after a fact that revoked its generation;
- E  ETTR closure: every accepted step's interval lies inside the allocation
  (admission to now) and after the one before it in its generation, so the
  parts the ETTR query cuts the allocation into can sum to it exactly;
- R  a controller rebuilt from the log holds the state the live one holds
  (:func:`replayed`, at every controller restart and at the end);
- L  a run that met no fault succeeds in its first generation with its last
  step committed (:func:`finished`, at the end).

A broken property raises :class:`Violation`, which names it.

Tested in tests/proof/test_sim.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from controller.emitter import Out
from controller.model import Model, PlanOf
from controller.model import replay as rebuild
from events.model import (
    CheckpointRestored,
    CheckpointRevoked,
    CheckpointVerificationFailed,
    CheckpointWriteFailed,
    CursorAdvanced,
    Event,
    FailureClassified,
    GenerationStarted,
    GroupStopCommanded,
    ManifestCommitted,
    MembershipConfirmed,
    RunAdmitted,
    RunCancelled,
    RunFinished,
    ShardWritten,
    StepCommitted,
    WorkerExited,
)
from events.state import RunState, Status
from events.topics import COMMANDS, RUNS
from proof.errors import ProofError
from proof.world import Storage

# Facts that speak for a generation: accepted only while it is live.
FENCED = (ShardWritten, StepCommitted, WorkerExited, CheckpointRestored,
          CheckpointVerificationFailed, CheckpointWriteFailed, CheckpointRevoked,
          ManifestCommitted, CursorAdvanced, MembershipConfirmed)


class Violation(ProofError):
    """A property broke: ``prop`` names it (P1-P6, E, R, L here; F, C, G, S, P8, W in
    ``proof.truth``)."""

    def __init__(self, prop: str, detail: str) -> None:
        super().__init__(f"{prop}: {detail}")
        self.prop = prop
        self.detail = detail


@dataclass
class Ghost:
    gen: int = 0
    revoked: set[int] = field(default_factory=set)
    ended: bool = False
    committed: dict[str, tuple[int, int]] = field(default_factory=dict)  # digest -> step, gen
    admitted_at: int | None = None
    last_step: dict[int, tuple[int, int]] = field(default_factory=dict)  # gen -> step, at

    def live(self, gen: int) -> bool:
        return not self.ended and gen == self.gen and gen not in self.revoked

    def newest(self) -> str | None:
        if not self.committed:
            return None
        return max(self.committed, key=lambda d: self.committed[d][0])

    def see(self, e: Event) -> None:
        """Take one appended fact into the ghost's own reading of the run."""
        match e:
            case RunAdmitted():
                self.admitted_at = e.header.occurred_at
            case GenerationStarted():
                self.revoked |= set(range(self.gen + 1)) - {e.generation}
                self.gen = e.generation
            case FailureClassified():
                self.revoked.add(e.generation)
            case RunCancelled() | RunFinished():
                self.ended = True
            case ManifestCommitted():
                self.committed[e.manifest_digest] = (e.step, e.generation)
            case CheckpointRevoked():
                self.committed.pop(e.manifest_digest, None)
            case StepCommitted():
                self.last_step[e.generation] = (e.step, e.header.occurred_at)


def appended(ghost: Ghost, outs: list[Out], now: int) -> None:
    """Check the records one controller step appended, in order (P1, P6, E)."""
    for topic, e in outs:
        if topic == RUNS and isinstance(e, FENCED) and not ghost.live(e.generation):
            raise Violation("P1", f"{e.event_type} {e.header.event_id} of generation "
                                  f"{e.generation} appended; generation {ghost.gen} is the "
                                  f"newest, revoked: {sorted(ghost.revoked)}, run ended: "
                                  f"{ghost.ended}")
        if topic == COMMANDS and isinstance(e, GroupStopCommanded) \
                and e.generation not in ghost.revoked and not ghost.ended:
            raise Violation("P6", f"stop of generation {e.generation} on {e.node} before any "
                                  "fact revoked it")
        if topic == RUNS and isinstance(e, StepCommitted):
            _closes(ghost, e, now)
        if topic == RUNS and isinstance(e, GenerationStarted):
            resumes(ghost, e)
        if topic == RUNS:
            ghost.see(e)


def _closes(ghost: Ghost, e: StepCommitted, now: int) -> None:
    at = e.header.occurred_at
    begin = at - e.step_time_ms
    if ghost.admitted_at is None or begin < ghost.admitted_at or at > now:
        raise Violation("E", f"step {e.step} of generation {e.generation} spans [{begin}, {at}]"
                             f" outside the allocation [{ghost.admitted_at}, {now}]")
    before = ghost.last_step.get(e.generation)
    if before is not None and begin < before[1]:
        raise Violation("E", f"step {e.step} of generation {e.generation} begins at {begin}, "
                             f"before step {before[0]} ended at {before[1]}")


def state_holds(ghost: Ghost, state: RunState, storage: Storage) -> None:
    """Check the model's run state against the ghost and the storage (P2, P3, P5)."""
    newest = ghost.newest()
    latest = state.checkpoint
    if (latest.manifest_digest if latest else None) != newest:
        raise Violation("P5", f"latest is {latest.manifest_digest if latest else None}, the "
                              f"newest committed checkpoint is {newest}")
    for c in state.checkpoints:
        if c.manifest_digest not in ghost.committed:
            raise Violation("P5", f"{c.manifest_digest} is held as committed after it was "
                                  "revoked")
        files = storage.manifests.get(c.manifest_path)
        missing = [p for p in files or () if p not in storage.acked]
        if files is None or missing:
            raise Violation("P2", f"step {c.step} committed ({c.manifest_digest}) without "
                                  f"{'its manifest' if files is None else ', '.join(missing)}")
    cursor = state.cursor
    steps = {s for s, _ in ghost.committed.values()}
    if cursor is not None and (cursor.step not in steps or latest is None
                               or cursor.step > latest.step):
        raise Violation("P3", f"cursor at step {cursor.step}; committed steps {sorted(steps)}")


def restored(ghost: Ghost, digest: str, problem: str | None) -> None:
    """Check a checkpoint a coordinator is about to load (P4)."""
    if digest not in ghost.committed or problem is not None:
        raise Violation("P4", f"restore loads {digest}: committed "
                              f"{digest in ghost.committed}, verification {problem or 'passes'}")


def resumes(ghost: Ghost, e: GenerationStarted) -> None:
    """A new generation resumes from a committed step, or from the start with none (P4)."""
    steps = {s for s, _ in ghost.committed.values()}
    if (e.resume_step or 0) != max(steps, default=0):
        raise Violation("P4", f"generation {e.generation} resumes from {e.resume_step}; "
                              f"the newest committed step is {max(steps, default=None)}")


def replayed(model: Model, facts: list[Event], since: int, plan_of: PlanOf, run: str) -> None:
    """A controller rebuilt from ``facts`` holds the live one's run state (R)."""
    live = model.runs.get(run)
    again = rebuild(facts, since, plan_of).runs.get(run)
    if live is None or again is None:
        if live is not again:
            raise Violation("R", f"run {run} is {'missing' if again is None else 'extra'} "
                                 "after a replay")
        return
    a, b = _comparable(live), _comparable(again)
    if a != b:
        diff = [f for f in a.__dataclass_fields__ if getattr(a, f) != getattr(b, f)]
        raise Violation("R", f"replay differs from live in {', '.join(diff)}")


def _comparable(state: RunState) -> RunState:
    # Heartbeats never become facts, and the time they move is theirs.
    return replace(state, heartbeats={}, updated_at=0)


def finished(state: RunState | None, last_step: int, checkpoint: int) -> None:
    """With no fault, the run succeeded in one generation, trained to its last step and
    committed the last checkpoint it took (``checkpoint``: the world's account) (L)."""
    got = (None, None, None, None) if state is None else (
        state.status, state.generation, state.step,
        state.checkpoint.step if state.checkpoint else None)
    if got != (Status.SUCCEEDED, 1, last_step, checkpoint):
        raise Violation("L", f"with no fault the run ended {got[0]} in generation {got[1]} "
                             f"at step {got[2]} with step {got[3]} committed, not succeeded "
                             f"in generation 1 at step {last_step} with step {checkpoint}")
