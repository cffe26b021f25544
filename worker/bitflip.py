"""The ``bitflip`` fault (``worker.faults``): silent data corruption on demand.

``flip_bit`` flips one bit of one element in place, on the raw bits; ``choose`` picks the
tensor, element and bit from a generator seeded by (seed, step, rank), every element of
the kind equally likely, so a replay of the step flips the same bit again (a bad node
unless the fault names a generation). The :class:`Injector` hooks the optimizer: a
gradient flips in a step pre-hook (so the update consumes it), a parameter or optimizer
state tensor in a post-hook (the state the session's detectors then read). With
``when=rest`` a parameter or optimizer state tensor flips at rest, in a forward pre-hook
on the model, once per step, before the step's first forward: the corrupted value is
what the step consumes (a flip between two steps).

Tested in tests/worker/test_bitflip.py and tests/worker/test_sdc_campaign.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from worker.errors import WorkerError
from worker.faults import Faults
from worker.sdc import Part, raw_bits, state_parts


@dataclass(frozen=True, slots=True)
class Flip:
    """One flipped bit: where, and the element's raw bits before and after."""

    step: int
    rank: int
    target: str
    part: str
    element: int
    bit: int
    before: int
    after: int


def flip_bit(tensor: torch.Tensor, element: int, bit: int) -> tuple[int, int]:
    """Flip ``bit`` of flat ``element`` of ``tensor`` in place; its raw bits before, after."""
    if not tensor.is_contiguous():
        raise WorkerError(f"bitflip: a tensor of shape {tuple(tensor.shape)} is not "
                          "contiguous; flip a contiguous one")
    with torch.no_grad():
        ints = raw_bits(tensor)
        width = ints.element_size() * 8
        if not (0 <= element < ints.numel() and 0 <= bit < width):
            raise WorkerError(f"bitflip: element {element} bit {bit} is outside a tensor of "
                              f"{ints.numel()} elements of {width} bits")
        # The top bit as a signed mask: 1 << (width - 1) does not fit the dtype.
        mask = -(1 << (width - 1)) if bit == width - 1 else 1 << bit
        before = int(ints[element])
        ints[element] ^= mask
        return before, int(ints[element])


def choose(parts: Sequence[Part], seed: int, step: int, rank: int) -> tuple[int, int, int]:
    """(part index, element, bit): deterministic for (seed, step, rank) and the parts."""
    sizes = [t.numel() for _, t in parts]
    total = sum(sizes)
    if total == 0:
        raise WorkerError("bitflip: no tensor of the chosen kind has an element to flip")
    rng = random.Random(f"bitflip/{seed}/{step}/{rank}")  # str seeds are stable across runs
    pick = rng.randrange(total)
    for index, size in enumerate(sizes):
        if pick < size:
            bits = parts[index][1].element_size() * 8
            return index, pick, rng.randrange(bits)
        pick -= size
    raise AssertionError("unreachable: pick < total")


def kind_parts(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
               target: str) -> list[Part]:
    """The tensors a ``target`` may flip, in ``worker.sdc.state_parts`` order."""
    parts = state_parts(model, optimizer, grads=target == "grad",
                        optimizer_state=target == "optim")
    return [(n, t) for n, t in parts if n.startswith(f"{target}:")]


class Injector:
    """Arms ``Faults``' ``bitflip`` on an optimizer; ``next_step`` says which step the
    session will report next. ``faults`` may be swapped between steps (the campaign)."""

    def __init__(self, faults: Faults, next_step: Callable[[], int]) -> None:
        self.faults = faults
        self.next_step = next_step
        self.flips: list[Flip] = []
        self._model: torch.nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._handles: list[Any] = []
        self._rested: set[int] = set()  # the steps flipped at rest already

    def install(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        self._model, self._optimizer = model, optimizer
        if optimizer is None or self._handles:
            return
        self._handles = [optimizer.register_step_pre_hook(lambda *_: self._fire(pre=True)),
                         optimizer.register_step_post_hook(lambda *_: self._fire(pre=False)),
                         model.register_forward_pre_hook(lambda *_: self._fire_at_rest())]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _fire(self, *, pre: bool) -> None:
        fault = self.faults.fault
        step = self.next_step()
        if fault is None or fault.when != "step" or not self.faults.armed("bitflip", step):
            return
        if (fault.target == "grad") == pre:
            self._flip(step, fault.target, fault.seed)

    def _fire_at_rest(self) -> None:
        fault = self.faults.fault
        step = self.next_step()
        if fault is None or fault.when != "rest" or step in self._rested \
                or not self.faults.armed("bitflip", step):
            return
        self._rested.add(step)  # one flip per step, however many forwards it runs
        self._flip(step, fault.target, fault.seed)

    def _flip(self, step: int, target: str, seed: int) -> None:
        if self._model is None:
            return
        parts = kind_parts(self._model, self._optimizer, target)
        index, element, bit = choose(parts, seed, step, self.faults.rank)
        before, after = flip_bit(parts[index][1], element, bit)
        self.flips.append(Flip(step, self.faults.rank, target, parts[index][0], element,
                               bit, before, after))
