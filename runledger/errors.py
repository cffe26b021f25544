"""Errors raised by the ``runledger`` package, and the one exit-status policy of the CLI.

:class:`RunledgerError` is the package's root; the local stack's
:class:`StackError` and the demo's ``DemoError`` derive from it. The command
line (:mod:`runledger.cli`) turns every error in :data:`EXIT_STATUS` into one
line, ``runledger: <message>``, on stderr and the status that table gives, so
messages must read well on their own, without a traceback; anything else is a
bug and keeps its traceback.

Tested in tests/runledger/test_cli.py.
"""

from __future__ import annotations

from agent.errors import AgentError
from controller.errors import ControllerError
from dataplane.errors import DataPlaneError
from events.errors import BrokerUnavailable, EventsError, NoBootstrapAddress
from projectors.errors import ProjectorError
from queries.errors import QueryError
from worker.errors import WorkerError


class RunledgerError(Exception):
    """Root of every error the ``runledger`` package reports to a user."""


class UsageError(RunledgerError):
    """A command line that cannot be carried out as given (exit 2, as Typer's own)."""


class Interrupted(RunledgerError):
    """Stopped by Ctrl-C or SIGTERM, after cleaning up (exit 130)."""

    def __init__(self, message: str = "interrupted") -> None:
        super().__init__(message)


class ControllerFenced(RunledgerError):
    """A newer controller with the same transactional id took over (exit 3)."""


class StackError(RunledgerError):
    """Root of every error the local stack reports to a user."""


class PortInUseError(StackError):
    """A port the stack must listen on is already taken."""


class BrokerUnreachableError(StackError):
    """No broker answered an admin call in time."""


class NotRunningError(StackError):
    """The data directory holds no running stack."""


# The exit status of each error a command may raise, most specific first; the
# first row that matches wins. Typer's own usage errors exit 2 before any
# command runs, and a command whose documented status is no error (``agent``,
# ``demo``) exits with it through ``typer.Exit``.
EXIT_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (ControllerFenced, 3),
    (UsageError, 2),
    (Interrupted, 130),
    (RunledgerError, 1),
    (EventsError, 1),
    (AgentError, 1),
    (ControllerError, 1),
    (DataPlaneError, 1),
    (WorkerError, 1),
    (QueryError, 1),
    (ProjectorError, 1),
)
REPORTED: tuple[type[Exception], ...] = tuple(kind for kind, _ in EXIT_STATUS)


# What to do when no broker answers, said after the error itself.
BROKER_HINT = ("is the broker up? `runledger stack up` starts a local one; --bootstrap or"
               " RUNLEDGER_BOOTSTRAP names another; RUNLEDGER_RETRY_S sets how long to wait")


def message(exc: Exception) -> str:
    """The one line a user reads for ``exc``: its message, and what to do next where
    the error alone does not say."""
    if isinstance(exc, BrokerUnavailable) and not isinstance(exc, NoBootstrapAddress):
        return f"{exc}; {BROKER_HINT}"  # a bare "no address" already says what to do
    return str(exc)


def exit_status(exc: Exception) -> int:
    """The status :data:`EXIT_STATUS` gives ``exc`` (one of :data:`REPORTED`)."""
    return next(status for kind, status in EXIT_STATUS if isinstance(exc, kind))
