"""worker/rng.py: every random stream captured and restored in process.

The streams through a checkpoint round trip are tests/worker/test_commit.py.
"""

from __future__ import annotations

import random

import torch

from tests.worker import support
from worker import rng


def test_rng_restore_in_process() -> None:
    support.reseed(3)
    captured = rng.capture()
    expected = support.draws()
    support.draws()
    support.reseed(4)
    rng.restore(captured)
    got = support.draws()
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]
    # Lists where tuples were (a state that went through JSON-like storage) are accepted.
    as_lists = dict(captured, python=[captured["python"][0], list(captured["python"][1]),
                                      captured["python"][2]])
    rng.restore(as_lists)
    assert random.random() == expected[1]
