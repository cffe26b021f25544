"""The session's side of the SDC detectors: run them on the state a step produced and
say so on the log (``worker.sdc`` has the detectors, ``worker.session`` calls this).

At the step ``RUNLEDGER_SDC_REPLAY`` names, the coordinator reports ``StepReplayed``
first, whatever the detectors then find. On a finding the coordinator reports
``CorruptionSuspected`` and flushes it; every rank waits for that (a barrier on the
control group) and raises ``CorruptionDetected`` (exit 87), so nothing of the step is
reported as committed or checkpointed.

Tested in tests/worker/test_sdc.py.
"""

from __future__ import annotations

from typing import Protocol

import torch

from events.base import Event, Header
from events.sdc import CorruptionSuspected, StepReplayed
from worker.comm import Comm
from worker.errors import CorruptionDetected
from worker.sdc import Detectors, grad_norm, state_parts


class Reports(Protocol):
    """What ``detect`` needs of ``worker.reporter.Reporter``."""

    def header(self, key: str, causation_id: str | None = None) -> Header: ...

    def report(self, event: Event) -> None: ...

    def flush(self, timeout_s: float = 30.0) -> None: ...


def detect(detectors: Detectors, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
           reporter: Reports, control: Comm, *, coordinator: bool, step: int,
           loss: float | None) -> None:
    """Collective: check ``step``; raises ``CorruptionDetected`` on every rank on a finding."""
    env = detectors.env
    parts = state_parts(model, optimizer, grads=env.grads, optimizer_state=env.optimizer)
    norm = grad_norm(model) if detectors.wants_grad_norm else None
    checked = detectors.check(step, loss, parts, norm)
    replay, found = detectors.replay, checked.finding
    if coordinator and checked.replayed and replay is not None:
        reporter.report(StepReplayed(
            header=reporter.header(f"sdc/{step}/replayed"), step=step,
            suspected_generation=replay.generation, fingerprints=checked.fingerprints,
            nodes=checked.nodes))
    if found is None:
        return
    if coordinator:
        reporter.report(CorruptionSuspected(
            header=reporter.header(f"sdc/{step}/suspected"), step=step,
            detector=found.detector, ranks=found.ranks, fingerprints=found.fingerprints,
            nodes=found.nodes, part=found.part, detail=found.detail))
        reporter.flush()
    control.barrier()  # no rank exits before the suspicion is on the log
    raise CorruptionDetected(step, found.detector, found.ranks, found.detail)
