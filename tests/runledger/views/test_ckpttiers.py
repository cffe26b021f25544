"""A run's checkpoints per storage tier from the log (runledger/views/ckpttiers.py): the rows
``checkpoint list`` shows, and each tier's GC pass with its own retention."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.model import CheckpointReplicated, Event, ManifestCommitted
from runledger.errors import RunledgerError
from runledger.views.ckpttiers import copies, gc_plan, spec_checkpoint
from tests.controller.spec.test_runspec import MINIMAL, spec_of
from tests.events.builders import Ev
from worker.gc import History, plan

LOCAL = {"name": "local", "root": "/nvme/ckpt", "protects": ["process"], "keep_last": 2}
PEER = {"name": "peer", "root": "/peer/ckpt", "protects": ["host"]}
REMOTE = {"name": "remote", "root": "s3://bucket/ckpt", "protects": ["cluster"], "keep_last": 9}


def spec_json(**checkpoint: Any) -> str:
    doc = copy.deepcopy(MINIMAL)
    doc["checkpoint"] = {**doc["checkpoint"], **checkpoint}
    return spec_of(doc).canonical_json()


def commit(ev: Ev, step: int, gen: int = 1) -> ManifestCommitted:
    return ev.committed(gen, step, manifest_path=f"/nvme/ckpt/r/g{gen:06d}/s{step}/manifest.json")


def copied(ev: Ev, c: ManifestCommitted, tier: str) -> CheckpointReplicated:
    return ev.event(CheckpointReplicated, c.generation, dict(
        step=c.step, manifest_path=f"/{tier}/s{c.step}/manifest.json",
        manifest_digest=c.manifest_digest, logical_id="r0", tier=tier, protects="cluster",
        lag_ms=125.0, bytes=4096), {})


def tiered_run(keep_last: int = 3) -> tuple[Ev, list[Event]]:
    ev = Ev("r")
    return ev, [ev.submitted(spec_json=spec_json(tiers=[LOCAL, PEER, REMOTE],
                                                 keep_last=keep_last, keep_every=100))]


def test_list_rows_show_the_first_tier_from_the_commit_and_the_others_from_their_copies(
) -> None:
    ev, facts = tiered_run()
    c4, c8 = commit(ev, 4), commit(ev, 8)
    # Replication facts arrive in any order, a retried copy twice; rows keep tier order.
    facts += [c4, c8, copied(ev, c4, "remote"), copied(ev, c4, "peer"), copied(ev, c4, "peer"),
              copied(ev, c8, "peer")]
    ckpt = spec_checkpoint(facts)
    assert ckpt is not None
    rows = copies(facts, ckpt.storage_tiers())
    assert [(r["step"], [h["tier"] for h in r["tiers"]]) for r in rows] == [
        (4, ["local", "peer", "remote"]), (8, ["local", "peer"])]
    first, remote = rows[0]["tiers"][0], rows[0]["tiers"][2]
    assert first == {"tier": "local", "manifest": c4.manifest_path, "protects": "process",
                     "lag_ms": None}
    assert (remote["manifest"], remote["lag_ms"]) == ("/remote/s4/manifest.json", 125.0)


def test_a_run_whose_spec_does_not_parse_lists_its_commits_on_the_root_tier() -> None:
    ev = Ev("r")
    facts: list[Event] = [ev.submitted(spec_json="{}"), commit(ev, 4)]
    assert spec_checkpoint(facts) is None
    (row,) = copies(facts, ())
    assert [h["tier"] for h in row["tiers"]] == ["root"]


def test_gc_plans_every_tier_with_its_own_keep_last_and_pins_uncopied_ones_on_the_first(
) -> None:
    ev, facts = tiered_run(keep_last=3)
    c4, c8, c12 = commit(ev, 4), commit(ev, 8), commit(ev, 12)
    facts += [c4, c8, c12, copied(ev, c4, "peer"), copied(ev, c4, "remote"),
              copied(ev, c8, "peer")]  # 8 is not on remote yet, 12 nowhere
    plans = gc_plan(facts, spec_checkpoint(facts), only=None, keep_last=None, keep_every=None,
                    limit=16)
    # local keeps 2 (its own), peer the run's 3, remote 9; keep_every from the spec
    assert [(p.tier.name, p.keep.keep_last, p.keep.keep_every) for p in plans] == [
        ("local", 2, 100), ("peer", 3, 100), ("remote", 9, 100)]
    assert [p.pinned for p in plans] == [frozenset({(1, 8), (1, 12)}), frozenset(), frozenset()]
    (only,) = gc_plan(facts, spec_checkpoint(facts), only="remote", keep_last=5, keep_every=7,
                      limit=4)
    assert (only.tier.name, only.keep.keep_last, only.keep.keep_every, only.keep.limit) == (
        "remote", 5, 7, 4)


def test_gc_refusals_name_what_to_do() -> None:
    ev, facts = tiered_run()
    with pytest.raises(RunledgerError, match="no such tier; its tiers are local, peer, remote"):
        gc_plan(facts, spec_checkpoint(facts), only="nvme", keep_last=None, keep_every=None,
                limit=16)
    with pytest.raises(RunledgerError, match="give the tier's root with --root"):
        gc_plan(facts, None, only=None, keep_last=None, keep_every=None, limit=16)
    rootless = [ev.submitted(spec_json=spec_json())]  # MINIMAL names no root
    with pytest.raises(RunledgerError, match=r"RUNLEDGER_CHECKPOINT_ROOT\): give that root"):
        gc_plan(rootless, spec_checkpoint(rootless), only=None, keep_last=None,
                keep_every=None, limit=16)


def test_a_lone_root_is_one_tier_with_the_runs_keep_last() -> None:
    ev = Ev("r")
    facts: list[Event] = [ev.submitted(spec_json=spec_json(root="/shared/ckpt", keep_last=4))]
    (p,) = gc_plan(facts, spec_checkpoint(facts), only=None, keep_last=None, keep_every=None,
                   limit=16)
    assert (p.tier.name, p.tier.root, p.keep.keep_last, p.pinned) == (
        "root", "/shared/ckpt", 4, frozenset())


@given(steps=st.lists(st.integers(1, 60), min_size=1, max_size=12, unique=True),
       copied_to=st.data(), keep_last=st.integers(1, 4))
def test_the_first_tier_never_loses_a_checkpoint_a_later_tier_lacks(
    steps: list[int], copied_to: st.DataObject, keep_last: int
) -> None:
    ev, facts = tiered_run()
    commits = [commit(ev, s) for s in sorted(steps)]
    facts += commits
    uncopied = set()
    for c in commits:
        tiers = copied_to.draw(st.sets(st.sampled_from(["peer", "remote"])))
        facts += [copied(ev, c, tier) for tier in tiers]
        if tiers != {"peer", "remote"}:
            uncopied.add((1, c.step))
    first = gc_plan(facts, spec_checkpoint(facts), only="local", keep_last=keep_last,
                    keep_every=None, limit=100)[0]
    slots = [(1, c.step) for c in commits]
    gone = plan(slots, History(tuple(slots), frozenset(), 1), first.keep, first.pinned)
    assert slots[-1] not in gone
    assert first.pinned == uncopied and not set(gone) & uncopied
