"""An agent's confinement on real processes: ``--allow`` judged by the file a command
resolves to with the worker's own environment, and ``code.workdir`` inside its roots.

The attacks of issue 33: a spec whose ``env.PATH`` puts a directory holding a
fake program of an allowed name first (it once ran, as ``argv[0]`` was compared
as written), and a workdir anywhere on the node. The pure rules are in
tests/agent/test_decide.py; ``agent.allow``'s resolution is tested here too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from agent.allow import allowed_real_paths, found, program_problem
from agent.decide import REJECTED_EXIT_CODE
from agent.errors import AgentError
from tests.agent.commands import start_cmd
from tests.agent.test_service import Running, start_agent, stop_agent

# What a program of these tests writes when it runs: the proof that it ran, or did not.
SCRIPT = "#!/bin/sh\necho {what} > \"$MARKS/{what}\"\n"


def program(directory: Path, name: str, what: str) -> Path:
    """An executable ``name`` in ``directory`` that leaves the file ``$MARKS/<what>``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(SCRIPT.format(what=what))
    path.chmod(0o755)
    return path


def test_an_allow_entry_resolves_to_its_real_file_or_stops_the_agent(tmp_path: Path) -> None:
    real = program(tmp_path / "opt", "trainer", "real")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "train").symlink_to(real)
    path = f"{tmp_path / 'bin'}:{tmp_path / 'opt'}"
    # A bare name on the agent's PATH, a link, a relative path: each its real file, once.
    assert allowed_real_paths(["trainer", "train", "opt/trainer"], path, str(tmp_path)) == (
        str(real.resolve()),)
    with pytest.raises(AgentError) as refused:
        allowed_real_paths(["trainer", "nope", "/no/such/x"], path, str(tmp_path))
    said = str(refused.value)
    assert said.startswith("--allow 'nope', '/no/such/x': no executable file")
    assert "give the absolute path of a program that exists on this node" in said


def test_a_command_is_found_as_the_exec_finds_it(tmp_path: Path) -> None:
    first = program(tmp_path / "w" / "fake", "trainer", "fake")
    second = program(tmp_path / "opt", "trainer", "real")
    workdir = str(tmp_path / "w")
    # A relative PATH entry is relative to the workdir, where the worker runs.
    assert found("trainer", workdir, f"fake:{tmp_path / 'opt'}") == str(first)
    assert found("trainer", workdir, f"{tmp_path / 'opt'}:fake") == str(second)
    assert found("./fake/trainer", workdir, "") == str(first)
    assert found("trainer", workdir, "/nonexistent") is None
    allowed = (str(second.resolve()),)
    assert program_problem("trainer", workdir, f"{tmp_path / 'opt'}", allowed, "n1") == (
        str(second), None)
    run, why = program_problem("trainer", workdir, f"fake:{tmp_path / 'opt'}", allowed, "n1")
    assert run == "trainer" and why is not None
    assert why.startswith(f"not_allowed: the command's executable 'trainer' on the worker's "
                          f"PATH (fake:{tmp_path / 'opt'}) resolves to {first}, which is not "
                          f"one the agent may run (--allow, resolved: {second.resolve()})")


@pytest.fixture
def confined(bootstrap: str, tmp_path: Path) -> Iterator[tuple[Running, Path, Path]]:
    """An agent allowed one program, ``trainer`` found on its own PATH, and workdirs
    only under ``<tmp>/code``; the programs leave their marks in ``<tmp>/marks``."""
    real = program(tmp_path / "opt", "trainer", "real")
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "code").mkdir()
    agent = start_agent(
        bootstrap, tmp_path, slots=2,
        extra=("--allow", "trainer", "--allow-workdir", str(tmp_path / "code")),
        env={"PATH": f"{real.parent}:{os.environ.get('PATH', os.defpath)}",
             "MARKS": str(marks)})
    yield agent, real, marks
    stop_agent(agent)


@pytest.mark.kafka
def test_a_fake_program_first_on_the_spec_s_path_never_runs(
        confined: tuple[Running, Path, Path], tmp_path: Path, run_id: str) -> None:
    agent, real, marks = confined
    # The attack: a spec's env.PATH puts a directory with a fake `trainer` first.
    fake = program(tmp_path / "code" / "evil", "trainer", "fake")
    now = int(time.time() * 1000)
    attack = replace(start_cmd(agent.node, run_id, 1, ("r0",), at=now,
                               env={"PATH": f"{fake.parent}:{real.parent}"}),
                     argv=("trainer",), workdir=str(tmp_path / "code"))
    agent.send(attack)
    (refused,) = agent.wait_exits(run_id, 1).values()
    assert (refused.exit_code, refused.signal) == (REJECTED_EXIT_CODE, None)
    # The job's error (the controller classifies a launch_error as job:launch), naming
    # what the name resolved to and what the agent allows.
    assert f"resolves to {fake}, which is not one the agent may run (--allow, resolved: " \
           f"{real.resolve()})" in refused.launch_error
    assert refused.launch_error.startswith(f"the agent on {agent.node} refused the start: "
                                           "not_allowed")
    assert not (marks / "fake").exists(), "the fake program ran"

    # The allowed program itself, found on the same kind of PATH, runs (by its path).
    honest = replace(start_cmd(agent.node, f"{run_id}-ok", 1, ("r0",), at=now,
                               env={"PATH": f"{real.parent}:{fake.parent}"}),
                     argv=("trainer",), workdir=str(tmp_path / "code"))
    agent.send(honest)
    (ran,) = agent.wait_exits(f"{run_id}-ok", 1).values()
    assert (ran.exit_code, ran.launch_error) == (0, "")
    assert (marks / "real").read_text() == "real\n" and not (marks / "fake").exists()


@pytest.mark.kafka
def test_a_workdir_outside_the_agent_s_roots_is_refused_as_the_job_s_error(
        confined: tuple[Running, Path, Path], tmp_path: Path, run_id: str) -> None:
    agent, real, marks = confined
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    now = int(time.time() * 1000)
    start = replace(start_cmd(agent.node, run_id, 1, ("r0",), at=now),
                    argv=(str(real),), workdir=str(elsewhere))
    agent.send(start)
    (refused,) = agent.wait_exits(run_id, 1).values()
    assert (refused.exit_code, refused.signal) == (REJECTED_EXIT_CODE, None)
    assert f"path_outside_roots: code.workdir {str(elsewhere)!r} is outside the allowed " \
           "roots (" in refused.launch_error
    assert f"start the agent on {agent.node} with --allow-workdir {elsewhere}" in (
        refused.launch_error)
    assert not (marks / "real").exists(), "the worker ran outside the allowed workdirs"
