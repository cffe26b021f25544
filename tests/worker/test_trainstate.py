"""The attached components' checkpoint state: what goes in, and loading it back (one
process, CPU, no process group)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.stateful import Stateful

from dataplane.manifest import DatasetManifest
from dataplane.state import Cursor
from tests.dataplane.corpus import write_dataset
from worker import rng
from worker.trainstate import TrainState, rng_key


class Counter:
    """A ``Stateful`` that is not a torch object: anything with the two methods attaches."""

    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.n = state_dict["n"]


class StubLoader:
    """A ``Loader`` with a real manifest and no data."""

    def __init__(self, manifest: DatasetManifest) -> None:
        self.manifest = manifest

    def commit(self, cursor: Cursor) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


def trained(seed: int) -> tuple[nn.Module, torch.optim.Optimizer,
                                torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    for _ in range(3):
        model(torch.randn(5, 4)).square().mean().backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    return model, opt, sched


def flat(value: Any) -> Any:
    """Nested state with tensors as lists, so two states compare with ``==``."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {k: flat(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [flat(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def test_stateful_checks_still_work_with_the_loader_protocol_declared() -> None:
    # DCP asks isinstance(value, Stateful) of every state value; a protocol with a
    # data member among Stateful's subclasses would make that raise.
    assert not isinstance(object(), Stateful)
    assert isinstance(Counter(), Stateful)
    assert isinstance(torch.optim.lr_scheduler.LambdaLR(
        torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1), lambda s: 1.0), Stateful)


def test_state_holds_every_attached_component_and_this_ranks_rng() -> None:
    model, opt, sched = trained(0)
    scaler = Counter()
    state = TrainState(model, opt, sched, scaler).state_dict(rank=3)
    assert set(state) == {"model", "optim", "scheduler", "scaler", "rng.rank3"}
    assert rng_key(3) == "rng.rank3"
    assert flat(state["model"]) == flat(model.state_dict())
    assert state["scheduler"]["last_epoch"] == 3
    assert state["scaler"] == {"n": 0}
    bare = TrainState(model).state_dict(rank=0)
    assert set(bare) == {"model", "rng.rank0"}


def test_loading_a_state_restores_model_optimizer_scheduler_and_scaler() -> None:
    model, opt, sched = trained(0)
    scaler = Counter()
    scaler.n = 7
    saved = flat(TrainState(model, opt, sched, scaler).state_dict(rank=0))
    other_model, other_opt, other_sched = trained(1)
    other_scaler = Counter()
    other = TrainState(other_model, other_opt, other_sched, other_scaler)
    assert flat(other.state_dict(rank=0))["model"] != saved["model"]
    source = TrainState(model, opt, sched, scaler).state_dict(rank=0)
    other.load_state_dict(source)
    loaded = flat(other.state_dict(rank=0))
    for key in ("model", "optim", "scheduler", "scaler"):
        assert loaded[key] == saved[key], key
    assert other_scaler.n == 7


def test_state_dict_does_not_consume_randomness_and_captures_it() -> None:
    model, _, _ = trained(0)
    rng.seed_all(11)
    state = TrainState(model).state_dict(rank=0)
    after = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    rng.restore(state["rng.rank0"])
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == after


def test_model_keys_name_every_model_entry() -> None:
    model, opt, _ = trained(0)
    keys = TrainState(model, opt).model_keys()
    assert keys == [f"model.{k}" for k in model.state_dict()]
    assert len(keys) == 4


@pytest.mark.parametrize("weights", [{"a": 0.5, "b": 0.3, "c": 0.2}, {"b": 3.0, "a": 1.0}])
def test_mixture_targets_are_the_loaders_normalized_weights(tmp_path: Path,
                                                           weights: dict[str, float]) -> None:
    objects = {name: [[8, 8]] for name in sorted(weights)}
    manifest = write_dataset(tmp_path, objects, mixture={"weights": weights, "mode": "exact"},
                             write=False)
    model, _, _ = trained(0)
    targets = TrainState(model, loader=StubLoader(manifest)).mixture_targets()
    total = sum(weights.values())
    assert targets is not None and list(targets) == sorted(weights)
    assert targets == pytest.approx({k: w / total for k, w in weights.items()})
    assert all(isinstance(v, float) for v in targets.values())
    assert TrainState(model).mixture_targets() is None
