"""views/logview.py: which worker's log ``runledger logs`` shows, and what it says when none."""

from __future__ import annotations

import pytest

from events.model import WorkerExited
from runledger.views.logview import LogNotFound, exit_of, log_file, pick, work_dir_of
from tests.events.builders import Ev, members

EV = Ev("run-1")
G1 = EV.generation_started(1, members=members("r0", "r1", node="n1"))
G2 = EV.generation_started(2, members=members("r0", "r1", node="n1"))


def exited(gen: int, lid: str, code: int) -> WorkerExited:
    return EV.exited(gen, lid, exit_code=code, node="n1", log_path=f"/a/run-1/g{gen}/{lid}.log")


def test_the_default_is_the_newest_generation_s_failed_member_else_rank_0() -> None:
    facts = [G1, exited(1, "r0", 1), exited(1, "r1", 0), G2, exited(2, "r0", 0),
             exited(2, "r1", 2)]
    got = pick("run-1", facts, None, None)
    assert (got.generation, got.logical_id, got.rank, got.node) == (2, "r1", 1, "n1")
    assert got.log_path == "/a/run-1/g2/r1.log"
    assert pick("run-1", facts, "0", 1).log_path == "/a/run-1/g1/r0.log"
    assert pick("run-1", facts, "r1", 1).log_path == "/a/run-1/g1/r1.log"


def test_an_unknown_rank_or_generation_is_named_with_what_exists() -> None:
    facts = [G1, exited(1, "r0", 1)]
    with pytest.raises(LogNotFound, match=r"no generation 7; it has 1"):
        pick("run-1", facts, None, 7)
    with pytest.raises(LogNotFound, match=r"no rank '5'; its ranks are 0 \(r0\), 1 \(r1\)"):
        pick("run-1", facts, "5", None)
    with pytest.raises(LogNotFound, match="started no generation"):
        pick("run-1", [], None, None)
    running = pick("run-1", facts, "r1", None)
    assert running.exited is None and running.log_path == ""
    # A generation still running is the default, over an older one with exits.
    g3 = EV.generation_started(3, members=members("r0", "r1", node="n2"))
    live = pick("run-1", [*facts, g3], None, None)
    assert (live.generation, live.logical_id, live.rank, live.node, live.exited) == (
        3, "r0", 0, "n2", None)


def test_a_running_member_s_log_lies_under_its_agent_s_registered_work_dir() -> None:
    facts = [G1, exited(1, "r0", 1)]
    running = pick("run-1", facts, "1", None)
    reports = [EV.agent_registered("n2", work_dir="/elsewhere"),
               EV.agent_registered("n1", work_dir="/old"),
               EV.agent_registered("n1", work_dir="/srv/n1")]
    assert work_dir_of("n1", reports) == "/srv/n1"  # the newest registration
    assert work_dir_of("n3", reports) is None
    assert log_file("run-1", running, "/srv/n1") == "/srv/n1/run-1/g1/r1.log"
    with pytest.raises(LogNotFound, match=r"node n1, whose agent predates work dir reports;"
                                          r" its log is run-1/g1/r1.log under"):
        log_file("run-1", running, "")
    with pytest.raises(LogNotFound, match="no registration on the reports topic"):
        log_file("run-1", running, None)
    # An exited member's log is the one its agent reported, whatever the work dir says.
    done = pick("run-1", facts, "0", None)
    assert log_file("run-1", done, "/srv/n1") == "/a/run-1/g1/r0.log"
    silent = pick("run-1", [G1, EV.exited(1, "r0", exit_code=125, node="n1")], "0", None)
    with pytest.raises(LogNotFound, match="rank 0 \\(r0\\) of run-1 generation 1 has no log"):
        log_file("run-1", silent, None)


def test_the_followed_member_s_exit_is_recognised_among_new_facts() -> None:
    running = pick("run-1", [G1, G2], "r1", 1)
    assert exit_of(running, [exited(2, "r1", 0), exited(1, "r0", 0)]) is None
    ended = exited(1, "r1", 143)
    assert exit_of(running, [G2, ended]) is ended


def test_only_a_member_of_the_newest_generation_of_a_live_run_may_be_running() -> None:
    """`logs` says "running" only where it may be: an older generation's member with no
    exit on the log was stopped with its group, and so is every member of a run that
    ended (#34: a failed run's stopped generation was labelled running)."""
    assert pick("run-1", [G1], "r1", None).live
    older = pick("run-1", [G1, exited(1, "r0", 1), G2], "r1", 1)
    assert older.exited is None and not older.live
    assert pick("run-1", [G1, exited(1, "r0", 1), G2], "r1", 2).live
    ended = [G1, exited(1, "r0", 1), EV.finished(1, outcome="failed", reason="r0 failed")]
    assert not pick("run-1", ended, "r1", None).live
    assert not pick("run-1", [G1, EV.cancelled(1)], "r0", None).live
    assert not pick("run-1", [G1, exited(1, "r0", 0)], "r0", None).live  # it exited
