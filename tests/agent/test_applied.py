"""The agent's durable memory of what it applied (``agent.applied``): pure entries, a real file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from agent.applied import AppliedLog, entry, path_for, restore
from agent.decide import REPLAYED, SUPERSEDED, AgentConfig, AgentState, Ignore, decide
from agent.errors import AgentError
from events.model import GroupStartCommanded, GroupStopCommanded
from tests.agent.commands import NOW, start_cmd, stop_cmd

CFG = AgentConfig(node="n1", slots=4, bootstrap="k")


def _apply(log: AppliedLog, state: AgentState,
           cmd: GroupStartCommanded | GroupStopCommanded) -> AgentState:
    """What the agent's shell does: decide, record, then act."""
    after = decide(CFG, state, cmd, NOW).state
    log.record(state, after, cmd)
    return after


def test_a_restarted_agent_refuses_the_start_it_already_applied(tmp_path: Path) -> None:
    log = AppliedLog(path_for(tmp_path))
    start = start_cmd("n1", "run", 2, ("r0", "r1"))
    _apply(log, AgentState(), start)
    # The process is gone; a new one knows only the file.
    fresh = AppliedLog(path_for(tmp_path)).load(CFG)
    assert ("run", 2) in fresh.started and start.command_id in fresh.seen
    d = decide(CFG, fresh, start, NOW)  # the same command, replayed byte for byte
    assert d.actions == (Ignore(start.command_id, "duplicate command id", REPLAYED),)
    reissued = start_cmd("n1", "run", 2, ("r0", "r1"), cid="another-id")
    assert decide(CFG, fresh, reissued, NOW).actions[0].refused == REPLAYED  # type: ignore[union-attr]
    older = start_cmd("n1", "run", 1, ("r0", "r1"), cid="old-id")
    assert decide(CFG, fresh, older, NOW).actions[0].refused == SUPERSEDED  # type: ignore[union-attr]


def test_a_stop_is_remembered_so_its_generation_never_starts_again(tmp_path: Path) -> None:
    log = AppliedLog(path_for(tmp_path))
    state = _apply(log, AgentState(), start_cmd("n1", "run", 1, ("r0",)))
    _apply(log, state, stop_cmd("n1", "run", 2))
    fresh = AppliedLog(path_for(tmp_path)).load(CFG)
    assert fresh.revoked == {"run": 2} and fresh.running == frozenset()
    late = start_cmd("n1", "run", 2, ("r0",), cid="late")
    assert decide(CFG, fresh, late, NOW).actions[0].refused == SUPERSEDED  # type: ignore[union-attr]
    # A newer generation still starts.
    assert type(decide(CFG, fresh, start_cmd("n1", "run", 3, ("r0",)), NOW).actions[0]).__name__ \
        == "Launch"


def test_only_commands_a_decision_applied_are_written() -> None:
    start = start_cmd("n1", "run", 1, ("r0",))
    after = decide(CFG, AgentState(), start, NOW).state
    assert entry(AgentState(), after, start) is not None
    assert entry(after, after, start) is None  # already seen: a refusal applies nothing
    other = start_cmd("n2", "run", 1, ("r0",))
    assert entry(AgentState(), decide(CFG, AgentState(), other, NOW).state, other) is None
    busy = AgentConfig(node="n1", slots=2, bootstrap="k")
    two = start_cmd("n1", "wide", 1, ("a", "b"), cid="wide")
    state = decide(busy, AgentState(), start, NOW).state
    deferred = decide(busy, state, two, NOW)
    assert entry(state, deferred.state, two) is None  # deferred: decided again later


def test_the_file_is_owner_only_and_fsynced_lines(tmp_path: Path) -> None:
    log = AppliedLog(path_for(tmp_path))
    _apply(log, AgentState(), start_cmd("n1", "run", 1, ("r0",)))
    path = path_for(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text().endswith("\n") and path.read_text().count("\n") == 1


def test_a_last_line_cut_short_is_dropped_and_cut_off(tmp_path: Path) -> None:
    log = AppliedLog(path_for(tmp_path))
    start = start_cmd("n1", "run", 1, ("r0",))
    _apply(log, AgentState(), start)
    path = path_for(tmp_path)
    with path.open("a") as f:
        f.write('{"generation":2,"id":"cut')
    state = AppliedLog(path).load(CFG)
    assert state.seen == (start.command_id,)
    assert path.read_text().count("\n") == 1 and path.read_text().endswith("\n")


def test_an_unreadable_line_stops_the_agent_naming_it(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match=r"applied.jsonl line 2 is not an applied-command"):
        restore(CFG, ['{"id":"a","kind":"stop","run":"r","generation":1}', "garbage"],
                str(path_for(tmp_path)))


def test_the_memory_keeps_the_newest_ids_and_every_runs_generations() -> None:
    cfg = AgentConfig(node="n1", slots=1, bootstrap="k", seen_limit=2)
    lines = [f'{{"id":"c{i}","kind":"stop","run":"r{i}","generation":{i}}}' for i in range(4)]
    state = restore(cfg, lines, "f")
    assert state.seen == ("c2", "c3")
    assert state.revoked == {"r0": 0, "r1": 1, "r2": 2, "r3": 3} == state.newest
