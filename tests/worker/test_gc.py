"""Garbage collection as a pure plan, and one pass over real directories."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.events.builders import Ev
from worker.gc import History, Retention, collect, history, plan, present

slots = st.tuples(st.integers(1, 4), st.integers(1, 60))


@settings(max_examples=300, deadline=None)
@given(st.lists(slots, max_size=30, unique=True), st.lists(slots, max_size=15, unique=True),
       st.integers(1, 5), st.none() | st.integers(1, 20), st.integers(1, 8), st.integers(1, 5))
def test_the_plan_never_removes_what_must_stay(
        on_disk: list[tuple[int, int]], committed_raw: list[tuple[int, int]], keep_last: int,
        keep_every: int | None, limit: int, generation: int) -> None:
    committed = tuple(sorted(set(committed_raw), key=lambda s: (s[1], s[0])))
    hist = History(committed=committed, revoked=frozenset(), generation=generation)
    keep = Retention(keep_last=keep_last, keep_every=keep_every, limit=limit)
    doomed = plan(on_disk + list(committed), hist, keep)
    assert len(doomed) <= limit
    if committed:
        assert committed[-1] not in doomed  # never the latest committed
    for slot in committed[-keep_last:]:
        assert slot not in doomed
    if keep_every:
        assert not [s for s in doomed if s in committed and s[1] % keep_every == 0]
    for gen, step in doomed:
        # residue of the current generation may still commit: never touched
        assert (gen, step) in committed or gen < generation
    # a second pass over what is left continues, never repeats
    left = [s for s in set(on_disk) | set(committed) if s not in doomed]
    assert not set(plan(left, hist, keep)) & set(doomed)


def test_history_follows_commits_and_revocations() -> None:
    ev = Ev("r", start=0, tick=1, producer="c", ids="e{n}")  # event n at n ms
    events = [
        ev.generation_started(1, members=(), reason="admitted"),
        ev.committed(1, 4, manifest_path="a", manifest_digest="d4"),
        ev.committed(1, 8, manifest_path="b", manifest_digest="d8"),
        ev.generation_started(2, 8, members=(), reason="restart", resume_manifest=None),
        ev.revoked(2, 8, manifest_path="b", digest="d8", reason="shard_checksum"),
        ev.committed(2, 8, manifest_path="c", manifest_digest="e8"),
    ]
    hist = history(events)
    assert hist.committed == ((1, 4), (2, 8)) and hist.revoked == {(1, 8)}
    assert hist.generation == 2
    assert plan([(1, 4), (1, 8), (2, 8), (2, 12)], hist, Retention(keep_last=2)) == [(1, 8)]


def test_a_pass_over_real_directories(tmp_path: Path) -> None:
    root = str(tmp_path)
    for gen, step in [(1, 4), (1, 8), (1, 9), (2, 8), (2, 12), (2, 16), (3, 20)]:
        d = tmp_path / "run-1" / f"g{gen:06d}" / f"step-{step:010d}"
        d.mkdir(parents=True)
        (d / "__0_0.distcp").write_bytes(b"x")
    (tmp_path / "run-1" / "notes.txt").write_text("not a checkpoint")
    hist = History(committed=((1, 4), (1, 8), (2, 12), (2, 16)), revoked=frozenset({(2, 8)}),
                   generation=3)
    keep = Retention(keep_last=2, limit=2)
    first = collect(root, "run-1", hist, keep, dry_run=True)
    assert len(first) == 2 and all((tmp_path / u).exists() for u in first)
    removed = collect(root, "run-1", hist, keep) + collect(root, "run-1", hist, keep)
    assert sorted(present(root, "run-1")) == [(2, 12), (2, 16), (3, 20)]
    assert len(removed) == 4  # (1,4) (1,8) out of retention, (1,9) residue, (2,8) revoked
    assert collect(root, "run-1", hist, keep) == []  # nothing left to do: retry is a no-op
    assert (tmp_path / "run-1" / "notes.txt").exists()
