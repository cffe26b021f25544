"""The session's side of the SDC detectors: run them on the state a step produced and
say so on the log (``worker.sdc`` has the detectors, ``worker.session`` calls this).

At the step ``RUNLEDGER_SDC_REPLAY`` names, the coordinator reports ``StepReplayed``
first, whatever the detectors then find. On a finding the coordinator reports
``CorruptionSuspected`` and flushes it; every rank waits for that (a barrier on the
control group) and raises ``CorruptionDetected`` (exit 87), so nothing of the step is
reported as committed or checkpointed.

A replay that recomputed exactly what every rank held (the controller's verdict
``reproduced``) is the job's own numerics, and rolling back again would loop: a
non-finite finding then stops the run as ``NonFiniteState`` (exit 86, class
``non_finite``, never the node's), and a spike is the job's real spike, not
a suspicion. Replicas that disagree the same way twice stay a suspicion: the
controller's verdict on the next replay says whether a node or the job is at fault.

Before the update, :func:`watch_consumed` (an optimizer step pre-hook the session
installs) fingerprints the state the step consumes, on the steps the detectors
fingerprint; both reports carry it per rank (``consumed``), so the verdict can tell
a rank whose state changed at rest from the replicas its gradient then reached.

Tested in tests/worker/test_sdc.py and tests/worker/test_sdc_rest.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from events.base import Event, Header
from events.sdc import CorruptionSuspected, StepReplayed
from worker.comm import Comm
from worker.errors import CorruptionDetected, NonFiniteState
from worker.sdc import Detectors, consumed_parts, grad_norm, state_parts


class Reports(Protocol):
    """What ``detect`` needs of ``worker.reporter.Reporter``."""

    def header(self, key: str, causation_id: str | None = None) -> Header: ...

    def report(self, event: Event) -> None: ...

    def flush(self, timeout_s: float = 30.0) -> None: ...


def watch_consumed(detectors: Detectors | None, model: torch.nn.Module,
                   optimizer: torch.optim.Optimizer | None, next_step: Callable[[], int]) -> None:
    """Hook ``optimizer.step`` to fingerprint the state each fingerprinted step consumes,
    before the update (nothing without detectors or an optimizer). ``next_step`` says
    which step the optimizer is about to take. A second call replaces the first hook;
    ``detectors.watch.remove()`` removes it."""
    if detectors is None or optimizer is None:
        return

    def before(*_: object) -> None:
        step = next_step()
        if detectors.fingerprinted(step):
            detectors.before_update(step, consumed_parts(
                model, optimizer, optimizer_state=detectors.env.optimizer))
    if detectors.watch is not None:
        detectors.watch.remove()
    detectors.watch = optimizer.register_step_pre_hook(before)


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
            nodes=checked.nodes, consumed=_known(checked.consumed)))
    if found is None:
        return
    if checked.replayed and replay is not None and checked.fingerprints == replay.fingerprints:
        if found.detector == "nonfinite":
            raise NonFiniteState(step, found.detail)
        if found.detector == "spike":
            return
    if coordinator:
        reporter.report(CorruptionSuspected(
            header=reporter.header(f"sdc/{step}/suspected"), step=step,
            detector=found.detector, ranks=found.ranks, fingerprints=found.fingerprints,
            nodes=found.nodes, part=found.part, detail=found.detail,
            consumed=_known(checked.consumed)))
        reporter.flush()
    control.barrier()  # no rank exits before the suspicion is on the log
    raise CorruptionDetected(step, found.detector, found.ranks, found.detail)


def _known(consumed: tuple[str, ...]) -> tuple[str, ...]:
    """The per-rank consumed fingerprints for an event; () when no rank took one."""
    return consumed if any(consumed) else ()
