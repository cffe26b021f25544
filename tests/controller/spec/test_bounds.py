"""Every numeric spec field has a range: each bound is accepted, a value past it is refused
naming the field, the value and the range; docs/run-spec.md documents the same table; and for
any spec inside the ranges, every number the controller derives fits its Avro type."""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.admission import PLACEMENT_TOO_LARGE, Placement, place
from controller.checkpoints import Staged, interval_decision
from controller.errors import SpecError
from controller.inventory import Node
from controller.runplan import plan_from_submission
from controller.spec import bounds as b
from controller.spec.bounds import FIELDS, Range
from controller.spec.runspec import RunSpec, parse_spec_json
from events.codec import default_codec
from events.limits import RECORD_MAX_BYTES
from events.model import FailureClassified, RunAdmitted
from events.placement import PLACEMENT_MAX_BYTES
from events.workerenv import parse_interval
from tests.controller.spec.test_runspec import MINIMAL, problems_of, spec_of, with_
from tests.controller.test_checkpoints import header_for, staged, state
from tests.events.builders import Ev

ROOT = Path(__file__).resolve().parents[3]
CODEC = default_codec()
LONG_MAX = 2**63 - 1
AUTO = {"policy": "auto", "mtbf_prior_s": 21_600.0}


def doc_with(path: str, value: Any) -> dict[str, Any]:
    """MINIMAL with ``path`` set to ``value`` and whatever that field needs around it."""
    if path.startswith("membership."):
        end = path.rsplit(".", 1)[1]
        other = {"min": 1} if end == "max" else {"max": b.MAX_WORLD_SIZE}
        return with_("membership", {"kind": "elastic", end: value, **other},
                     with_("topology.replicas", 1 if end == "max" else b.MAX_WORLD_SIZE))
    if path in ("checkpoint.mtbf_prior_s", "checkpoint.measured_cost_s",
                "checkpoint.initial_interval_steps"):
        return with_(path, value, with_("checkpoint", dict(AUTO)))
    return with_(path.replace("retry.*", "retry.hang"), value)


def outside(r: Range) -> list[float]:
    """A value just below and just above the range."""
    if isinstance(r.low, int) and isinstance(r.high, int):
        return [r.low - 1, r.high + 1]
    low = r.low if r.above else (r.low / 2 if r.low > 0 else -1.0)
    return [low, r.high if r.below else r.high * 1.5]


def inside(r: Range) -> list[float]:
    if isinstance(r.low, int) and isinstance(r.high, int):
        return [r.low, r.high]
    return [math.nextafter(r.low, math.inf) if r.above else r.low,
            math.nextafter(r.high, -math.inf) if r.below else r.high]


CASES = [(p.strip().replace("retry.*", "retry.hang"), r)
         for paths, r in FIELDS for p in paths.split(",")]


@pytest.mark.parametrize(("path", "rng"), CASES, ids=[p for p, _ in CASES])
def test_each_bound_holds_and_a_value_past_it_is_named(path: str, rng: Range) -> None:
    for value in outside(rng):
        problems = problems_of(doc_with(path, value))
        assert f"{path}: {value!r} is out of range: must be {rng.describe()}" in problems
    for value in inside(rng):
        # A neighbour's rule may object (a timeout at its bound leaves no room for the
        # stall timeout above it); this field's range may not.
        problems = problems_in(doc_with(path, value))
        assert not any(p.startswith(f"{path}: ") for p in problems), problems


def problems_in(doc: dict[str, Any]) -> list[str]:
    try:
        spec_of(doc)
    except SpecError as exc:
        return exc.problems
    return []


def test_the_issue_s_values_are_refused_with_their_range() -> None:
    for path, value in [("topology.replicas", 10**9), ("checkpoint.interval_steps", 10**30),
                        ("retry.hang.backoff_base_s", 1e300)]:
        [problem] = [p for p in problems_of(doc_with(path, value)) if p.startswith(path)]
        assert "out of range" in problem
    [problem] = problems_of(doc_with("checkpoint.mtbf_prior_s", 1e40))
    assert problem == ("checkpoint.mtbf_prior_s: 1e+40 is out of range: must be >= 1 and"
                       " <= 315576000 s (10 years)")
    [problem] = problems_of(with_("topology", {"replicas": 1024, "slots_per_node": 8,
                                               "ranks_per_replica": 256}))
    assert problem.startswith("topology: replicas 1024 x ranks_per_replica 256 = 262144 ranks")


def test_a_logged_spec_out_of_range_is_a_spec_error_not_a_crash() -> None:
    # An old log or a forged RunSubmitted: the controller reads spec_json with this.
    good = RunSpec.model_validate(MINIMAL).canonical_json()
    forged = good.replace('"interval_steps":100', '"interval_steps":1' + "0" * 30)
    with pytest.raises(SpecError, match=r"checkpoint\.interval_steps: .* out of range"):
        parse_spec_json(forged)
    plan = plan_from_submission(Ev("bad").submitted(spec_json=forged))
    assert "out of range" in plan.invalid


def test_the_readme_table_is_the_code_s_table() -> None:
    text = (ROOT / "docs" / "run-spec.md").read_text()
    section = text.split("## Run spec ranges", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| (`[^|]+`) \| ([^|]+) \|", section, flags=re.M)
    documented = {fields.strip(): rng.strip() for fields, rng in rows}
    expected = {", ".join(f"`{p.strip()}`" for p in paths.split(",")): r.describe()
                for paths, r in FIELDS}
    assert documented == expected


# --- everything derived from an accepted spec fits its Avro type -----------------------

def _num(r: Range, high: float | None = None) -> st.SearchStrategy[Any]:
    top = r.high if high is None else high
    if isinstance(r.low, int) and isinstance(r.high, int):
        return st.integers(r.low, int(top))
    return st.one_of(st.sampled_from(inside(Range(r.low, top, r.above, r.below))),
                     st.floats(r.low, top, exclude_min=r.above, exclude_max=r.below))


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(MINIMAL)
    ranks = draw(_num(b.WORLD))
    replicas = draw(_num(b.WORLD, b.MAX_WORLD_SIZE // ranks))
    doc["topology"] = {"replicas": replicas, "ranks_per_replica": ranks,
                       "slots_per_node": draw(_num(b.SLOTS))}
    interval = draw(_num(b.HEARTBEAT))
    timeout = draw(st.floats(interval, b.MAX_TIMEOUT_S - 1, exclude_min=True))
    stall = draw(st.floats(timeout, b.MAX_TIMEOUT_S, exclude_min=True))
    doc["heartbeat"] = {"interval_s": interval, "timeout_s": timeout, "stall_timeout_s": stall}
    base = draw(_num(b.BACKOFF))
    doc["retry"] = {"default": {"attempts": draw(_num(b.ATTEMPTS)), "backoff_base_s": base,
                                "backoff_cap_s": draw(st.floats(base, b.MAX_BACKOFF_S)),
                                "escalate_after": draw(_num(b.COUNT))}}
    doc["rpo_s"], doc["rto_s"] = draw(_num(b.DURATION)), draw(_num(b.DURATION))
    doc["budget"] = {"max_gpu_hours": draw(_num(b.GPU_HOURS)),
                     "max_wall_s": draw(_num(b.DURATION)),
                     "price_per_gpu_hour": draw(_num(b.PRICE))}
    keep_last = draw(_num(b.COUNT))
    common = {"keep_last": keep_last, "backlog": draw(_num(b.BACKLOG)),
              "rollback_window": draw(_num(b.ROLLBACK, min(keep_last, b.MAX_ROLLBACK)))}
    if draw(st.booleans()):
        doc["checkpoint"] = {"policy": "fixed", "interval_steps": draw(_num(b.STEPS)), **common}
    else:
        doc["checkpoint"] = {"policy": "auto", "mtbf_prior_s": draw(_num(b.MTBF)),
                             "measured_cost_s": draw(st.none() | _num(b.COST)),
                             "initial_interval_steps": draw(_num(b.STEPS)), **common}
    doc["alerts"] = {"progress_stall_s": draw(st.floats(b.MIN_SECONDS, stall, exclude_max=True)),
                     "straggler_ratio": draw(_num(b.RATIO)),
                     "checkpoint_lag_steps": draw(_num(b.STEPS)),
                     "repeated_failure": draw(_num(b.REPEATS))}
    return doc


def _fits(event: Any) -> None:
    CODEC.encode(event)  # the codec validates every long against the schema


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=specs(), cost_ms=_num(b.COST).map(lambda s: s * 1000),
       jump=st.integers(1, 2**62), elapsed_ms=st.integers(1, 10**13))
def test_every_number_derived_from_an_accepted_spec_fits_its_avro_type(
    doc: dict[str, Any], cost_ms: float, jump: int, elapsed_ms: int
) -> None:
    spec = RunSpec.model_validate(doc)
    ev = Ev(spec.name + "-0123456789")
    submitted = ev.submitted(spec_json=spec.canonical_json(), world_size=spec.world_size)
    _fits(submitted)
    plan = plan_from_submission(submitted)
    assert plan.invalid == ""
    for ms in (plan.heartbeat_interval_ms, plan.heartbeat_timeout_ms, plan.stall_timeout_ms,
               plan.start_timeout_ms, plan.alerts.progress_stall_ms):
        assert 1 <= ms <= LONG_MAX
    assert parse_interval(str(plan.heartbeat_interval_ms / 1000)) > 0  # what the agent reads
    for cls, policy in plan.retry.items():
        for attempt in (1, 2, policy.attempts + 1, 64, 10**9):
            _fits(FailureClassified(header=ev.h(1), failure_class=cls, signature=cls,
                                    action="restart", attempt=attempt, detail="",
                                    backoff_ms=policy.backoff_ms(attempt)))
    if plan.auto_interval is not None:
        auto = plan.auto_interval
        # The fastest and the slowest step times the reports can imply, with and without
        # an observed failure history.
        for st_ in (state(), state(failure_count=10**6, submitted_at=0)):
            for step, at in ((1 + jump, 1 + elapsed_ms), (2, LONG_MAX // 2)):
                change = interval_decision(auto, st_, Staged(1, 0, 0.0, 1),
                                           staged(step, at, cost_ms), header_for)
                if change is not None:
                    _fits(change)
                    assert 1 <= change.interval_steps <= b.MAX_STEPS
                    assert math.isfinite(change.interval_s or 0.0)


def test_the_largest_generation_fits_one_kafka_record() -> None:
    """MAX_WORLD_SIZE ranks on nodes of 8, named as a fleet names them, with the longest
    resume manifest path: admitted, and both facts that list them fit one record."""
    inv = [Node(f"node-{k:05d}", 8, f"rack-{k // 100:03d}", last_seen=0)
           for k in range(b.MAX_WORLD_SIZE // 8)]
    got = place(b.MAX_WORLD_SIZE, 8, None, inv, {})
    assert isinstance(got, Placement) and len(got.members) == b.MAX_WORLD_SIZE
    ev = Ev("big-0123456789")
    started = ev.generation_started(1, members=got.members, resume_step=LONG_MAX)
    started = dataclasses.replace(started, resume_manifest="m" * 4096)
    for event in (started, RunAdmitted(header=ev.h(), members=got.members)):
        assert len(CODEC.encode(event)) < RECORD_MAX_BYTES - 50_000


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 63), st.integers(1, 8), st.sampled_from([1, 8, 64]))
def test_admission_refuses_a_placement_whose_facts_would_not_fit(
        name_len: int, per_node: int, scale: int) -> None:
    """Whatever the names and the spread, a placement admission returns fits its
    GenerationStarted; one that would not is refused with the sizes, never appended."""
    world = min(b.MAX_WORLD_SIZE, per_node * 1024 * scale)
    nodes = -(-world // per_node)
    inv = [Node(f"{k:06d}".rjust(name_len, "n")[-max(name_len, 6):], per_node,
                "d" * name_len, last_seen=0) for k in range(nodes)]
    got = place(world, per_node, None, inv, {})
    if isinstance(got, Placement):
        event = Ev("big-0123456789").generation_started(1, members=got.members)
        assert len(CODEC.encode(event)) < RECORD_MAX_BYTES - 50_000
    else:
        assert got.reason.startswith(f"{PLACEMENT_TOO_LARGE}: {world} members on {nodes} nodes")
        assert f"over the {PLACEMENT_MAX_BYTES}" in got.reason
