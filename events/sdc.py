"""Silent data corruption: the suspicion a worker reports, the replay that answers it,
and the controller's verdict (docs/training.md, "Silent data corruption in the session").

- ``CorruptionSuspected`` (report): a detector in the worker session saw state
  that must not be trusted at ``step`` (replicas disagree, a non-finite loss or
  gradient, a spike). The coordinator reports it, then every rank exits 87: the
  controller refuses any checkpoint at or after ``step`` while it is open and
  restarts from the newest checkpoint before it.
- ``StepReplayed`` (report): the generation that restarted after a suspicion
  recomputed ``step`` and reports what each rank holds there.
- ``CorruptionClassified`` (fact): the controller's verdict from the two,
  which closes the suspicion.

Fingerprints are per rank, in rank order, each a hex string
(``worker.sdc`` says what it digests); ``nodes`` are the ranks' nodes, same order.
``consumed`` (v2 of both reports) is per rank too: the fingerprint of the state the
rank consumed at the step (parameters and optimizer state before the update, as they
lay at rest since the step before), '' where not taken; empty in v1 records. It lets
the verdict compare each rank against its own recomputation before the all-reduce
mixed a corrupted rank's gradient into every replica (``controller.sdc_verdict``).

Tested in tests/events/test_codec.py and tests/events/test_compat.py; ``deviating`` in
tests/worker/test_sdc.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from events.base import Event, one_of
from events.errors import InvalidEvent

# agreement: cheap per-step fingerprints of replicas' state differ; digest: the
# full digest (every k steps) differs; nonfinite: loss or gradient norm is NaN/inf;
# spike: loss or gradient norm far above its running robust baseline.
SDC_DETECTORS = ("agreement", "digest", "nonfinite", "spike")
# transient: the replay agreed with the ranks that were right, the suspect rank's
# state was a one-off; node_fault: the suspect rank deviated again on the same node;
# nondeterministic: the job itself does not recompute the same state (no hardware
# blamed); reproduced: every rank recomputed exactly what it held (the job's own
# numerics, e.g. a loss that really diverges).
SDC_VERDICTS = ("transient", "node_fault", "nondeterministic", "reproduced")


def deviating(keys: Sequence[object]) -> tuple[int, ...]:
    """Ranks whose key differs from the majority's; every rank when no key is a strict
    majority of one (a 2-way tie lists both). The worker's detectors and the
    controller's verdict both name suspects so."""
    counts = Counter(keys).most_common()
    if len(counts) <= 1:
        return ()
    if counts[0][1] == counts[1][1]:
        return tuple(range(len(keys)))
    top = counts[0][0]
    return tuple(r for r, k in enumerate(keys) if k != top)


def _per_rank(name: str, fingerprints: tuple[str, ...], nodes: tuple[str, ...],
              ranks: tuple[int, ...], consumed: tuple[str, ...]) -> None:
    if consumed and len(consumed) != len(fingerprints):
        raise InvalidEvent(f"{name}.consumed must be empty or have one entry per "
                           f"fingerprint ({len(consumed)} for {len(fingerprints)})")
    if not fingerprints:
        raise InvalidEvent(f"{name}.fingerprints must hold one entry per rank")
    if len(nodes) != len(fingerprints):
        raise InvalidEvent(f"{name}.nodes must have one entry per fingerprint "
                           f"({len(nodes)} for {len(fingerprints)})")
    bad = [r for r in ranks if not 0 <= r < len(fingerprints)]
    if bad:
        raise InvalidEvent(f"{name}.ranks {bad} are not ranks of a group of "
                           f"{len(fingerprints)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CorruptionSuspected(Event):
    """A detector distrusts the state at ``step``; ``ranks`` deviate (empty: all)."""

    step: int
    detector: str
    ranks: tuple[int, ...]
    fingerprints: tuple[str, ...]
    nodes: tuple[str, ...]
    part: str
    detail: str
    consumed: tuple[str, ...] = ()  # v2: per rank, the state consumed at the step
    TOPIC: ClassVar[str] = "runledger.reports"

    def __post_init__(self) -> None:
        one_of(self.detector, SDC_DETECTORS, "CorruptionSuspected.detector")
        _per_rank("CorruptionSuspected", self.fingerprints, self.nodes, self.ranks,
                  self.consumed)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepReplayed(Event):
    """The restarted generation's state at the suspect ``step`` of ``suspected_generation``."""

    step: int
    suspected_generation: int
    fingerprints: tuple[str, ...]
    nodes: tuple[str, ...]
    consumed: tuple[str, ...] = ()  # v2: per rank, the state consumed at the step
    TOPIC: ClassVar[str] = "runledger.reports"

    def __post_init__(self) -> None:
        _per_rank("StepReplayed", self.fingerprints, self.nodes, (), self.consumed)


@dataclass(frozen=True, slots=True, kw_only=True)
class CorruptionClassified(Event):
    """The controller's verdict on the suspicion at ``step``: see ``SDC_VERDICTS``."""

    step: int
    suspected_generation: int
    detector: str
    verdict: str
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    detail: str
    TOPIC: ClassVar[str] = "runledger.runs"

    def __post_init__(self) -> None:
        one_of(self.detector, SDC_DETECTORS, "CorruptionClassified.detector")
        one_of(self.verdict, SDC_VERDICTS, "CorruptionClassified.verdict")
