"""rehearse/trialplan.py: a trial spec is the user's, small, short, labelled, and valid."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from controller.spec.runspec import NAME_MAX, RunSpec, parse_spec
from runledger.rehearse import trialplan as tp
from runledger.rehearse.trialplan import Trial, TrialPlanError

TINY = Path(__file__).resolve().parents[3] / "examples" / "tiny.yaml"
DATASET = "sha256:" + "cd" * 32


def tiny(**changes: Any) -> RunSpec:
    doc = yaml.safe_load(TINY.read_text())
    doc["dataset"] = DATASET  # pinned, as load_spec with the catalog leaves it
    doc.update(copy.deepcopy(changes))
    return parse_spec(yaml.safe_dump(doc), "tiny.yaml", base_dir=TINY.parent)


BASE = json.loads(tiny().canonical_json())


def test_the_pilot_of_tiny_is_short_small_and_checkpoints_at_least_twice() -> None:
    spec = tiny()
    fault = {tp.FAULT_ENV: tp.first_commit_fault(12)}
    out = tp.derive(spec, Trial("pilot", steps=12, replicas=1, env=fault))
    assert out.name == "tiny-pilot"
    assert out.model == {**spec.model, "steps": 12}
    assert out.model_digest != spec.model_digest
    assert out.topology.replicas == 1
    assert out.checkpoint.policy == "fixed" and out.checkpoint.interval_steps == 4
    assert out.checkpoint.root == spec.checkpoint.root  # storage kept
    assert out.env == {"RUNLEDGER_FAULT": "after_commit@4:gen=1"}
    # everything else is the user's spec
    keep = ("code_version", "command", "code", "dataset", "resume", "rpo_s", "rto_s", "retry",
            "heartbeat", "cancel_authority")
    assert {k: getattr(out, k) for k in keep} == {k: getattr(spec, k) for k in keep}
    assert out.digest() != spec.digest()


def test_a_spec_without_model_steps_cannot_be_shortened_and_says_which_field() -> None:
    spec = tiny(model={"dim": 32})
    with pytest.raises(TrialPlanError, match=r"^model\.steps: spec tiny has none"):
        tp.derive(spec, Trial("pilot", steps=6, replicas=1))
    with pytest.raises(TrialPlanError, match="has 'ten', not a positive integer"):
        tp.spec_steps(tiny(model={"steps": "ten"}))


def test_a_trial_never_runs_longer_than_the_job() -> None:
    out = tp.derive(tiny(model={"steps": 5}), Trial("pilot", steps=50, replicas=2))
    assert out.model["steps"] == 5 and out.checkpoint.interval_steps == 1


def test_an_auto_policy_becomes_fixed_and_gates_are_stripped() -> None:
    spec = tiny(checkpoint={"policy": "auto", "mtbf_prior_s": 3600.0, "root": "/tmp/rl/c"})
    out = tp.derive(spec, Trial("drill-kill", steps=9, replicas=1))
    assert out.checkpoint.policy == "fixed" and out.checkpoint.interval_steps == 3
    assert out.name == "tiny-drill-kill"
    # a `gates` key (added by the admission gates) is removed before validation
    doc = json.loads(tiny().canonical_json())
    doc["gates"] = ["pilot"]
    out = tp.derive_json(json.dumps(doc), Trial("pilot", 6, 1))
    assert "gates" not in json.loads(out.canonical_json())


def test_an_elastic_spec_gets_its_range_and_heartbeats_shorten() -> None:
    spec = tiny(membership={"kind": "elastic", "min": 1, "max": 4}, topology={
        "replicas": 2, "slots_per_node": 2}, alerts={"progress_stall_s": 50.0})
    assert tp.default_replicas(spec) == 1
    out = tp.derive(spec, Trial("pilot", 6, 1))
    assert (out.membership.min, out.membership.max) == (1, 1)
    out = tp.derive(spec, Trial("drill-grow", 6, 1, elastic=(1, 2), timeout_s=3.0,
                                stall_timeout_s=8.0))
    assert (out.membership.min, out.membership.max) == (1, 2)
    assert (out.heartbeat.timeout_s, out.heartbeat.stall_timeout_s) == (3.0, 8.0)
    assert out.alerts.progress_stall_s == 4.0  # the user's 50 s would exceed the stall


def test_a_trial_the_spec_cannot_take_is_refused_with_the_field() -> None:
    with pytest.raises(TrialPlanError, match=r"topology\.replicas"):
        tp.derive(tiny(), Trial("pilot", 6, replicas=0))
    with pytest.raises(TrialPlanError, match="--steps 1"):
        tp.derive(tiny(), Trial("pilot", 1, replicas=1))
    with pytest.raises(TrialPlanError, match=r"^model\.steps 1: a trial needs at least 2"):
        tp.derive(tiny(model={"steps": 1}), Trial("pilot", 12, replicas=1))


@given(own=st.integers(2, 5000), asked=st.integers(2, 5000), replicas=st.integers(1, 2))
def test_any_trial_length_validates_and_commits_twice(own: int, asked: int,
                                                      replicas: int) -> None:
    doc = {**BASE, "model": {"steps": own, "dim": 8}, "model_digest": ""}
    out = tp.derive_json(json.dumps(doc), Trial("pilot", asked, replicas))
    steps = out.model["steps"]
    assert steps == min(own, asked) and out.model["dim"] == 8
    assert out.checkpoint.policy == "fixed"
    assert steps // out.checkpoint.interval_steps >= 2
    assert out.topology.replicas == replicas == out.world_size


@given(name=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,70}", fullmatch=True),
       label=st.sampled_from(["pilot", "drill-kill_compute", "drill-stale"]))
def test_trial_names_are_valid_names_ending_in_the_label(name: str, label: str) -> None:
    out = tp.trial_name(name, label)
    assert out.endswith(f"-{label}") and len(out) <= NAME_MAX
    assert out[0].isalnum()


@given(steps=st.integers(2, 10_000))
def test_the_interval_yields_two_commits_and_the_fault_follows_the_first(steps: int) -> None:
    interval = tp.interval_for(steps)
    assert steps // interval >= 2
    assert tp.first_commit_fault(steps) == f"after_commit@{interval}:gen=1"

