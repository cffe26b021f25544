"""``--allow``: which program a start may run, judged by the file the exec will run.

A name as written proves nothing: a spec may set ``env.PATH``, and ``python``
then names whatever file of that name comes first on it. So both ends are
resolved to real files and compared there:

- at agent start, each ``--allow`` entry is resolved once, on the agent's own
  ``PATH`` (a bare name) or against the agent's directory (a relative path),
  to its real path (``os.path.realpath``: links followed). An entry that names
  no executable file stops the agent (:func:`allowed_real_paths`);
- at launch, the command's ``argv[0]`` is found exactly as the exec would find
  it (``events.launch``): an absolute path as it is, a path with a ``/``
  relative to the workdir, a bare name on the ``PATH`` the worker actually
  gets, the spec's ``env.PATH`` applied. Its real path must be one of the
  allowed ones (:func:`program_problem`), else the start is refused
  (``not_allowed``, exit 125) naming what it resolved to and the list.

The worker is then run by the absolute path that was checked (its ``argv[0]``
replaced by it, ``ProcessTable.launch``), so nothing looks ``PATH`` up again
between the check and the exec: a file dropped later into a directory earlier
on that ``PATH`` is never run, and an interpreter does not find itself there.

The comparison is by real path, but the path run is the one found: a venv's
``python`` (a link to the system interpreter) still starts in its venv.

Tested in tests/agent/test_confine.py.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from agent.confine import NOT_ALLOWED
from agent.errors import AgentError
from events.launch import resolve


def found(program: str, workdir: str, path: str) -> str | None:
    """The absolute file ``program`` names for a process in ``workdir`` with ``PATH``
    ``path``, as the exec finds it; None when it names no executable file."""
    if not program:
        return None
    if "/" in program:
        return _runnable(resolve(program, workdir))
    # As the exec searches, in the worker's directory: a relative (or empty) PATH
    # entry is relative to the workdir, not to the agent's own directory.
    for entry in path.split(os.pathsep):
        hit = _runnable(resolve(os.path.join(entry or ".", program), workdir))
        if hit is not None:
            return hit
    return None


def _runnable(full: str) -> str | None:
    return full if os.path.isfile(full) and os.access(full, os.X_OK) else None


def allowed_real_paths(entries: Sequence[str], path: str, cwd: str) -> tuple[str, ...]:
    """Each ``--allow`` entry's real path, resolved as the agent itself would run it.

    Raises ``AgentError`` naming every entry that resolves to no executable file.
    """
    out: list[str] = []
    bad: list[str] = []
    for entry in entries:
        hit = found(entry, cwd, path)
        if hit is None:
            bad.append(entry)
        else:
            out.append(os.path.realpath(hit))
    if bad:
        names = ", ".join(repr(b) for b in bad)
        raise AgentError(
            f"--allow {names}: no executable file of that name (a bare name is looked up on "
            f"the agent's PATH, {path}; a relative path in {cwd}); give the absolute path of "
            "a program that exists on this node, or drop the entry")
    return tuple(dict.fromkeys(out))


def program_problem(argv0: str, workdir: str, path: str, allowed: Sequence[str],
                    node: str) -> tuple[str, str | None]:
    """``(the file to run, None)`` when ``argv0`` resolves to an allowed real path;
    ``(argv0, why not)`` otherwise, naming what it resolved to and the allowed list."""
    hit = found(argv0, workdir, path)
    real = os.path.realpath(hit) if hit is not None else None
    if hit is not None and real in allowed:
        return hit, None
    listed = " ".join(allowed)
    what = (f"resolves to {real}" if real == hit else f"resolves to {hit}, really {real}") \
        if hit is not None else "resolves to no executable file"
    where = "" if "/" in argv0 else f" on the worker's PATH ({path})"
    return argv0, (
        f"{NOT_ALLOWED}: the command's executable {argv0!r}{where} {what}, which is not "
        f"one the agent may run (--allow, resolved: {listed}); make command[0] one of "
        f"them (and env.PATH find it first), or start the agent on {node} with --allow "
        f"{real or argv0}")
