"""``runledger.demo.setup``: the demo's options and the run spec it writes.

The demo itself runs end to end in ``tests/e2e/test_demo.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from controller.spec.parts import FixedCheckpoint
from controller.spec.runspec import parse_spec
from runledger.demo.setup import ALIAS, DemoOptions, Layout, fault_for, write_spec
from worker.faults import parse


def test_the_options_put_the_kill_between_two_checkpoints() -> None:
    assert DemoOptions().problems() == []
    assert DemoOptions().resume_step == 20  # killed after step 25, checkpoints every 10
    (on_checkpoint,) = DemoOptions(kill_step=30).problems()
    assert "between two checkpoints" in on_checkpoint
    (too_early,) = DemoOptions(kill_step=5).problems()
    assert "after the first checkpoint" in too_early
    assert len(DemoOptions(step_sleep_s=-1, timeout_s=0).problems()) == 2


def test_the_spec_is_valid_and_the_fault_hits_rank_1_of_generation_1_once(
        tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    opts = DemoOptions(steps=30, interval=4, kill_step=9)
    domain = write_spec(layout, opts)
    text = layout.spec.read_text()
    assert f"dataset: {ALIAS}" in text  # submit resolves the alias
    pinned = "sha256:" + "ab" * 32
    spec = parse_spec(text, str(layout.spec), resolve_dataset={ALIAS: pinned}.__getitem__)
    assert spec.dataset == pinned
    assert spec.world_size == 2 and spec.topology.domain == domain
    assert isinstance(spec.checkpoint, FixedCheckpoint) and spec.checkpoint.interval_steps == 4
    assert spec.checkpoint.root == str(layout.checkpoints)
    assert spec.command[0] == sys.executable and spec.env["OMP_NUM_THREADS"] == "1"
    fault = parse(fault_for(opts))
    assert fault is not None
    assert (fault.point, fault.step, fault.rank, fault.generation) == ("step", 9, 1, 1)
