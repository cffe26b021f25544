"""The model tied to the code: SPIN's traces of ``protocol.pml`` replayed against the real core.

Each controller transition of the model prints one line (``printf``, which
SPIN's simulations and trail replays execute and its verifier ignores):

- ``@SHARD g s m v``: member ``m`` of generation ``g`` reported its shard of
  step ``s``; ``v`` is the model's verdict (1 accepted, 0 refused);
- ``@PROPOSE g s m v``: the coordinator's proposal of step ``s``; 1 committed;
- ``@VFAIL g s c v``: a restore found step ``s`` (committed by generation
  ``c``) does not verify; 1 revoked;
- ``@LOST g``: a node of generation ``g`` is lost: a restart is decided;
- ``@GEN g r``: generation ``g`` starts, resuming from step ``r`` (0: none);
- ``@CANCEL g``: the run is cancelled under generation ``g``;
- ``@STOP g``: the decision commands the agent to stop generation ``g``;
- ``@= l c``: after each decision, the latest committed step and the data
  cursor's step (0: none).

:class:`Replay` feeds the same transitions to the real controller core
(``controller.reconcile`` ``handle`` and ``tick``, judging with
``events.fold``) as the reports, requests and clock the real system would
see, and compares every verdict and every state line; a stop the real core
commanded that the model's decision did not (or the reverse) is a disagreement
too, at the decision's state line (at its ``@STOP``). ``traces`` runs
SPIN's random simulations (``spin -n<seed>``); ``proof.spin`` keeps the
trail of every mutant's counterexample, where the real code must disagree
with the broken rule.

``python -m proof.traces --seeds 1000`` replays seeds 1..1000.

Tested in tests/proof/test_traces.py.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from controller.emitter import Out
from controller.model import Model
from controller.reconcile import handle, tick
from controller.runplan import RunPlan
from controller.spec.parts import RetryPolicy
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    CancelRequested,
    CheckpointRevoked,
    CheckpointVerificationFailed,
    Event,
    FailureClassified,
    GenerationStarted,
    GroupStopCommanded,
    Header,
    ManifestCommitted,
    ManifestProposed,
    RunCancelled,
    RunSubmitted,
    ShardWritten,
    WorkerExited,
    node_key,
)
from events.workerenv import CheckpointEnv
from proof.errors import ProofError
from proof.spin import MODEL, tools

RUN = "model-run"
NODE = "n1"
PLAN = RunPlan(world_size=2, argv=("train",), cancel_authority=frozenset({"oncall"}),
               retry={"worker_crash": RetryPolicy(attempts=9, backoff_base_s=1.0,
                                                  backoff_cap_s=1.0, escalate_after=9)},
               checkpoint=CheckpointEnv(root="ckpt", interval_steps=1, dataset_id="ds"))
# The mutants whose removed rule is the controller's (its fold, its commit decision, its
# restart and cancel decisions and the stops they command): replayed against the real
# core, their counterexample must meet a disagreement at the step that breaks the
# property, or at the decision before it that lacked the stop (LOST_NOT_STOPPED).
# NO_VERIFY, RESUME_OTHER and PROPOSE_OWN_WRITE remove a worker's rule (worker/restore.py,
# worker/session.py), so the real controller agrees with their traces.
CONTROLLER_RULES = frozenset({"NO_GEN_CHECK", "NO_SHARD_CHECK", "NO_CURSOR_RESET",
                              "NO_STEP_CHECK", "LATEST_STAYS", "STOP_FIRST",
                              "START_AFTER_CANCEL", "LOST_NOT_STOPPED", "UNFENCED_START",
                              "VFAIL_ANY_GEN"})

# SPIN's random simulation picks uniformly among enabled transitions, so a cancel or
# a lost node, enabled from the first step, ends most walks before anything commits.
# Two of every three seeds steer it with guards that only remove choices (no cancel;
# no lost node before a commit), so each of their traces is still a trace of the full
# model, and commits, restores from a committed step and revocations show up.
GUIDES: tuple[tuple[str, ...], ...] = ((), ("NOCANCEL",), ("NOCANCEL", "LOSS_AFTER=1"))


@dataclass(frozen=True, slots=True)
class Agreement:
    """One trace replayed: ``disagreement`` names the first line the code judged otherwise."""

    lines: int
    disagreement: str | None = None

    @property
    def agrees(self) -> bool:
        return self.disagreement is None


class Replay:
    """The real core, driven by one model trace."""

    def __init__(self) -> None:
        self.model = Model(since=1_000_000)
        self.now = 1_000_000
        self._n = 0
        # The generations the real core commanded stopped that no @STOP line has matched.
        self._stopped: list[int] = []

    def plan_of(self, _: RunSubmitted) -> RunPlan:
        return PLAN

    def header(self, gen: int, producer: str, run_id: str = RUN) -> Header:
        self._n += 1
        return Header(f"{producer}/{self._n}", run_id, gen, self.now, producer)

    def send(self, event: Event) -> list[Out]:
        self.now += 1
        self.model, out = handle(self.model, event, self.now, self.plan_of)
        self._stopped += _stops(out)
        return out

    def tick(self, advance_ms: int = 1) -> list[Out]:
        self.now += advance_ms
        self.send(AgentHeartbeatRecorded(header=self.header(0, "agent/n1", node_key(NODE)),
                                         node=NODE, slots=2, domain="d", busy_slots=2))
        self.model, out = tick(self.model, self.now, self.plan_of)
        self._stopped += _stops(out)
        return out

    def boot(self) -> None:
        self.send(AgentRegistered(header=self.header(0, "agent/n1", node_key(NODE)), node=NODE,
                                  slots=2, domain="d"))
        self.send(RunSubmitted(header=self.header(0, "operator/alice"), spec_digest="sha256:m",
                               spec_json="{}", principal="alice", world_size=2,
                               dataset_id="ds"))
        out = self.tick()
        if not any(isinstance(e, GenerationStarted) and e.generation == 1 for _, e in out):
            raise ProofError(f"the real controller did not start generation 1: {_types(out)}")

    def step(self, line: str) -> str | None:
        """Perform one trace line; what the code did otherwise, or None when it agrees."""
        kind, *nums = line[1:].split()
        n = [int(x) for x in nums]
        match kind:
            case "SHARD":
                out = self.send(ShardWritten(
                    header=self.header(n[0], f"r{n[2]}"), step=n[1], logical_id=f"r{n[2]}",
                    path=f"ckpt/g{n[0]}/s{n[1]}/r{n[2]}", bytes=1, crc32c=0))
                return _verdict(n[3], _has(out, ShardWritten), out)
            case "PROPOSE":
                out = self.send(ManifestProposed(
                    header=self.header(n[0], "r0"), step=n[1],
                    manifest_path=f"ckpt/g{n[0]}/s{n[1]}/manifest.json",
                    manifest_digest=f"sha256:g{n[0]}s{n[1]}", dataset_id="ds", epoch=0,
                    position=n[1] * 64, source_counts={"web": n[1] * 64}))
                return _verdict(n[3], _has(out, ManifestCommitted), out)
            case "VFAIL":
                out = self.send(CheckpointVerificationFailed(
                    header=self.header(n[0], "r0"), step=n[1],
                    manifest_path=f"ckpt/g{n[2]}/s{n[1]}/manifest.json",
                    manifest_digest=f"sha256:g{n[2]}s{n[1]}", logical_id="r0",
                    reason="shard_checksum", detail="model"))
                return _verdict(n[3], _has(out, CheckpointRevoked), out)
            case "LOST":
                return self._lost(n[0])
            case "GEN":
                return self._started(n[0], n[1])
            case "CANCEL":
                out = self.send(CancelRequested(header=self.header(0, "operator/oncall"),
                                                principal="oncall", reason="model"))
                return _revokes_first(out, RunCancelled)
            case "STOP":
                if n[0] not in self._stopped:
                    return f"the code commands no stop of g{n[0]} here"
                self._stopped.remove(n[0])
                return None
            case "=":
                if self._stopped:
                    left, self._stopped = self._stopped, []
                    return f"the code also stops {', '.join(f'g{g}' for g in left)}"
                return self._state(n[0], n[1])
        raise ProofError(f"unknown trace line {line!r}")

    def _lost(self, gen: int) -> str | None:
        out = self.send(WorkerExited(header=self.header(gen, "agent/n1"), logical_id="r1",
                                     node=NODE, signal=9))
        out += self.tick()
        return _revokes_first(out, FailureClassified)

    def _started(self, gen: int, resume: int) -> str | None:
        out = self.tick(1_001)  # past the restart's backoff
        started = [e for _, e in out if isinstance(e, GenerationStarted)]
        if not started:
            return f"no GenerationStarted: {_types(out)}"
        e = started[0]
        if (e.generation, e.resume_step or 0) != (gen, resume):
            return f"generation {e.generation} resumes from {e.resume_step}"
        return None

    def _state(self, latest: int, cursor: int) -> str | None:
        s = self.model.runs[RUN]
        real = (s.checkpoint.step if s.checkpoint else 0, s.cursor.step if s.cursor else 0)
        return None if real == (latest, cursor) else f"latest, cursor are {real}"


def _types(out: list[Out]) -> str:
    return ", ".join(e.event_type for _, e in out) or "nothing"


def _has(out: list[Out], kind: type[Event]) -> bool:
    return any(isinstance(e, kind) for _, e in out)


def _verdict(model: int, real: bool, out: list[Out]) -> str | None:
    if bool(model) == real:
        return None
    return f"the code {'accepts' if real else 'refuses'}: {_types(out)}"


def _stops(out: list[Out]) -> list[int]:
    return [e.generation for _, e in out if isinstance(e, GroupStopCommanded)]


def _revokes_first(out: list[Out], revoking: type[Event]) -> str | None:
    """The revoking fact, before any stop (P6's order); the @STOP lines that follow
    match the stops."""
    kinds = [e for _, e in out if isinstance(e, revoking | GroupStopCommanded)]
    if not kinds or not isinstance(kinds[0], revoking):
        return f"expected {revoking.__name__} before any stop: {_types(out)}"
    return None


def replay(lines: Sequence[str]) -> Agreement:
    """Replay one trace against a fresh real core."""
    r = Replay()
    r.boot()
    for i, line in enumerate(lines):
        wrong = r.step(line)
        if wrong is not None:
            return Agreement(len(lines), f"line {i + 1} {line!r}: {wrong}")
    return Agreement(len(lines))


def simulate(seed: int) -> list[str]:
    """The transition lines of one random SPIN simulation of the model, steered by
    ``GUIDES[seed % 3]``."""
    tools()
    defines = GUIDES[seed % len(GUIDES)]
    cmd = ["spin", f"-n{seed}", "-T", "-B", *(f"-D{d}" for d in defines), str(MODEL)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ProofError(f"{' '.join(cmd)} failed: {(done.stderr or done.stdout)[-1000:]}")
    return trace_lines(done.stdout)


def trace_lines(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.strip().startswith("@")]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m proof.traces", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=1000, help="random simulations (default 1000)")
    p.add_argument("--first", type=int, default=1, help="the first seed (default 1)")
    args = p.parse_args(argv)
    seen: Counter[str] = Counter()
    disagree = 0
    try:
        for seed in range(args.first, args.first + args.seeds):
            trace = simulate(seed)
            result = replay(trace)
            seen.update(kind_of(line) for line in trace)
            if not result.agrees:
                disagree += 1
                print(f"seed {seed}: {result.disagreement}")
    except ProofError as exc:
        print(f"proof: {exc}", file=sys.stderr)
        return 2
    print("transitions replayed: " + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())))
    print(f"{args.seeds} traces, {sum(seen.values())} lines, {disagree} disagreements")
    return 1 if disagree else 0


def kind_of(line: str) -> str:
    """A line's kind, with the model's verdict for a report (``SHARD+``, ``PROPOSE-``)."""
    kind, *rest = line[1:].split()
    if kind in ("SHARD", "PROPOSE", "VFAIL"):
        return kind + ("+" if rest[-1] == "1" else "-")
    return "STATE" if kind == "=" else kind


if __name__ == "__main__":
    sys.exit(main())
