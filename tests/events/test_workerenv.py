"""The worker environment contract: round trip, clear errors, precedence, rank lists."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from events.workerenv import (
    RESUME_STEP,
    WorkerEnv,
    WorkerEnvError,
    compose_environ,
    format_ranks,
    parse_ranks,
)

ENV = WorkerEnv(run_id="run-1", generation=3, logical_id="r1", node="n1", world_size=4, rank=1,
                local_rank=0, master_addr="10.0.0.1", master_port=29500,
                bootstrap="127.0.0.1:9092", heartbeat_interval_s=0.5)


def test_round_trip_with_and_without_resume_point() -> None:
    environ = ENV.to_environ()
    assert environ["RUNLEDGER_RUN_ID"] == "run-1"
    assert environ["RUNLEDGER_GENERATION"] == "3"
    assert environ["RUNLEDGER_LOGICAL_ID"] == "r1"
    assert environ["RUNLEDGER_NODE"] == "n1"
    assert environ["RUNLEDGER_BOOTSTRAP"] == "127.0.0.1:9092"
    assert environ["RUNLEDGER_HEARTBEAT_INTERVAL_S"] == "0.5"
    assert (environ["WORLD_SIZE"], environ["RANK"], environ["LOCAL_RANK"]) == ("4", "1", "0")
    assert (environ["MASTER_ADDR"], environ["MASTER_PORT"]) == ("10.0.0.1", "29500")
    assert RESUME_STEP not in environ
    assert WorkerEnv.from_environ(environ) == ENV
    resumed = replace(ENV, resume_step=200, resume_manifest="s3://m.json")
    assert WorkerEnv.from_environ(resumed.to_environ()) == resumed


@pytest.mark.parametrize(("name", "value", "message"), [
    ("RUNLEDGER_RUN_ID", None, "RUNLEDGER_RUN_ID is not set"),
    ("RANK", "one", "RANK must be an integer, got 'one'"),
    ("RANK", "4", r"RANK must be in \[0, 4\)"),
    ("MASTER_PORT", "70000", "MASTER_PORT must be in"),
    ("RUNLEDGER_HEARTBEAT_INTERVAL_S", "0", "RUNLEDGER_HEARTBEAT_INTERVAL_S must be a positive"),
    ("RUNLEDGER_HEARTBEAT_INTERVAL_S", "nan", "RUNLEDGER_HEARTBEAT_INTERVAL_S must be a positive"),
    ("RUNLEDGER_GENERATION", "-1", "RUNLEDGER_GENERATION must be >= 0"),
    ("RUNLEDGER_RESUME_STEP", "x", "RUNLEDGER_RESUME_STEP must be an integer"),
])
def test_a_bad_variable_is_named(name: str, value: str | None, message: str) -> None:
    environ = ENV.to_environ()
    if value is None:
        del environ[name]
    else:
        environ[name] = value
    with pytest.raises(WorkerEnvError, match=message):
        WorkerEnv.from_environ(environ)


def test_the_contract_wins_over_inherited_and_command_values() -> None:
    base = {"PATH": "/bin", "RANK": "7", "RUNLEDGER_RESUME_STEP": "99", "KEEP": "base"}
    command = {"KEEP": "command", "WORLD_SIZE": "1", "RUNLEDGER_RANKS": "r0,r1,r2,r3"}
    env = compose_environ(base, command, ENV)
    assert env["PATH"] == "/bin" and env["KEEP"] == "command"
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "4"
    assert RESUME_STEP not in env  # a fresh start never inherits a resume point
    assert env["RUNLEDGER_RANKS"] == "r0,r1,r2,r3"


def test_rank_lists() -> None:
    assert parse_ranks(format_ranks(["a", "b", "c"])) == ("a", "b", "c")
    with pytest.raises(WorkerEnvError, match="names a more than once"):
        parse_ranks("a,b,a")
    with pytest.raises(WorkerEnvError, match="empty entry"):
        parse_ranks("a,,b")
    with pytest.raises(WorkerEnvError, match="contains"):
        format_ranks(["a,b"])


@given(st.lists(st.sampled_from(["r", "w", "node-", "x"]).flatmap(
    lambda p: st.integers(0, 40).map(lambda n: f"{p}{n}")), unique=True, max_size=60))
def test_ranks_read_back_in_order_whether_written_as_ranges_or_not(ids: list[str]) -> None:
    assume(ids)
    assert parse_ranks(format_ranks(ids)) == tuple(ids)


def test_an_admitted_membership_is_one_short_range() -> None:
    ids = [f"r{i}" for i in range(16_384)]
    assert format_ranks(ids) == "r[0..16383]"
    assert parse_ranks("r[0..16383]") == tuple(ids)
    # Ids with a leading zero, a gap or another prefix stay written out.
    assert format_ranks(["r0", "r1", "r2", "r4", "r05", "w0"]) == "r[0..2],r4,r05,w0"
    with pytest.raises(WorkerEnvError, match="bad range"):
        parse_ranks("r[3..1]")
    with pytest.raises(WorkerEnvError, match="more than once"):
        parse_ranks("r[0..3],r2")
