"""Errors raised by the ``runledger`` package (the CLI and the local stack).

The CLI turns every :class:`StackError` into a one-line message on stderr and
a non-zero exit, so messages must read well on their own, without a traceback.
"""

from __future__ import annotations


class StackError(Exception):
    """Root of every error the local stack reports to a user."""


class PortInUseError(StackError):
    """A port the stack must listen on is already taken."""


class BrokerUnreachableError(StackError):
    """No broker answered an admin call in time."""


class NotRunningError(StackError):
    """The data directory holds no running stack."""
