"""The worker package's exceptions: one root, specific leaves.

Exit codes follow the controller's failure classification (docs/training.md, failure
policy): a storage fault exits 74 (EX_IOERR), a data fault 65, so the
controller's policy sees the right class without parsing messages.

Tested in tests/worker/test_storage.py, tests/worker/test_restore.py,
tests/worker/test_faults.py and tests/worker/test_sdc.py.
"""

from __future__ import annotations

EXIT_DATA = 65
EXIT_STORAGE = 74
EXIT_TEMPFAIL = 75
EXIT_FENCED = 3
EXIT_NON_FINITE = 86
EXIT_CORRUPTION = 87  # the controller's ``silent_corruption`` class


class WorkerError(Exception):
    """Root of every error raised by the ``worker`` package."""

    exit_code = 1


class StorageFault(WorkerError):
    """Checkpoint storage failed (a write, a read-back, a listing)."""

    exit_code = EXIT_STORAGE

    def __init__(self, stage: str, detail: str) -> None:
        self.stage = stage
        self.detail = detail
        super().__init__(f"storage fault while {stage}: {detail}")


class VerificationFailed(WorkerError):
    """A committed checkpoint does not match its manifest; nothing was loaded from it."""

    exit_code = EXIT_STORAGE

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"checkpoint verification failed ({reason}): {detail}")


class NoUsableCheckpoint(WorkerError):
    """Every committed checkpoint within the rollback window failed verification."""

    exit_code = EXIT_STORAGE


class CheckpointRejected(WorkerError):
    """The controller refused a proposal (a stale generation, a step not forward)."""

    exit_code = EXIT_FENCED

    def __init__(self, step: int, reason: str, detail: str) -> None:
        self.step = step
        self.reason = reason
        super().__init__(f"checkpoint at step {step} rejected: {reason} ({detail})")


class Fenced(WorkerError):
    """The log fenced this generation (a newer one, a restart, a cancellation, the run's
    end): it stops before it steps or writes again."""

    exit_code = EXIT_FENCED

    def __init__(self, generation: int, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"generation {generation} is fenced ({reason}: {detail}); stopping")


class BacklogFull(WorkerError):
    """The async backlog is full and the policy is ``error``-free skip; used internally."""


class CorruptionDetected(WorkerError):
    """A silent-data-corruption detector distrusts this step's state (``worker.sdc``):
    every rank stops before the step is reported or checkpointed."""

    exit_code = EXIT_CORRUPTION

    def __init__(self, step: int, detector: str, ranks: tuple[int, ...], detail: str) -> None:
        self.step = step
        self.detector = detector
        self.ranks = ranks
        who = f"ranks {list(ranks)}" if ranks else "every rank"
        super().__init__(f"step {step}: {detector} detector distrusts {who} ({detail}); "
                         "the controller restarts from the newest checkpoint before it")


class NonFiniteState(WorkerError):
    """The replay of a non-finite suspicion recomputed the same state on every rank: the
    job's own numerics diverged (not the hardware), so rolling back again cannot help."""

    exit_code = EXIT_NON_FINITE

    def __init__(self, step: int, detail: str) -> None:
        self.step = step
        super().__init__(f"step {step}: {detail}, and the replay from the last checkpoint "
                         "recomputed exactly the same state on every rank: the job's own "
                         "numerics diverged; lower the learning rate or check the data")
