"""Failure classification, the retry policy, and which failures are the node's. Pure.

Classification turns an observation (an exit with its evidence, a missing
heartbeat, a stalled step counter) into a failure class and a signature; the
policy turns the run's failure history, which lives in the log, into an
action: restart from the latest committed checkpoint after a bounded
exponential backoff, or escalate to Failed once the same signature has failed
too often. A job's own error (class ``job``) escalates at once: retrying a
typo burns the budget and says nothing new.

An exit is judged in this order (the first that applies decides):

1. the agent could not launch the worker (``WorkerExited.launch_error``: a
   missing workdir, program or script, no permission; or a path or program
   the spec chose that the agent may not use, such as a ``checkpoint.root``
   outside its allowed roots, ``agent.confine``): ``job:launch``;
2. an exit code sysexits(3) gives a meaning (the table below): that class;
3. an exit code that means a usage error (2: argparse and bash; 64:
   EX_USAGE; 126/127: the shell could not run a program): ``job:exit=N``;
4. every member of the generation exited with the same code before its first
   committed step (a deterministic failure at start, such as an exception at
   import): ``job:start_exit=N``, unless a member's node may have restarted
   under the generation (``controller.run_decide`` asks the agents'
   registrations): a rank lost with its node takes its peers down through
   their collectives, one code on every rank that says nothing of the job;
5. anything else: ``worker_crash`` (``exit=N`` or ``signal=N``).

| exit | class | counts against the node |
|---|---|---|
| launch failure (a refused path too), 2, 64, 126, 127; one code on every rank at start | job | no |
| 65 (EX_DATAERR) | data | no |
| 74 (EX_IOERR) | storage | yes |
| 75 (EX_TEMPFAIL), 125 with no launch error (no free slots in time) | infrastructure | yes |
| 86 (loss or gradients not finite) | non_finite | no |
| 87 (a cross-replica check disagreed) | silent_corruption | yes (not if suspected) |
| killed by a signal (OOM killer, SIGSEGV, SIGBUS) | worker_crash | yes |
| any other non-zero exit | worker_crash | no |
| no heartbeat past the timeout (and the exit grace, below) | hang | yes |

An exit beats a timeout: a process exit the agent observed is the fact about
that process, and a silence judges only a process still alive, so once a
member has exited the others get a grace for their own exits before a silent
one is a hang (``controller.liveness.EXIT_GRACE_MS``).

Quarantine counts only what the evidence attributes to the node
(:func:`counts_against_node`): a failure of the job's code or data, or a
plain non-zero exit of its process, says nothing about the machine. Nor does
a failure of a run that injects faults into itself (its spec sets a fault
hook, as ``runledger pilot`` and ``drill`` do): :func:`injected` marks its
signature, so a rehearsal never quarantines the node it rehearsed on. Nor
does an exit 87 while a silent-data-corruption suspicion is open
(:func:`suspected`): the replay's verdict judges the node instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from controller.exits import ExitNote
from controller.spec.parts import RetryPolicy
from events.model import FAILURE_CLASSES
from events.state import RunState

JOB = "job"
# The classes a spec's ``retry`` may tune; a job's own error is never retried.
RETRY_CLASSES = tuple(c for c in FAILURE_CLASSES if c != JOB)
# Usage errors: argparse and bash (2), EX_USAGE (64), a shell that cannot run a program.
JOB_EXIT_CODES = frozenset({2, 64, 126, 127})
# Classes whose evidence points at the node (its disks, network, memory, chips).
NODE_FAULT_CLASSES = frozenset({"hang", "straggler", "storage", "silent_corruption",
                                "infrastructure"})
JOB_FIX = "the job's own error, not retried: fix it and submit again"

EXIT_CLASSES = {
    65: "data",
    74: "storage",
    75: "infrastructure",
    125: "infrastructure",
    86: "non_finite",
    87: "silent_corruption",
}


@dataclass(frozen=True, slots=True)
class Failure:
    failure_class: str
    signature: str
    detail: str
    logical_id: str | None = None
    node: str | None = None
    log_path: str = ""
    stderr_tail: str = ""


INJECTED = ":injected"
SUSPECTED = ":suspected"


def injected(failure: Failure) -> Failure:
    """The same failure, marked as one its run asked for (the spec's fault hooks)."""
    if failure.signature.endswith(INJECTED):
        return failure
    return replace(failure, signature=failure.signature + INJECTED,
                   detail=f"{failure.detail} (the run injects faults: not counted"
                          " against the node)")


def suspected(failure: Failure) -> Failure:
    """The same failure, marked as one that follows a silent-data-corruption suspicion.

    Every rank exits 87 after a suspicion, so the member whose exit is classified
    says nothing about which node corrupted the state: the replay's verdict does
    (``controller.sdc_verdict``), and a ``node_fault`` quarantines that node.
    """
    if SUSPECTED in failure.signature:
        return failure
    return replace(failure, signature=failure.signature + SUSPECTED,
                   detail=f"{failure.detail} (a corruption suspicion is open: its replay, "
                          "not this exit, judges the node)")


def counts_against_node(failure_class: str, signature: str) -> bool:
    """Whether a failure is evidence against its node (quarantine counts only these)."""
    if signature.endswith(INJECTED) or SUSPECTED in signature:
        return False
    if failure_class == "worker_crash":
        return signature.startswith("worker_crash:signal=")
    return failure_class in NODE_FAULT_CLASSES


def from_exit(logical_id: str, node: str, exit_code: int | None, signal: int | None,
              note: ExitNote | None = None) -> Failure:
    """The failure one member's exit shows (rules 1-3 and 5)."""
    log_path, tail = (note.log_path, note.stderr_tail) if note is not None else ("", "")
    who = f"{logical_id} on {node}"
    if note is not None and note.launch_error:
        return Failure(JOB, "job:launch", f"{who} could not be launched: {note.launch_error};"
                       f" {JOB_FIX}", logical_id, node, log_path, tail)
    if signal is not None:
        return Failure("worker_crash", f"worker_crash:signal={signal}",
                       f"{who} killed by signal {signal}", logical_id, node, log_path, tail)
    code = exit_code if exit_code is not None else -1
    if code not in EXIT_CLASSES and code in JOB_EXIT_CODES:
        return Failure(JOB, f"job:exit={code}", f"{who} exited with {code}, a usage error"
                       f" (see its output); {JOB_FIX}", logical_id, node, log_path, tail)
    cls = EXIT_CLASSES.get(code, "worker_crash")
    return Failure(cls, f"{cls}:exit={code}", f"{who} exited with {code}", logical_id, node,
                   log_path, tail)


def at_start(notes: Sequence[ExitNote], world_size: int) -> Failure | None:
    """Rule 4: every member exited with one non-zero code before the first step."""
    if len(notes) != world_size or not notes:
        return None
    codes = {(n.exit_code, n.signal) for n in notes}
    first = min(notes, key=lambda n: (n.at, n.logical_id))
    code, signal = first.exit_code, first.signal
    if len(codes) != 1 or signal is not None or not code or any(n.stepped for n in notes):
        return None
    if code in EXIT_CLASSES:
        return None  # the job said what went wrong (data, storage, ...): believe it
    return Failure(JOB, f"job:start_exit={code}",
                   f"every member exited with {code} before the first step (the same failure"
                   f" on every rank: the job's code or its environment); {JOB_FIX}",
                   first.logical_id, first.node, first.log_path, first.stderr_tail)


NO_HEARTBEAT = "hang:no_heartbeat"


def no_heartbeat(logical_id: str, node: str, silent_ms: int, after_exit: str = "") -> Failure:
    """A member silent past its timeout and, when another member has exited, past the
    grace for its own exit (``after_exit`` says which exit it was waited for)."""
    why = f" ({after_exit})" if after_exit else ""
    return Failure("hang", NO_HEARTBEAT,
                   f"no heartbeat from {logical_id} on {node} for {silent_ms} ms{why}",
                   logical_id, node)


NO_PROGRESS = "hang:no_progress"


def no_progress(step: int, stalled_ms: int) -> Failure:
    return Failure("hang", NO_PROGRESS,
                   f"heartbeats alive but no step after {step} for {stalled_ms} ms")


def node_lost(node: str, silent_ms: int) -> Failure:
    return Failure("infrastructure", "infrastructure:node_lost",
                   f"agent on {node} silent for {silent_ms} ms", None, node)


@dataclass(frozen=True, slots=True)
class Decision:
    action: str  # "restart" or "escalate"
    attempt: int
    backoff_ms: int
    reason: str


def decide(state: RunState, failure: Failure, rule: RetryPolicy) -> Decision:
    """Restart with backoff, or escalate; the counts come from the folded log."""
    same = state.failures.get(failure.signature, 0) + 1
    prefix = f"{failure.failure_class}:"
    attempt = sum(n for sig, n in state.failures.items() if sig.startswith(prefix)) + 1
    if failure.failure_class == JOB:
        return Decision("escalate", attempt, 0, f"{failure.signature}: {JOB_FIX}")
    if rule.should_escalate(attempt, same):
        return Decision("escalate", attempt, 0,
                        f"{failure.signature}: failure {same} of this signature "
                        f"(escalate_after {rule.escalate_after}), attempt {attempt} of "
                        f"{rule.attempts}")
    return Decision("restart", attempt, rule.backoff_ms(attempt),
                    f"restart {attempt}/{rule.attempts} after {failure.signature}")
