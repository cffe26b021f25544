"""Every random stream a training rank uses, captured and restored.

Python's ``random``, NumPy's legacy global generator, torch's CPU generator
and, when CUDA is present, every CUDA device's generator. A resumed run must
draw the same numbers an uninterrupted one would (dropout masks, sampling),
which is what makes the loss trace after a resume bitwise identical.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    random.setstate(_tuple(state["python"]))
    np.random.set_state(_tuple(state["numpy"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _tuple(value: Any) -> Any:
    # A stored state may come back with lists where tuples were (pickling keeps
    # tuples, but be strict about the shape the setters want).
    if isinstance(value, list):
        return tuple(_tuple(v) for v in value)
    return value


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)
