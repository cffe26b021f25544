"""A flip campaign through the real detectors in a real 2-process gloo group
(bench/sdc_campaign.py, which the benchmark runs with 1,000 flips): every single-bit flip
that changes a replica's state is caught by cross-replica agreement at the step it
happened, no checkpoint holds corrupted state, and after the rollbacks the run ends on
the parameters of a run without flips, bitwise; the verdict on each suspicion, from the
replay of its step, is ``transient`` on the flipped rank alone, for flips within the step
and flips at rest between steps (``--rest``).
"""

from __future__ import annotations

from pathlib import Path

from bench.sdc_campaign import Config, plan, run_campaign
from worker.faults import TARGETS

FLIPS = 200
REST_FLIPS = 40


def test_every_state_changing_flip_is_caught_at_its_step_and_the_run_ends_clean(
        tmp_path: Path) -> None:
    cfg = Config(flips=FLIPS, seed=17)
    res = run_campaign(cfg, tmp_path, timeout_s=600)
    assert res["finished"], f"the campaign did not reach its last step: {res}"
    assert res["flips"] == FLIPS  # every planned flip was injected, once
    assert all(res["by_kind"][t]["flips"] > FLIPS // 6 for t in TARGETS)
    assert res["changed"] > 0
    assert res["misses"] == [], f"flips that changed state and went unseen: {res['misses']}"
    assert res["share_detected"] == 1.0
    assert res["false_alarms"] == []
    # gradients are fingerprinted: a gradient flip the update rounded away is caught too
    assert res["rollbacks"] == res["detected"] + res["unchanged_detected"] == FLIPS
    assert res["checkpoints"] >= plan(cfg)[0] // cfg.every
    assert res["corrupted_checkpoints"] == 0
    assert res["final_equal"], "the run did not end on the reference parameters"
    # every suspicion's verdict, from its replay, blames the flipped rank alone
    assert res["blamed_flipped_rank"] == FLIPS, res["verdicts"]


def test_a_flip_at_rest_is_caught_at_its_step_and_blamed_on_the_flipped_rank(
        tmp_path: Path) -> None:
    cfg = Config(flips=REST_FLIPS, seed=5, rest=True)
    res = run_campaign(cfg, tmp_path, timeout_s=600)
    assert res["finished"] and res["flips"] == REST_FLIPS
    assert res["misses"] == [] and res["false_alarms"] == []
    assert res["by_kind"]["param"]["flips"] > 0 and res["by_kind"]["optim"]["flips"] > 0
    assert res["blamed_flipped_rank"] == REST_FLIPS, res["verdicts"]
    # What each rank held after the update alone: a parameter corrupted at rest fed its
    # rank's gradient, which the all-reduce averaged into the other replica.
    assert res["blind_verdicts_by_kind"]["param"].get("nondeterministic", 0) > 0
    assert res["final_equal"]
