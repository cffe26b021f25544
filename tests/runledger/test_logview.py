"""runledger/logview.py: which worker's log ``runledger logs`` shows, and what it says when none."""

from __future__ import annotations

import pytest

from events.model import WorkerExited
from runledger.logview import LogNotFound, pick
from tests.events.builders import Ev, members

EV = Ev("run-1")
G1 = EV.generation_started(1, members=members("r0", "r1", node="n1"))
G2 = EV.generation_started(2, members=members("r0", "r1", node="n1"))


def exited(gen: int, lid: str, code: int) -> WorkerExited:
    return EV.exited(gen, lid, exit_code=code, node="n1", log_path=f"/a/run-1/g{gen}/{lid}.log")


def test_the_default_is_the_newest_generation_s_failed_member() -> None:
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
