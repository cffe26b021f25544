"""Storage tiers and RPO per failure domain in the checkpoint spec: what is refused and why,
and what the worker is told (controller/spec/parts.py, controller/runplan.py)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.errors import SpecError
from controller.runplan import checkpoint_env
from controller.spec.parts import StorageTier, tier_problem
from events.workerenv import FAILURE_DOMAINS, CheckpointEnv
from tests.controller.spec.test_runspec import MINIMAL, spec_of

LOCAL = {"name": "local", "root": "/mnt/nvme/ckpt", "protects": ["process"]}
REMOTE = {"name": "remote", "root": "s3://bucket/ckpt", "protects": ["cluster"], "keep_last": 10}


def with_checkpoint(**extra: Any) -> dict[str, Any]:
    doc = copy.deepcopy(MINIMAL)
    doc["checkpoint"] = {**doc["checkpoint"], **extra}
    return doc


def refusal(doc: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        spec_of(doc)
    return str(info.value)


def test_process_only_tiers_with_a_host_rpo_are_refused_with_the_reason() -> None:
    msg = refusal(with_checkpoint(tiers=[LOCAL], rpo={"host": 200}))
    assert "rpo.host" in msg and "no tier protects against a host loss" in msg
    assert "add a tier" in msg
    # The same tiers with an RPO only against a process crash are fine.
    spec = spec_of(with_checkpoint(tiers=[LOCAL], rpo={"process": 50}))
    assert spec.checkpoint.storage_tiers()[0].name == "local"


def test_a_remote_tier_meets_a_host_rpo_and_reaches_the_worker() -> None:
    spec = spec_of(with_checkpoint(tiers=[LOCAL, REMOTE], rpo={"host": 200, "cluster": 1000}))
    env = checkpoint_env(spec)
    assert env.root == "/mnt/nvme/ckpt"
    assert [(t.name, t.protects, t.keep_last) for t in env.tiers] == [
        ("local", "process", None), ("remote", "cluster", 10)]
    back = CheckpointEnv.from_environ(env.to_environ())
    assert back.tiers == env.tiers and back.storage_tiers() == env.tiers


def test_a_lone_root_is_one_shared_tier_protecting_host() -> None:
    spec = spec_of(with_checkpoint(root="/shared/ckpt", rpo={"host": 100}))
    (tier,) = spec.checkpoint.storage_tiers()
    assert (tier.name, tier.widest) == ("root", "host")
    env = checkpoint_env(spec)
    assert env.tiers == () and [t.protects for t in env.storage_tiers()] == ["host"]
    assert "no tier protects against a domain loss" in refusal(
        with_checkpoint(root="/shared/ckpt", rpo={"domain": 100}))


@pytest.mark.parametrize("extra,expected", [
    ({"root": "/a", "tiers": [LOCAL]}, "not both"),
    ({"tiers": [LOCAL, {**REMOTE, "name": "local"}]}, "repeats the name or root"),
    ({"tiers": [{**LOCAL, "keep_last": 5}, {**REMOTE, "keep_last": 2}]},
     "tier remote keeps 2 checkpoints, fewer than tier local"),
    ({"tiers": [{**LOCAL, "protects": ["rack"]}]}, "protects"),
    ({"tiers": []}, "tiers"),
    ({"rpo": {"region": 5}}, "rpo"),
])
def test_bad_tier_lists_are_refused_naming_the_problem(extra: dict[str, Any],
                                                        expected: str) -> None:
    assert expected in refusal(with_checkpoint(**extra))


tiers_st = st.lists(
    st.tuples(st.lists(st.sampled_from(FAILURE_DOMAINS), min_size=1, max_size=4, unique=True),
              st.none() | st.integers(1, 9)),
    min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(tiers_st, st.integers(1, 9),
       st.dictionaries(st.sampled_from(FAILURE_DOMAINS), st.integers(1, 500), max_size=4))
def test_tier_validation_refuses_exactly_an_unprotected_rpo_or_a_shrinking_retention(
        raw: list[tuple[list[str], int | None]], keep_last: int, rpo: dict[str, int]) -> None:
    tiers = tuple(StorageTier(name=f"t{i}", root=f"/t{i}", protects=tuple(p),  # type: ignore[arg-type]
                              keep_last=k) for i, (p, k) in enumerate(raw))
    problem = tier_problem(tiers, keep_last, rpo)  # type: ignore[arg-type]
    keeps = [t.keep_last or keep_last for t in tiers]
    widest = max(FAILURE_DOMAINS.index(t.widest) for t in tiers)
    shrinking = any(b < a for a, b in itertools.pairwise(keeps))
    uncovered = [d for d in rpo if FAILURE_DOMAINS.index(d) > widest]
    assert (problem is None) == (not shrinking and not uncovered)
    if problem is not None and not shrinking:
        assert f"rpo.{min(uncovered, key=FAILURE_DOMAINS.index)}" in problem
