"""events/launch.py: where a command runs and whether its program and script are there."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from events.launch import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, launch_problem, resolve


def test_a_missing_workdir_is_named(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    problem = launch_problem(("python", "x.py"), str(gone), None)
    assert problem is not None and problem.exit_code == EXIT_NOT_FOUND
    assert problem.message == f"code.workdir {gone} does not exist"


def test_relative_programs_and_scripts_resolve_in_the_workdir(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    run = tmp_path / "run.sh"
    run.write_text("#!/bin/sh\n")
    assert launch_problem((sys.executable, "train.py"), str(tmp_path), os.defpath) is None
    missing = launch_problem(("python3", "nope.py"), str(tmp_path), None)
    assert missing is not None and missing.message == (
        f"command[1] {tmp_path}/nope.py (nope.py in code.workdir) does not exist")
    # Options and -m/-c are the interpreter's, not a script path.
    assert launch_problem(("python3", "-m", "nope"), str(tmp_path), None) is None
    not_exec = launch_problem(("./run.sh",), str(tmp_path), None)
    assert not_exec is not None and not_exec.exit_code == EXIT_NOT_EXECUTABLE
    assert "is not executable" in not_exec.message
    run.chmod(0o755)
    assert launch_problem(("./run.sh", "a"), str(tmp_path), None) is None
    assert resolve("a/../b.py", "/w") == "/w/b.py" and resolve("/x", "/w") == "/x"


def test_a_bare_program_is_looked_up_on_the_path_it_is_given(tmp_path: Path) -> None:
    tool = tmp_path / "bin" / "mytool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert launch_problem(("mytool",), str(tmp_path), str(tool.parent)) is None
    problem = launch_problem(("mytool",), str(tmp_path), "/nonexistent")
    assert problem is not None and problem.exit_code == EXIT_NOT_FOUND
    assert "'mytool' is not on the worker's PATH (/nonexistent)" in problem.message
    assert launch_problem(("mytool",), str(tmp_path), None) is None  # submit: not checked
