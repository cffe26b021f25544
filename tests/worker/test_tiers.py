"""Storage tiers on the worker (worker/tiers.py): the restore order for a failure (pure,
hypothesis), and with real torch on CPU and real files through fsspec: background copies
verified and reported, a host loss (the first tier's files deleted) restored from the next
tier, a corrupted copy fallen back from, a missing tier root named, GC kept per tier."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from events.model import CheckpointReplicated, Header
from events.workerenv import FAILURE_DOMAINS, TierEnv
from tests.events.builders import Ev
from tests.worker import support
from tests.worker.support import DATASET, RUN, candidate, model_keys, write
from worker.comm import Comm
from worker.commit import Written
from worker.errors import NoUsableCheckpoint, StorageFault, VerificationFailed
from worker.gc import present
from worker.layout import CheckpointDir
from worker.restore import Candidate, choose, load
from worker.tiers import (
    Identity,
    Refusals,
    Replicator,
    attempts,
    collect_tiers,
    copy_verified,
    survivors,
)

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

# --- pure: the restore order ---------------------------------------------------------

tier_lists = st.lists(st.sampled_from(FAILURE_DOMAINS), min_size=1, max_size=5).map(
    lambda ps: tuple(TierEnv(f"t{i}", f"/tiers/t{i}", p) for i, p in enumerate(ps)))


@settings(max_examples=300, deadline=None)
@given(tier_lists, st.sampled_from(FAILURE_DOMAINS), st.lists(st.integers(1, 99), max_size=4,
                                                              unique=True))
def test_restore_tries_only_surviving_tiers_nearest_first_newest_checkpoint_first(
        tiers: tuple[TierEnv, ...], failure: str, steps: list[int]) -> None:
    steps = sorted(steps, reverse=True)
    cands = [Candidate(s, f"/tiers/t0/{RUN}/g000001/step-{s:010d}/manifest.json", f"d{s}")
             for s in steps]
    order = attempts(cands, tiers, failure)
    alive = survivors(tiers, failure)
    # Every surviving tier, and only those: a host loss never reads a process-only tier.
    assert all(FAILURE_DOMAINS.index(t.protects) >= FAILURE_DOMAINS.index(failure)
               for t in alive)
    assert set(alive) == {t for t in tiers if t.protects in
                          FAILURE_DOMAINS[FAILURE_DOMAINS.index(failure):]}
    assert [(c.step, c.tier) for c in order] == [(s, t.name) for s in steps for t in alive]
    for c in order:
        root = next(t.root for t in tiers if t.name == c.tier)
        assert c.manifest_url.startswith(root + "/") and c.manifest_digest == f"d{c.step}"


def test_a_candidate_outside_the_first_tier_is_tried_as_committed() -> None:
    tiers = (TierEnv("a", "/a", "process"), TierEnv("b", "/b", "cluster"))
    old = Candidate(3, "/old-root/r/g000001/step-0000000003/manifest.json", "d3")
    assert attempts([old], tiers, "host") == [old]
    assert attempts([old], (), "host") == [old]


def test_a_checkpoint_is_refused_only_when_its_last_surviving_copy_is() -> None:
    tiers = (TierEnv("a", "/a", "process"), TierEnv("b", "/b", "host"))
    order = attempts([Candidate(s, f"/a/r/g000001/step-{s:010d}/manifest.json", f"d{s}")
                      for s in (20, 10)], tiers, "process")
    refusals = Refusals(order)
    first = refusals.add(order[0], VerificationFailed("shard_checksum", "tier a: bad"))
    assert first is None  # tier b may still hold step 20: nothing to revoke yet
    whole = refusals.add(order[1], VerificationFailed("manifest_missing", "tier b: gone"))
    assert whole is not None and whole.reason == "manifest_missing"
    assert whole.detail == "tier a: bad; tier b: gone"


# --- real files -------------------------------------------------------------------------


def _tiers(tmp: Path, *protects: str, keep: tuple[int | None, ...] = ()) -> tuple[TierEnv, ...]:
    out = []
    for i, p in enumerate(protects):
        (tmp / f"tier{i}").mkdir()
        out.append(TierEnv(f"tier{i}", str(tmp / f"tier{i}"), p,
                           keep[i] if i < len(keep) else None))
    return tuple(out)


def _header(key: str) -> Header:
    return Header(event_id=f"{RUN}/g1/w0/{key}", run_id=RUN, generation=1, occurred_at=1,
                  producer="worker/test")


def _replicate(tiers: tuple[TierEnv, ...], *written: Written) -> list[CheckpointReplicated]:
    reports: list[CheckpointReplicated] = []
    rep = Replicator(tiers[1:], Identity("w0", _header), reports.append)
    try:
        for w in written:
            rep.submit(w, time.monotonic())
        rep.drain()
    finally:
        rep.close()
    return reports


def _checkpoint(tier0: TierEnv, step: int, seed: int = 0) -> tuple[torch.nn.Module, Written]:
    model, state = support.small_state(seed)
    return model, write(CheckpointDir(tier0.root, RUN, 1, step), state,
                        required=model_keys(model))


def _restore(cands: list[Candidate], tiers: tuple[TierEnv, ...], failure: str,
             ) -> tuple[Candidate, dict[str, torch.Tensor], list[tuple[str, str]]]:
    rejected: list[tuple[str, str]] = []

    def on_rejected(c: Candidate, exc: VerificationFailed) -> None:
        rejected.append((c.tier, exc.detail))
    chosen, _, _ = choose(attempts(cands, tiers, failure), Comm.single(), run_id=RUN,
                          dataset_id=DATASET, on_rejected=on_rejected)
    _, template = support.small_state(seed=99)
    load(chosen, template, Comm.single())
    return chosen, dict(template["model"]), rejected


def test_a_host_loss_restores_from_the_next_tier(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path, "process", "cluster")
    model, w = _checkpoint(tiers[0], 20)
    (report,) = _replicate(tiers, w)
    assert (report.tier, report.protects, report.step, report.manifest_digest) == (
        "tier1", "cluster", 20, w.digest)
    assert report.lag_ms >= 0 and report.bytes == w.manifest.total_bytes
    assert report.manifest_path == CheckpointDir(tiers[1].root, RUN, 1, 20).manifest_url
    # The host is lost: its local tier's files with it.
    shutil.rmtree(tiers[0].root)
    chosen, loaded, rejected = _restore([candidate(w)], tiers, "host")
    assert chosen.tier == "tier1" and rejected == []  # tier0 was never tried
    for k, v in model.state_dict().items():
        assert torch.equal(loaded[k], v)


def test_a_process_crash_restores_from_the_nearest_tier(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path, "process", "cluster")
    _, w = _checkpoint(tiers[0], 20)
    _replicate(tiers, w)
    chosen, _, _ = _restore([candidate(w)], tiers, "process")
    assert chosen.tier == "tier0"


def test_a_corrupted_copy_falls_back_tier_by_tier(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path, "process", "host", "cluster")
    model, w = _checkpoint(tiers[0], 30)
    reports = _replicate(tiers, w)
    assert [r.tier for r in reports] == ["tier1", "tier2"]
    shard = sorted(Path(CheckpointDir(tiers[1].root, RUN, 1, 30).url).glob("*.distcp"))[0]
    support.flip_bit(shard, 10)
    chosen, loaded, rejected = _restore([candidate(w)], tiers, "host")
    assert chosen.tier == "tier2"
    assert [t for t, _ in rejected] == ["tier1"]
    assert rejected[0][1].startswith("tier tier1: ") and "CRC32C" in rejected[0][1]
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())
    # Every copy bad: nothing is loaded over committed progress.
    for t in tiers[1:]:
        (Path(CheckpointDir(t.root, RUN, 1, 30).url) / "manifest.json").unlink()
    with pytest.raises(NoUsableCheckpoint):
        _restore([candidate(w)], tiers, "host")


def test_a_missing_tier_root_is_a_storage_fault_naming_the_tier(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path, "process")
    gone = TierEnv("remote", str(tmp_path / "not-mounted"), "cluster")
    _, w = _checkpoint(tiers[0], 10)
    with pytest.raises(StorageFault) as info:
        copy_verified(w, gone)
    assert "tier remote" in str(info.value) and "not-mounted" in str(info.value)
    rep = Replicator((gone,), Identity("w0", _header), lambda _r: None)
    rep.submit(w, time.monotonic())
    with pytest.raises(StorageFault, match="tier remote"):
        rep.drain()
    rep.close()
    # Restoring, the missing tier is a refusal naming it, and the next tier is tried.
    rejected: list[str] = []
    chosen, _, _ = choose(attempts([candidate(w)], (tiers[0], gone), "process")[::-1],
                          Comm.single(), run_id=RUN, dataset_id=DATASET,
                          on_rejected=lambda c, e: rejected.append(e.detail))
    assert chosen.tier == "tier0" and rejected[0].startswith("tier remote: ")


def test_gc_keeps_each_tiers_own_retention_and_never_a_pinned_copy(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path, "process", "cluster", keep=(1, 3))
    written = [_checkpoint(tiers[0], step)[1] for step in (10, 20, 30, 40)]
    _replicate(tiers, *written)
    ev = Ev(RUN)
    facts = [ev.generation_started(1), *(ev.committed(1, s) for s in (10, 20, 30, 40))]
    collect_tiers(tiers, RUN, facts, keep_last=2, keep_every=None,
                  pinned=frozenset({(1, 10)}))
    assert sorted(present(tiers[0].root, RUN)) == [(1, 10), (1, 40)]
    assert sorted(present(tiers[1].root, RUN)) == [(1, 20), (1, 30), (1, 40)]


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice is Linux's")
def test_the_copier_runs_at_the_lowest_cpu_priority(tmp_path: Path) -> None:
    """The copy takes only the cycles the training step leaves (nice 19, its thread
    alone: the training threads keep theirs)."""
    tiers = _tiers(tmp_path, "process", "cluster")
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    rep = Replicator(tiers[1:], Identity("w0", _header), lambda _: None)
    try:
        tid = rep._jobs.thread.native_id
        assert tid is not None
        deadline = time.monotonic() + 30
        while os.getpriority(os.PRIO_PROCESS, tid) != 19 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.getpriority(os.PRIO_PROCESS, tid) == 19
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine
    finally:
        rep.close()
