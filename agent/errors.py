"""The agent package's exceptions: one root.

The command line (``runledger agent``) catches :class:`AgentError` and prints
its message as it stands, so every message must read well on its own.

Tested in tests/runledger/test_cli.py.
"""

from __future__ import annotations


class AgentError(Exception):
    """The agent cannot start or keep running (the message says why)."""
