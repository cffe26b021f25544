"""dataplane.planahead: the order planned in a child process is the loader's own, bit for bit.

Real shard files, a real ``python -m dataplane.planahead`` child, the real loader.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataplane.errors import DataPlaneError, SourceExhausted
from dataplane.loader import DataLoader, LoaderConfig
from dataplane.manifest import DatasetManifest
from dataplane.order import OrderState, Planner
from dataplane.planahead import START_AFTER, PlanAhead
from dataplane.store import ObjectStore
from tests.dataplane.corpus import lengths_for, write_dataset

MIXTURES = {
    "exact tokens": {"weights": {"a": 0.5, "b": 0.3, "c": 0.2}, "unit": "tokens",
                     "mode": "exact"},
    "expected documents, with replacement": {"weights": {"a": 1, "b": 2, "c": 1},
                                             "unit": "documents", "mode": "expected",
                                             "replacement": True},
}


def corpus(root: Path, mixture: dict[str, Any], seed: int = 3) -> DatasetManifest:
    objects = lengths_for(np.random.default_rng(seed),
                          {"a": (2, 30, 40), "b": (1, 20, 100), "c": (3, 10, 12)})
    return write_dataset(root, objects, mixture=mixture,
                         packing={"mode": "concat", "seq_len": 16},
                         transforms=[{"kind": "crop", "max_tokens": 60, "mode": "random"}])


def planner(manifest: DatasetManifest) -> Planner:
    # The Python planner: the child is what runs when the compiled loop is not built.
    return Planner(manifest, 5, ObjectStore(manifest, verify="size").length, compiled=False)


def plans(source: Planner | PlanAhead, st: OrderState, batches: int, size: int
          ) -> tuple[list[Any], OrderState]:
    out = []
    for _ in range(batches):
        planned = source.plan_batch(st, size)
        assert planned is not None
        out.append(planned[0])
        st = planned[1]
    return out, st


@pytest.mark.parametrize("mixture", list(MIXTURES))
def test_the_child_plans_what_the_loaders_planner_plans(tmp_path: Path, mixture: str) -> None:
    manifest = corpus(tmp_path, MIXTURES[mixture])
    alone = planner(manifest)
    ahead = PlanAhead(planner(manifest), 4, verify="size", start_after=1)
    try:
        want, end = plans(alone, alone.initial(), 60, 4)
        got, end_ahead = plans(ahead, alone.initial(), 60, 4)
        assert got == want and end_ahead == end
        assert ahead.received == 59  # every batch after the first came from the child
        # A seek (a resume from batch 10): planned here, then the child's again.
        _, at_10 = plans(alone, alone.initial(), 10, 4)
        again, _ = plans(ahead, at_10, 20, 4)
        assert again == want[10:30] and ahead.received == 59 + 19
        # Another batch size is planned here, and the same.
        other = ahead.plan_batch(alone.initial(), 3)
        assert other == alone.plan_batch(alone.initial(), 3)
    finally:
        ahead.close()


def test_a_child_starts_only_once_a_stream_goes_on(tmp_path: Path) -> None:
    manifest = corpus(tmp_path, MIXTURES["exact tokens"])
    ahead = PlanAhead(planner(manifest), 4, verify="size")
    try:
        st = ahead.planner.initial()
        _, st = plans(ahead, st, START_AFTER - 1, 4)
        assert ahead._child is None  # a short loader (a test, a probe) never starts one
        _, st = plans(ahead, st, 1 + 5, 4)
        assert ahead._child is not None and ahead.received == 5
    finally:
        ahead.close()
    assert ahead._child is None


def test_the_planners_error_is_raised_at_the_same_batch_as_itself(tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path, {"a": [[3] * 4], "b": [[3] * 40]},
                             mixture={"weights": {"a": 1, "b": 1}, "unit": "documents",
                                      "exhaustion": "error"},
                             packing={"mode": "none", "seq_len": 8})
    alone = planner(manifest)
    with pytest.raises(SourceExhausted) as here:
        plans(alone, alone.initial(), 100, 1)
    ahead = PlanAhead(planner(manifest), 1, verify="size", start_after=1)
    try:
        with pytest.raises(SourceExhausted) as there:
            plans(ahead, alone.initial(), 100, 1)
        assert ahead.received == 7  # batches 2..8 came from the child, the 9th raised
    finally:
        ahead.close()
    assert str(there.value) == str(here.value)
    assert (there.value.source, there.value.epoch) == (here.value.source, here.value.epoch)


def test_a_child_that_dies_is_named_not_waited_on(tmp_path: Path) -> None:
    manifest = corpus(tmp_path, MIXTURES["exact tokens"])
    ahead = PlanAhead(planner(manifest), 4, verify="size", start_after=1)
    try:
        _, st = plans(ahead, ahead.planner.initial(), 2, 4)
        assert ahead._child is not None
        os.kill(ahead._child.pid, signal.SIGKILL)
        ahead._child.wait()
        with pytest.raises(DataPlaneError, match=r"planning process ended without a plan "
                           r"\(exit code -9"):
            # What it sent before it died (a pipe holds a hundred small plans), then the end.
            plans(ahead, st, 10**6, 4)
    finally:
        ahead.close()


def test_the_loader_hands_out_the_same_batches_either_way(tmp_path: Path) -> None:
    """With the Python planner (an install without the compiled loop) the child plans;
    the batches are the same as planned on the loader's thread, and as the compiled
    loop's, which never starts a child."""
    manifest = corpus(tmp_path, MIXTURES["exact tokens"])

    def batches(plan_process: bool, state: Any = None, n: int = START_AFTER + 40,
                compiled: bool = False) -> list[Any]:
        config = LoaderConfig(seed=5, global_batch_size=4, workers=2, verify="size",
                              plan_process=plan_process, compiled_planner=compiled)
        with DataLoader(manifest, config) as dl:
            if state is not None:
                dl.load_state_dict(state)
            out = []
            for b in dl:
                out.append((b.index, b.samples, b.tokens.tobytes(), b.cursor.state_dict()))
                if len(out) == n:
                    assert dl.planner.compiled == compiled
                    child = plan_process and not compiled
                    assert isinstance(dl._plans, PlanAhead) == child
                    if child:
                        assert dl._plans.received > 0  # type: ignore[union-attr]
                    return out
        raise AssertionError("the stream ended early")

    here, there = batches(False), batches(True)
    assert there == here == batches(True, compiled=True)
    resumed = batches(True, state=here[19][3], n=START_AFTER + 20)
    assert resumed == here[20:]


def test_plan_process_and_compiled_planner_must_be_booleans() -> None:
    with pytest.raises(Exception, match="plan_process must be true or false"):
        LoaderConfig(seed=1, global_batch_size=2, plan_process="yes")  # type: ignore[arg-type]
    with pytest.raises(Exception, match="compiled_planner must be true or false"):
        LoaderConfig(seed=1, global_batch_size=2, compiled_planner=1)  # type: ignore[arg-type]
