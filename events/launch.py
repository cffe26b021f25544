"""Where a worker runs and which program it runs: the check both ends make before a launch.

A run's command runs in its workdir (``code.workdir`` in the spec,
``GroupStartCommanded.workdir`` on the wire). Its program, ``argv[0]``, is found
the way a shell finds it:

- an absolute path is used as it is;
- a path with a ``/`` in it (``./train.sh``, ``bin/train``) is relative to the workdir;
- a bare name (``python``, ``torchrun``) is looked up on the worker's ``PATH``:
  the spec's ``env.PATH`` when it sets one, else the agent's own.

When the program is a Python interpreter (``python``, ``python3.11``, ...)
and its first argument is not an option, that argument is the script, and it
too must exist (relative to the workdir). ``-m module`` and ``-c code`` are
not checked.

:func:`launch_problem` says what stops a launch, naming the field and the
path, with the shell's exit code for it (127: not found, 126: found but not
runnable). The agent runs it before every launch; ``runledger submit`` runs it
on the submitting machine, without the ``PATH`` lookup (the agent's ``PATH`` is
not the submitter's). It reads the file system and nothing else.

Tested in tests/events/test_launch.py.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import PurePosixPath

EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126
_PYTHON = re.compile(r"python[0-9.]*")


@dataclass(frozen=True, slots=True)
class LaunchProblem:
    exit_code: int  # what a shell would have exited with
    message: str


def resolve(path: str, workdir: str) -> str:
    """``path`` made absolute against ``workdir``, as the worker would see it."""
    return path if path.startswith("/") else os.path.normpath(os.path.join(workdir, path))


def launch_problem(argv: tuple[str, ...] | list[str], workdir: str,
                   path: str | None) -> LaunchProblem | None:
    """Why ``argv`` cannot start in ``workdir``; None when it can.

    ``path`` is the ``PATH`` a bare program name is looked up on; None skips
    that lookup (a submitter cannot see the agent's ``PATH``).
    """
    if not os.path.isdir(workdir):
        what = "is not a directory" if os.path.exists(workdir) else "does not exist"
        return LaunchProblem(EXIT_NOT_FOUND, f"code.workdir {workdir} {what}")
    if not argv or not argv[0]:
        return LaunchProblem(EXIT_NOT_FOUND, "command: no program to run (command[0] is empty)")
    program = argv[0]
    if "/" in program:
        problem = _file_problem("command[0]", program, workdir, executable=True)
        if problem is not None:
            return problem
    elif path is not None and shutil.which(program, path=path) is None:
        return LaunchProblem(EXIT_NOT_FOUND,
                             f"command[0] {program!r} is not on the worker's PATH ({path}); "
                             "give an absolute path, or set env.PATH in the spec")
    script = _script(argv)
    if script is not None:
        return _file_problem("command[1]", script, workdir, executable=False)
    return None


def _script(argv: tuple[str, ...] | list[str]) -> str | None:
    """The script a Python interpreter is asked to run, if argv names one."""
    if len(argv) < 2 or not _PYTHON.fullmatch(PurePosixPath(argv[0]).name):
        return None
    first = argv[1]
    return None if first.startswith("-") or not first else first


def _file_problem(field: str, given: str, workdir: str, *,
                  executable: bool) -> LaunchProblem | None:
    full = resolve(given, workdir)
    where = full if given == full else f"{full} ({given} in code.workdir)"
    if not os.path.exists(full):
        return LaunchProblem(EXIT_NOT_FOUND, f"{field} {where} does not exist")
    if os.path.isdir(full):
        return LaunchProblem(EXIT_NOT_EXECUTABLE, f"{field} {where} is a directory")
    if not os.access(full, os.X_OK if executable else os.R_OK):
        need = "executable" if executable else "readable"
        return LaunchProblem(EXIT_NOT_EXECUTABLE, f"{field} {where} is not {need}")
    return None
