"""The controller's checkpoint decisions as pure functions."""

from __future__ import annotations

import math

from controller.checkpoints import (
    AutoInterval,
    Staged,
    interval_decision,
    missing_shards,
    resume_env,
)
from events.model import CheckpointStaged, Header
from events.sdcenv import SdcReplay
from events.state import Checkpoint, RunState, Status, Suspicion
from events.workerenv import CheckpointEnv
from tests.events.builders import Ev, members

RUN = "run-1"
EV = Ev(RUN, producer="w")


def state(**kw: object) -> RunState:
    base = RunState(run_id=RUN, status=Status.RUNNING, spec_digest="s", principal="p",
                    world_size=2, dataset_id=None, submitted_at=0, updated_at=0, generation=1,
                    members=members("r0", "r1"))
    return RunState(**{**{f: getattr(base, f) for f in base.__slots__}, **kw})  # type: ignore[arg-type]


def header_for(eid: str, cause: str | None) -> Header:
    """The controller's header maker, as ``interval_decision`` is given it."""
    return EV.h(1, 0, event_id=eid, producer="controller", causation_id=cause)


def staged(step: int, at_ms: int, stall_ms: float) -> CheckpointStaged:
    return EV.staged(1, step, mode="sync", stall_ms=stall_ms, bytes=1, backlog=0, at=at_ms,
                     event_id=f"s{step}")


def test_young_interval_in_steps_from_the_measured_stall_and_step_time() -> None:
    auto = AutoInterval(mtbf_prior_s=3600.0, measured_cost_s=None, initial_interval_steps=100)
    # 100 steps took 52 s, 2 s of which was the previous checkpoint's stall: 0.5 s a step
    change = interval_decision(auto, state(), Staged(100, 0, 2000.0, 1),
                               staged(200, 52_000, 2000.0), header_for)
    assert change is not None
    expected_s = math.sqrt(2 * 2.0 * 3600.0)  # 120 s
    assert math.isclose(change.interval_s or 0, expected_s)
    assert change.interval_steps == round(expected_s / 0.5) == 240
    assert change.mtbf_source == "prior" and change.cost_s == 2.0


def test_observed_failures_replace_the_prior_and_small_changes_are_not_facts() -> None:
    auto = AutoInterval(mtbf_prior_s=3600.0, measured_cost_s=1.0, initial_interval_steps=100)
    st = state(failure_count=4, submitted_at=0)
    change = interval_decision(auto, st, Staged(10, 0, 0.0, 1), staged(20, 4_000_000, 0.0),
                               header_for)
    assert change is not None and change.mtbf_source == "observed"
    assert change.mtbf_s == 1_000_000 / 1000  # 4000 s over 4 failures
    same = interval_decision(auto, state(checkpoint_interval_steps=change.interval_steps),
                             Staged(10, 0, 0.0, 1), staged(20, 4_000_000, 0.0), header_for)
    assert same is None or abs(same.interval_steps - change.interval_steps) >= 1


def test_no_decision_without_a_previous_checkpoint_to_time_steps() -> None:
    auto = AutoInterval(mtbf_prior_s=3600.0, measured_cost_s=None, initial_interval_steps=100)
    assert interval_decision(auto, state(), None, staged(5, 1000, 10.0), header_for) is None


def test_a_staging_of_another_generation_times_no_steps() -> None:
    """Generation 1 staged step 100 and failed; generation 2 resumed from there and staged
    step 200 a long outage later. The time between holds the outage (and any steps trained
    again), not 100 steps: an interval from it would be far too short. Only the next
    staging of generation 2 measures its steps."""
    auto = AutoInterval(mtbf_prior_s=3600.0, measured_cost_s=None, initial_interval_steps=100)
    after_restart = EV.staged(2, 200, mode="sync", stall_ms=2000.0, bytes=1, backlog=0,
                              at=600_000, event_id="g2s200")
    assert interval_decision(auto, state(generation=2), Staged(100, 0, 2000.0, 1),
                             after_restart, header_for) is None
    same = interval_decision(auto, state(generation=2), Staged(100, 548_000, 2000.0, 2),
                             after_restart, header_for)
    assert same is not None and same.interval_steps == 240  # 0.5 s a step, as above


def test_missing_shards_names_members_without_a_report() -> None:
    e = EV.proposed(1, 8, at=1, event_id="e", manifest_path="m", manifest_digest="d",
                    dataset_id=None)
    assert missing_shards(state(), {(1, 8): frozenset({"r1"})}, e) == ["r0"]
    assert missing_shards(state(), {(1, 8): frozenset({"r0", "r1"})}, e) == []
    assert missing_shards(state(), {(0, 8): frozenset({"r0", "r1"})}, e) == ["r0", "r1"]


def test_resume_env_lists_committed_checkpoints_newest_first_within_the_window() -> None:
    ckpts = tuple(Checkpoint(s, f"m{s}", f"d{s}", 1, s) for s in (4, 8, 12, 16))
    env = resume_env(CheckpointEnv(rollback_window=3), state(checkpoints=ckpts,
                                                             checkpoint_interval_steps=7))
    back = CheckpointEnv.from_environ(env)
    assert back.candidates == ((16, "m16", "d16"), (12, "m12", "d12"), (8, "m8", "d8"))
    assert back.interval_steps == 7
    assert back.failure_domain == "process"  # a crash: every tier survives it
    assert resume_env(None, state()) == {}
    # After a host loss the restore must survive it (worker.tiers skips that host's tier).
    lost = resume_env(CheckpointEnv(), state(checkpoints=ckpts), "host")
    assert CheckpointEnv.from_environ(lost).failure_domain == "host"


def test_resume_env_names_the_step_to_replay_while_a_suspicion_is_open() -> None:
    open_ = Suspicion(step=12, generation=3, detector="agreement", ranks=(1,),
                      fingerprints=("aa", "bb"), nodes=("n1", "n2"), part="params")
    for settings in (CheckpointEnv(), None):
        env = resume_env(settings, state(suspicion=open_))
        assert SdcReplay.from_environ(env) == SdcReplay(step=12, generation=3,
                                                        fingerprints=("aa", "bb"), ranks=(1,))
        assert SdcReplay.from_environ(resume_env(settings, state())) is None
    assert CheckpointEnv.from_environ(resume_env(CheckpointEnv(), state(suspicion=open_)))
