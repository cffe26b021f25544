"""worker/faults.py: ``RUNLEDGER_FAULT`` parsed, and armed only where it names.

Each point killing a real write is tests/worker/test_commit.py (and, through whole runs,
tests/e2e/test_checkpoint.py).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from worker.errors import WorkerError
from worker.faults import ENV, IGNORE_FENCE_ENV, NO_SIGTERM_ENV, Fault, Faults, parse


@pytest.mark.parametrize(("text", "fault"), [
    ("", None),
    ("after_shards@8", Fault("after_shards", 8)),
    ("staging@3:rank=1:gen=2:run=trace-b", Fault("staging", 3, 1, 2, "trace-b")),
    ("mid_shard@0:gen=7", Fault("mid_shard", 0, None, 7, None)),
    ("step@12:run=r:rank=0", Fault("step", 12, 0, None, "r")),
    ("after_commit@5", Fault("after_commit", 5)),
    ("after_manifest@5", Fault("after_manifest", 5)),
])
def test_parse_valid_faults(text: str, fault: Fault | None) -> None:
    assert parse(text) == fault


@pytest.mark.parametrize("text", [
    "bogus@3", "staging", "staging@", "staging@x", "@3", "staging@-1", "staging@3:rank=a",
    "staging@3:rank=", "staging@3:gen=-2", "staging@3:run=", "staging@3:foo=1",
    "staging@3:rank", "staging@3:", "STAGING@3",
])
def test_parse_invalid_faults(text: str) -> None:
    with pytest.raises(WorkerError, match=ENV):
        parse(text)


@pytest.mark.parametrize("text", ["staging@\u00b2", "staging@3:rank=\u00b9"])
def test_parse_rejects_non_decimal_digits_as_a_worker_error(text: str) -> None:
    with pytest.raises(WorkerError, match=ENV):
        parse(text)


def test_faults_armed_respects_point_step_rank_generation_and_run() -> None:
    f = Fault("staging", 3, rank=1, generation=2, run="trace-b")
    assert Faults(f, 1, 2, "trace-b-17").armed("staging", 3)
    assert not Faults(f, 1, 2, "trace-b-17").armed("staging", 4)
    assert not Faults(f, 1, 2, "trace-b-17").armed("mid_shard", 3)
    assert not Faults(f, 0, 2, "trace-b-17").armed("staging", 3)
    assert not Faults(f, 1, 3, "trace-b-17").armed("staging", 3)
    assert not Faults(f, 1, 2, "trace-a").armed("staging", 3)
    assert not Faults(f, 1, 2, "x-trace-b").armed("staging", 3)  # a prefix, not a substring
    anywhere = Fault("after_shards", 8)
    assert all(Faults(anywhere, r, g, run).armed("after_shards", 8)
               for r in (0, 5) for g in (1, 9) for run in ("", "a"))
    assert not Faults(None, 0, 1).armed("after_shards", 8)
    env = {ENV: "after_shards@8:rank=1"}
    assert Faults.from_env(env, 1, 1).armed("after_shards", 8)
    assert not Faults.from_env(env, 0, 1).armed("after_shards", 8)
    assert not Faults.from_env({}, 0, 1).armed("after_shards", 8)
    Faults(f, 0, 2, "trace-b").hit("staging", 3)  # not armed: returns, no kill


def test_the_drill_points_parse_with_their_options() -> None:
    assert parse("slow@4:rank=1:ms=400:gen=1") == Fault("slow", 4, 1, 1, None, 400)
    assert parse("hang@7:gen=1") == Fault("hang", 7, None, 1)
    assert parse("truncate@10") == Fault("truncate", 10)
    with pytest.raises(WorkerError, match="unknown option 'ms=5'"):
        parse("step@3:ms=5")  # only a slow step has a sleep


def test_slow_is_armed_from_its_step_on_and_sleeps_that_long(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("worker.faults.time.sleep", slept.append)
    f = Faults(Fault("slow", 3, rank=1, ms=250), 1, 1)
    for step in range(1, 6):
        f.stepped(step)
    assert slept == [0.25, 0.25, 0.25]
    Faults(Fault("slow", 3, rank=1, ms=250), 0, 1).stepped(4)  # another rank: not slowed
    assert len(slept) == 3


def test_truncate_cuts_the_committed_shard_to_half_then_kills(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[int] = []
    monkeypatch.setattr("worker.faults.os.kill", lambda pid, sig: killed.append(sig))
    shard = tmp_path / "r0.distcp"
    shard.write_bytes(b"x" * 100)
    f = Faults(Fault("truncate", 10, generation=1), 0, 1)
    f.truncate(5, str(shard))  # another step: untouched
    assert shard.stat().st_size == 100 and killed == []
    f.truncate(10, str(shard))
    assert shard.stat().st_size == 50 and killed == [signal.SIGKILL]


def test_the_drill_switches_come_from_the_environment_only_when_set_to_1() -> None:
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert Faults.from_env({IGNORE_FENCE_ENV: "1"}, 0, 1).ignore_fence
        assert not Faults.from_env({IGNORE_FENCE_ENV: "yes"}, 0, 1).ignore_fence
        assert signal.getsignal(signal.SIGTERM) == before
        Faults.from_env({NO_SIGTERM_ENV: "1"}, 0, 1)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)
