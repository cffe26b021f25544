"""What a checkpoint holds of a training job: the attached components and their state.

The model and the optimizer go through torch.distributed.checkpoint's
``get_state_dict``/``set_state_dict`` (which handle sharded and wrapped
modules); the scheduler and the scaler are any ``Stateful``
(``state_dict``/``load_state_dict``: an LR scheduler, a ``GradScaler``). The
loader is a ``Loader``: ``dataplane.loader.DataLoader``, or anything with its
durable-cursor contract. Each rank adds its own RNG streams under
``rng.rank<r>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from dataplane.manifest import DatasetManifest
from dataplane.state import Cursor
from worker import rng


# Not declared as a subclass of ``Stateful``, though it is one structurally:
# ``isinstance(x, Stateful)`` (DCP asks it of every state value) walks the
# subclasses, and a protocol with a data member there makes it raise TypeError.
class Loader(Protocol):
    """What the session needs of a data loader (``dataplane.loader.DataLoader`` is one).

    Its ``state_dict`` is the durable cursor, which moves only on ``commit``: the
    session commits a batch's cursor once the checkpoint holding it is committed.
    """

    @property
    def manifest(self) -> DatasetManifest: ...

    def commit(self, cursor: Cursor) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def rng_key(rank: int) -> str:
    """Where rank ``rank``'s RNG streams are in a checkpoint's state."""
    return f"rng.rank{rank}"


@dataclass(frozen=True, slots=True)
class TrainState:
    """The components ``Session.attach`` was given."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer | None = None
    scheduler: Stateful | None = None
    scaler: Stateful | None = None
    loader: Loader | None = None

    def state_dict(self, rank: int) -> dict[str, Any]:
        """This rank's checkpoint state: model, optimizer, scheduler, scaler, RNG."""
        state: dict[str, Any] = {}
        if self.optimizer is not None:
            msd, osd = get_state_dict(self.model, [self.optimizer])
            state["model"], state["optim"] = msd, osd
        else:
            state["model"] = get_model_state_dict(self.model)
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        state[rng_key(rank)] = rng.capture()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load what ``state_dict`` captured, RNG streams excepted (the session
        restores or seeds those, depending on whether the checkpoint had this rank)."""
        if self.optimizer is not None:
            set_state_dict(self.model, [self.optimizer], model_state_dict=state["model"],
                           optim_state_dict=state["optim"])
        else:
            set_model_state_dict(self.model, state["model"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])

    def model_keys(self) -> list[str]:
        """The state keys a checkpoint must cover for the model to be restorable."""
        return [f"model.{k}" for k in get_model_state_dict(self.model)]

    def mixture_targets(self) -> dict[str, float] | None:
        """The loader's normalized mixture weights; ``None`` without a loader."""
        if self.loader is None:
            return None
        fractions = self.loader.manifest.mixture.fractions()
        return {name: float(w) for name, w in sorted(fractions.items())}
