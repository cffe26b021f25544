"""Failure classification and the retry policy. Pure.

Classification turns an observation (an exit code, a missing heartbeat, a
stalled step counter) into a failure class and a signature; the policy turns
the run's failure history, which lives in the log, into an action: restart
from the latest committed checkpoint after a bounded exponential backoff, or
escalate to Failed once the same signature has failed too often.

Exit codes follow sysexits(3) where one fits, so a training script can say
what went wrong without a side channel:

| exit | class |
|---|---|
| 65 (EX_DATAERR) | data |
| 74 (EX_IOERR) | storage |
| 75 (EX_TEMPFAIL), 125 (could not launch) | infrastructure |
| 86 | non_finite (loss or gradients not finite) |
| 87 | silent_corruption (a cross-replica check disagreed) |
| any other non-zero, or a signal | worker_crash |
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.spec_parts import RetryPolicy
from events.state import RunState

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


def from_exit(logical_id: str, node: str, exit_code: int | None, signal: int | None) -> Failure:
    if signal is not None:
        return Failure("worker_crash", f"worker_crash:signal={signal}",
                       f"{logical_id} on {node} killed by signal {signal}", logical_id, node)
    code = exit_code if exit_code is not None else -1
    cls = EXIT_CLASSES.get(code, "worker_crash")
    return Failure(cls, f"{cls}:exit={code}", f"{logical_id} on {node} exited with {code}",
                   logical_id, node)


def no_heartbeat(logical_id: str, node: str, silent_ms: int) -> Failure:
    return Failure("hang", "hang:no_heartbeat",
                   f"no heartbeat from {logical_id} on {node} for {silent_ms} ms", logical_id, node)


def no_progress(step: int, stalled_ms: int) -> Failure:
    return Failure("hang", "hang:no_progress",
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
    if rule.should_escalate(attempt, same):
        return Decision("escalate", attempt, 0,
                        f"{failure.signature}: failure {same} of this signature "
                        f"(escalate_after {rule.escalate_after}), attempt {attempt} of "
                        f"{rule.attempts}")
    return Decision("restart", attempt, rule.backoff_ms(attempt),
                    f"restart {attempt}/{rule.attempts} after {failure.signature}")
