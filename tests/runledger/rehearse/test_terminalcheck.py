"""The terminal-state judge (runledger.rehearse.terminalcheck): each rule passes on a clean end and
fails, naming the thing, on the one defect it exists for."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from events import runmanifest
from events.model import Event, PreflightCheck
from runledger.rehearse.terminalcheck import CHECKS, judge_terminal, list_run, relative, residue_of
from tests.events.builders import Ev

ROOT = "file:///ckpt"
G1S2 = "g000001/step-0000000002"
G1S4 = "g000001/step-0000000004"


def _url(rel: str) -> str:
    return f"{ROOT}/r1/{rel}"


def _cancelled(ev: Ev) -> list[Event]:
    """Generation 1 commits step 2, stages step 4 (never committed), and is cancelled."""
    log: list[Event] = [ev.submitted(), ev.admitted(), ev.generation_started(1),
                        ev.confirmed(1)]
    for s in range(1, 5):
        log.append(ev.step(1, s))
    log.append(ev.committed(1, 2, manifest_path=_url(f"{G1S2}/manifest.json"),
                            manifest_digest="sha256:s2"))
    log.append(ev.cancelled(1))
    doc = runmanifest.build(log)
    assert doc is not None
    log.append(ev.manifest_published(1, digest=runmanifest.digest(doc),
                                      path=_url("run-manifest.json"), status="Cancelled"))
    return log


def _exits(ev: Ev, busy: int = 0) -> list[Event]:
    """Both members' exits, then each node's agent heartbeat (``busy`` slots on node-b)."""
    return [ev.exited(1, "w0", exit_code=None, signal=15, node="node-a"),
            ev.exited(1, "w1", exit_code=None, signal=15),
            ev.agent_heartbeat("node-a", busy_slots=0),
            ev.agent_heartbeat("node-b", busy_slots=busy)]


LISTING = (f"{G1S2}/manifest.json", f"{G1S2}/__0_0.distcp", f"{G1S2}/.metadata",
           "run-manifest.json")


def _by_check(rows: tuple[PreflightCheck, ...]) -> dict[str, PreflightCheck]:
    assert [r.check for r in rows] == list(CHECKS)
    return {r.check: r for r in rows}


def test_a_clean_cancellation_passes_every_rule() -> None:
    ev = Ev()
    rows = _by_check(judge_terminal(_cancelled(ev), LISTING, reports=_exits(ev)))
    assert {c: r.verdict for c, r in rows.items()} == {c: "pass" for c in CHECKS}
    assert "ended Cancelled: budget" in rows["terminal"].reason
    assert (rows["residue"].figure, rows["residue"].threshold) == (0, 0)


def test_a_run_that_has_not_ended_fails_terminal_and_skips_the_rest() -> None:
    ev = Ev()
    log = _cancelled(ev)[:-2]
    rows = _by_check(judge_terminal(log, LISTING))
    assert rows["terminal"].verdict == "fail"
    assert "runledger cancel r1" in rows["terminal"].reason
    assert {rows[c].verdict for c in CHECKS[1:]} == {"skip"}


def test_no_run_at_all_names_what_to_pass() -> None:
    rows = judge_terminal([], LISTING, run_id="r9")
    assert [(r.check, r.verdict) for r in rows] == [("terminal", "fail")]
    assert "r9" in rows[0].reason and "runledger.runs" in rows[0].reason


def test_uncommitted_directories_and_partial_files_are_residue_up_to_the_bound() -> None:
    ev = Ev()
    log, exits = _cancelled(ev), _exits(ev)
    listing = (*LISTING, f"{G1S4}/__0_0.distcp", f"{G1S4}/__1_0.distcp",
               "run-manifest.json.partial")
    rows = _by_check(judge_terminal(log, listing, reports=exits))
    assert (rows["residue"].verdict, rows["residue"].figure) == ("fail", 2)
    assert f"{G1S4}/" in rows["residue"].reason
    assert "run-manifest.json.partial" in rows["residue"].reason
    assert _by_check(judge_terminal(log, listing, reports=exits,
                                    residue_bound=2))["residue"].verdict == "pass"


def test_a_revoked_checkpoint_left_on_storage_is_residue() -> None:
    ev = Ev()
    log = _cancelled(ev)
    revoked = ev.revoked(1, 2, digest="sha256:s2", manifest_path=_url(f"{G1S2}/manifest.json"))
    log = [*log[:-2], revoked, log[-2]]  # after the commit, before the cancellation
    doc = runmanifest.build(log)
    assert doc is not None
    log.append(ev.manifest_published(1, digest=runmanifest.digest(doc),
                                      path=_url("run-manifest.json"), status="Cancelled"))
    rows = _by_check(judge_terminal(log, LISTING, reports=_exits(ev)))
    assert rows["residue"].verdict == "fail" and f"{G1S2}/" in rows["residue"].reason
    assert rows["committed_kept"].verdict == "pass"  # nothing retained any more


def test_a_report_kept_as_a_fact_after_the_end_is_a_leaking_fence() -> None:
    ev = Ev()
    log = _cancelled(ev)
    leak = ev.step(1, 5, event_id="late-step")
    rows = _by_check(judge_terminal([*log, leak], LISTING, reports=_exits(ev)))
    assert (rows["fenced"].verdict, rows["fenced"].figure) == ("fail", 1)
    assert "StepCommitted late-step" in rows["fenced"].reason


def test_a_member_that_never_reported_its_exit_is_not_stopped() -> None:
    ev = Ev()
    log = _cancelled(ev)
    rows = _by_check(judge_terminal(log, LISTING, reports=_exits(ev)[:1]))
    assert (rows["stopped"].verdict, rows["stopped"].figure) == ("fail", 1)
    assert "w1 on node-b" in rows["stopped"].reason
    older = [ev.exited(0, "w1")]  # an exit of another generation does not count
    assert _by_check(judge_terminal(log, LISTING, reports=[*_exits(ev)[:1], *older])
                     )["stopped"].verdict == "fail"


def test_slots_still_busy_after_the_exits_fail_and_no_heartbeat_skips() -> None:
    ev = Ev()
    log = _cancelled(ev)
    rows = _by_check(judge_terminal(log, LISTING, reports=_exits(ev, busy=2)))
    assert (rows["slots"].verdict, rows["slots"].figure) == ("fail", 2)
    assert "node-b (2 busy)" in rows["slots"].reason
    rows = _by_check(judge_terminal(log, LISTING, reports=_exits(ev)[:2]))
    assert rows["slots"].verdict == "skip" and "node-a, node-b" in rows["slots"].reason
    # a heartbeat from before the members exited says nothing about the end
    early = ev.agent_heartbeat("node-a", busy_slots=0)
    late = _exits(ev)
    rows = _by_check(judge_terminal(log, LISTING, reports=[early, *late[:2], late[3]]))
    assert rows["slots"].verdict == "skip" and "node-a" in rows["slots"].reason


def test_a_run_cancelled_in_the_queue_had_nothing_to_stop() -> None:
    ev = Ev()
    log: list[Event] = [ev.submitted(), ev.queued(), ev.cancelled()]
    doc = runmanifest.build(log)
    assert doc is not None
    log.append(ev.manifest_published(digest=runmanifest.digest(doc), status="Cancelled"))
    rows = _by_check(judge_terminal(log, ()))
    assert rows["stopped"].verdict == "pass"
    assert rows["manifest_file"].verdict == "skip"  # no checkpoint root: the log keeps it
    assert rows["manifest"].verdict == "pass"


def test_a_missing_or_different_manifest_fails() -> None:
    ev = Ev()
    log = _cancelled(ev)
    rows = _by_check(judge_terminal(log[:-1], LISTING, reports=_exits(ev)))
    assert rows["manifest"].verdict == "fail" and "no RunManifestPublished" in \
        rows["manifest"].reason
    wrong = ev.manifest_published(1, digest="sha256:00", path=_url("run-manifest.json"))
    rows = _by_check(judge_terminal([*log[:-1], wrong], LISTING, reports=_exits(ev)))
    assert rows["manifest"].verdict == "fail" and "sha256:00" in rows["manifest"].reason


def test_a_missing_file_or_removed_checkpoint_fails_naming_it() -> None:
    ev = Ev()
    log, exits = _cancelled(ev), _exits(ev)
    rows = _by_check(judge_terminal(log, LISTING[:-1], reports=exits))
    assert rows["manifest_file"].verdict == "fail"
    assert _url("run-manifest.json") in rows["manifest_file"].reason
    rows = _by_check(judge_terminal(log, LISTING[1:], reports=exits))
    assert (rows["committed_kept"].verdict, rows["committed_kept"].figure) == ("fail", 1)
    assert f"{G1S2}/manifest.json" in rows["committed_kept"].reason


def test_full_urls_in_the_listing_are_read_relative_to_the_run() -> None:
    ev = Ev()
    rows = _by_check(judge_terminal(_cancelled(ev), [_url(p) for p in LISTING],
                                    reports=_exits(ev)))
    assert {r.verdict for r in rows.values()} == {"pass"}
    assert relative("r1/g000001/x", "r1") == "g000001/x"


def test_list_run_lists_the_files_under_the_run_relative_to_it(tmp_path: Path) -> None:
    assert list_run(str(tmp_path), "r1") == ()
    (tmp_path / "r1" / G1S2).mkdir(parents=True)
    (tmp_path / "r1" / G1S2 / "manifest.json").write_text("{}")
    (tmp_path / "r1" / "run-manifest.json").write_text("{}")
    assert list_run(str(tmp_path), "r1") == (f"{G1S2}/manifest.json", "run-manifest.json")


_SLOTS = st.tuples(st.integers(1, 3), st.integers(1, 30))


@given(st.frozensets(_SLOTS, max_size=6), st.lists(_SLOTS, max_size=10))
def test_residue_never_names_a_committed_directory(
        committed: frozenset[tuple[int, int]], present: list[tuple[int, int]]) -> None:
    files = [f"g{g:06d}/step-{s:010d}/f" for g, s in [*committed, *present]]
    left = residue_of("r1", committed, files)
    expected = {f"g{g:06d}/step-{s:010d}/" for g, s in present if (g, s) not in committed}
    assert set(left) == expected
