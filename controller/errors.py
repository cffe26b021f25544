"""The controller package's exceptions: one root, specific leaves.

Callers at the edge (the CLI, the controller process) catch
:class:`ControllerError` and print its message as it stands, so every message
must read well on its own, without a traceback.
"""

from __future__ import annotations


class ControllerError(Exception):
    """Root of every error raised by the ``controller`` package."""


class SpecError(ControllerError):
    """A run spec that cannot be accepted.

    ``problems`` holds one ``field.path: problem`` line per bad field, so a
    user fixes every mistake in one round instead of one per submission.
    """

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"{source}: invalid run spec, {count} {noun}:\n{lines}")
