"""queries/source.py: which file a reader opens (pure rules), and what it says of its lag."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from projectors.snapshot import LAYOUT, SnapshotMeta
from queries.source import (
    Freshness,
    Live,
    LiveLocked,
    LiveMissing,
    LiveOpen,
    ReadLive,
    ReadSnapshot,
    Refuse,
    Snap,
    SnapBad,
    SnapMissing,
    choose,
)

LIVE = "/d/projection.duckdb"
SNAP = "/d/projection.snapshot.duckdb"
RUNS, REPORTS = "runledger.runs", "runledger.reports"


def meta(*, layout: str = LAYOUT, taken_at: float = 100.0, runs: int = 10,
         ends: dict[tuple[str, int], tuple[int, int]] | None = None) -> SnapshotMeta:
    return SnapshotMeta(layout, taken_at, {(RUNS, 0): runs, (REPORTS, 0): 4},
                        {(RUNS, 0): (0, 12), (REPORTS, 0): (0, 4)} if ends is None else ends)


def test_a_running_projector_s_snapshot_is_read_with_its_lag() -> None:
    got = choose(LIVE, LiveLocked(), meta(), now=103.5)
    assert got == ReadSnapshot(Freshness(SNAP, True, True, 100.0, 3.5,
                                         {RUNS: 2, REPORTS: 0}))
    assert got.freshness.line() == (
        f"projection: snapshot {SNAP} taken 3.5 s ago (1970-01-01T00:01:40Z) while `runledger"
        " project` runs; records behind the log end then: runledger.reports 0, runledger.runs 2")
    assert got.freshness.as_json()["behind"] == {REPORTS: 0, RUNS: 2}


def test_the_live_file_is_read_when_no_writer_holds_it() -> None:
    # The snapshot holds everything the file holds: its lag describes the file too.
    got = choose(LIVE, LiveOpen({(RUNS, 0): 10, (REPORTS, 0): 4}), meta(), now=160.0)
    assert isinstance(got, ReadLive) and got.freshness.path == LIVE
    assert not got.freshness.projector_running and got.freshness.behind == {RUNS: 2, REPORTS: 0}
    assert "at its last snapshot 60.0 s ago" in got.freshness.line()
    # The file went further than the snapshot (a projector killed between them): unknown.
    ahead = choose(LIVE, LiveOpen({(RUNS, 0): 11}), meta(), now=160.0)
    assert ahead == ReadLive(Freshness(LIVE, False, False))
    assert "records behind the log end: unknown" in ahead.freshness.line()
    assert choose(LIVE, LiveOpen({}), SnapMissing(), 0.0) == ReadLive(Freshness(LIVE, False,
                                                                                 False))


def test_refusals_say_what_to_run() -> None:
    none = choose(LIVE, LiveMissing(), SnapMissing(), 0.0, nearby=("other.duckdb",))
    assert none == Refuse(f"no projection at {LIVE}; run `runledger project --db {LIVE}` first;"
                          " projections beside it: other.duckdb")
    early = choose(LIVE, LiveLocked(), SnapMissing(), 0.0)
    assert isinstance(early, Refuse) and "no snapshot at " + SNAP in early.message
    assert "restart `runledger project`" in early.message
    other = choose(LIVE, LiveLocked(), meta(layout="0123456789abcdef"), 0.0)
    assert isinstance(other, Refuse)
    assert f"has layout 0123456789abcdef, another runledger version's (this one reads layout"\
           f" {LAYOUT}): run `runledger project --db {LIVE}`" in other.message
    assert choose(LIVE, LiveLocked(), SnapBad("remove it"), 0.0) == Refuse("remove it")
    old = choose(LIVE, LiveOpen({}, layout_problem="rebuild it"), meta(), 0.0)
    assert old == Refuse("rebuild it")


def test_a_snapshot_without_log_ends_says_its_lag_is_unknown() -> None:
    got = choose(LIVE, LiveMissing(), SnapshotMeta(LAYOUT, 5.0, {}, None), now=5.0)
    assert isinstance(got, ReadSnapshot) and got.freshness.behind is None
    assert "no projector holds the live file" in got.freshness.line()
    assert got.freshness.line().endswith("records behind the log end: unknown")


lives = st.one_of(st.just(LiveMissing()), st.just(LiveLocked()),
                  st.builds(LiveOpen, st.dictionaries(st.tuples(st.sampled_from([RUNS, REPORTS]),
                                                                st.integers(0, 3)),
                                                      st.integers(0, 50)),
                            st.sampled_from([None, "old: run `runledger replay`"])))
snaps = st.one_of(st.just(SnapMissing()), st.just(SnapBad("bad")),
                  st.builds(meta, layout=st.sampled_from([LAYOUT, "other"]),
                            taken_at=st.floats(0, 1e6), runs=st.integers(0, 50)))


@given(lives, snaps, st.floats(0, 2e6))
def test_a_held_file_is_never_opened_and_only_a_fitting_snapshot_is_read(
        live: Live, snap: Snap, now: float) -> None:
    got = choose(LIVE, live, snap, now)
    if isinstance(live, LiveLocked):
        assert not isinstance(got, ReadLive)  # DuckDB would refuse it: the writer's lock
    if isinstance(got, ReadSnapshot):
        assert isinstance(snap, SnapshotMeta) and snap.layout == LAYOUT
        assert not isinstance(live, LiveOpen)  # a free live file is at least as new
        assert got.freshness.age_s is not None and got.freshness.age_s >= 0
    if isinstance(got, ReadLive):
        assert isinstance(live, LiveOpen) and live.layout_problem is None
    if isinstance(got, Refuse):
        assert "runledger" in got.message or snap == SnapBad("bad")


def test_the_short_form_says_which_file_how_old_and_how_far_behind() -> None:
    """#34: every query printed the long sentence; a query's stderr gets a few words."""
    fresh = Freshness(SNAP, snapshot=True, projector_running=True, taken_at=100.0, age_s=3.5,
                      behind={"runledger.runs": 0, "runledger.reports": 0})
    assert fresh.short() == f"projection: snapshot, 3.5 s old, caught up ({SNAP})"
    behind = Freshness("/p.duckdb", snapshot=False, projector_running=False, taken_at=None,
                       age_s=None, behind={"runledger.runs": 1200, "runledger.reports": 34})
    assert behind.short() == ("projection: live file, 1,234 records behind; `runledger "
                              "project` catches it up (/p.duckdb)")
    assert "lag unknown" in Freshness("/p.duckdb", snapshot=False,
                                      projector_running=False).short()
