"""Private brokers for tests that must stop or own one: as secure as the session's.

``make test`` runs against a secure stack and exports ``RUNLEDGER_CREDENTIALS``
(its admin). A test's private stack gets a copy of the same credential files
before its first ``up`` (a stack keeps credential files it finds), so every
client in the test, which reads the environment, authenticates to either
broker. Without session credentials a private stack is plaintext, like the
session's.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from events.connection import ENV_CREDENTIALS
from runledger.stack import Stack


def session_credentials() -> Path | None:
    raw = os.environ.get(ENV_CREDENTIALS, "")
    return Path(raw) if raw else None


def private_stack(data_dir: Path, brokers: int = 1) -> Stack:
    """A stack in ``data_dir`` whose principals and passwords are the session's."""
    creds = session_credentials()
    if creds is not None:
        target = data_dir / "credentials"
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        for source in creds.parent.glob("*.properties"):
            shutil.copy2(source, target / source.name)
    return Stack(data_dir, brokers=brokers, secure=creds is not None)
