"""The automatic interval's rule as the simulator's truth states it (proof.cadence): a worked
example, and agreement with the controller's decision over random stagings."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.checkpoints import AutoInterval, Staged, interval_decision
from events.model import CheckpointStaged, Header
from events.state import RunState, Status
from proof.cadence import Change, expected

RUN = "r"


def staging(gen: int, step: int, at: int, stall_ms: float) -> CheckpointStaged:
    return CheckpointStaged(header=Header(f"g{gen}s{step}", RUN, gen, at, "w"), step=step,
                            mode="sync", stall_ms=stall_ms, waited_ms=0.0, bytes=1, backlog=0)


def state(failures: int = 0, interval: int | None = None, submitted: int = 0) -> RunState:
    return RunState(run_id=RUN, status=Status.RUNNING, spec_digest="s", principal="p",
                    world_size=2, dataset_id=None, submitted_at=submitted, updated_at=0,
                    failure_count=failures, checkpoint_interval_steps=interval)


AUTO = AutoInterval(mtbf_prior_s=3600.0, measured_cost_s=None, initial_interval_steps=100)


def test_youngs_interval_in_steps_only_between_two_stagings_of_one_generation() -> None:
    before, now = staging(1, 100, 0, 2000.0), staging(1, 200, 52_000, 2000.0)
    # 100 steps in 52 s less the 2 s stall: 0.5 s a step; T = sqrt(2 * 2 * 3600) = 120 s
    assert expected(AUTO, state(), before, now) == Change(240, 2.0, 3600.0, "prior")
    assert expected(AUTO, state(), staging(0, 100, 0, 2000.0), now) is None  # a restart
    assert expected(AUTO, state(), None, now) is None
    assert expected(AUTO, state(), now, now) is None  # the same step twice
    assert expected(AUTO, state(interval=230), before, now) is None  # within a tenth
    observed = expected(AUTO, state(failures=4, submitted=-3_948_000), before, now)
    assert observed == Change(round(math.sqrt(2 * 2.0 * 1000.0) / 0.5), 2.0, 1000.0,
                              "observed")


@settings(max_examples=300, deadline=None)
@given(gen=st.integers(1, 3), other=st.integers(1, 3), step=st.integers(1, 1000),
       steps=st.integers(-2, 500), elapsed=st.integers(0, 10**7),
       stall=st.floats(0.0, 5e6, allow_nan=False), cost=st.none() | st.floats(0.001, 100.0),
       failures=st.integers(0, 50), interval=st.none() | st.integers(1, 10_000))
def test_the_rule_agrees_with_the_controllers_decision(
        gen: int, other: int, step: int, steps: int, elapsed: int, stall: float,
        cost: float | None, failures: int, interval: int | None) -> None:
    auto = AutoInterval(mtbf_prior_s=600.0, measured_cost_s=cost, initial_interval_steps=50)
    s = state(failures, interval)
    before = staging(other, step, 1_000, stall)
    now = staging(gen, step + steps, 1_000 + elapsed, stall)
    made = interval_decision(auto, s, Staged(before.step, 1_000, stall, other), now,
                             lambda eid, cause: Header(eid, RUN, gen, 1_000 + elapsed, "c", cause))
    got = None if made is None else Change(made.interval_steps, made.cost_s, made.mtbf_s,
                                           made.mtbf_source)
    assert got == expected(auto, s, before, now)
    if gen != other:
        assert got is None
