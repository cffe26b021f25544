"""Where runledger keeps things: ``RUNLEDGER_HOME`` and the default dataset catalog.

Everything runledger keeps lives under ``RUNLEDGER_HOME`` unless a variable names
another place. Both are defined here, in the lowest layer that keeps anything
there, with no import beyond the standard library, so every command can learn
them without loading the data plane (``dataplane.catalog`` and
``runledger.config`` take them from here; the catalog's default cannot drift
from the home the rest of runledger uses).

Tested in tests/dataplane/test_catalog.py.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "RUNLEDGER_HOME"
DEFAULT_HOME = "~/.local/state/runledger"
DATASETS_ENV = "RUNLEDGER_DATASETS"


def runledger_home() -> Path:
    """``$RUNLEDGER_HOME``, else ``~/.local/state/runledger``."""
    return Path(os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser()


def default_catalog_url() -> str:
    """``$RUNLEDGER_DATASETS``, else ``$RUNLEDGER_HOME/datasets``: one stack's home, not a
    directory every stack and user of the machine would share."""
    return os.environ.get(DATASETS_ENV) or str(runledger_home() / "datasets")
