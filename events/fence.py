"""What a follower without a run's state learns from one fact: may generation g still publish?

A worker's watcher starts at the log's end, so it never holds the run's
folded state; it still needs the fold's answer to "are my reports still
accepted?". :func:`fenced_by` gives the verdict :func:`events.fold.apply` would
give that generation's reports once the fact is accepted, with the fold's own
reasons (docs/architecture.md §6). Pure, like the fold; tests check it against
``apply`` fact by fact and over generated logs.
"""

from __future__ import annotations

from events.fold import (
    ACCEPTED,
    RUN_NOT_ACTIVE,
    RUN_TERMINAL,
    STALE_GENERATION,
    Verdict,
    reject,
)
from events.model import (
    Event,
    FailureClassified,
    GenerationStarted,
    RunCancelled,
    RunFinished,
    RunQueued,
)


def fenced_by(fact: Event, generation: int) -> Verdict:
    """Does the accepted ``fact`` take away ``generation``'s right to publish, and why.

    For a follower without the run's state (a worker's watcher starts at the
    log's end): the verdict this fold gives that generation's reports from this
    fact on, ``ACCEPTED`` while the fact leaves it alone.
    """
    match fact:
        case GenerationStarted() if fact.generation > generation:
            return reject(STALE_GENERATION, f"generation {fact.generation} started")
        case FailureClassified() if fact.generation >= generation and fact.action == "restart":
            return reject(STALE_GENERATION, f"generation {fact.generation} failed"
                           f" ({fact.signature}); a restart was decided")
        case FailureClassified() if fact.generation >= generation and fact.action == "requeue":
            return reject(RUN_NOT_ACTIVE, f"the run was requeued ({fact.signature})")
        case RunQueued():
            return reject(RUN_NOT_ACTIVE, f"the run was queued ({fact.reason})")
        case RunCancelled():
            return reject(RUN_TERMINAL, "the run was cancelled")
        case RunFinished():
            return reject(RUN_TERMINAL, f"the run finished ({fact.outcome})")
    return ACCEPTED
