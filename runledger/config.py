"""The command line's shared edge: option types, configuration and the broker connection.

Option types shared by several commands are declared here once; a command
whose option reads differently in ``--help`` takes the same declaration with
its own help line (``json_option``, ``catalog_option``, ``db_option``).
Configuration comes from the environment, with one default each:

- ``RUNLEDGER_HOME`` (default ``~/.local/state/runledger``): the projection
  (:func:`default_db`), the agents' work directories (:func:`agent_work_dir`)
  and the local stack (:func:`stack_data_dir`);
- ``RUNLEDGER_BOOTSTRAP`` or ``--bootstrap``: the Kafka cluster
  (:func:`bootstrap`, :func:`connect`, :func:`external_bootstrap`);
- ``RUNLEDGER_DATASETS`` or ``--catalog``: the dataset catalog (:func:`catalog`).

Tested in tests/runledger/commands/test_runs.py, tests/runledger/commands/test_dataset.py and
tests/runledger/stack/test_cluster.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from dataplane.catalog import Catalog, default_catalog_url
from events.kafka import ENV_BOOTSTRAP, bootstrap_from_env, check_broker

HOME_ENV = "RUNLEDGER_HOME"
DEFAULT_HOME = "~/.local/state/runledger"
BROKER_CHECK_S = 5.0  # a fast, clear failure instead of librdkafka's long retries

# --- option types ----------------------------------------------------------------


def json_option(help: str = "Print one JSON object.") -> Any:
    return typer.Option("--json", help=help)


def catalog_option(help: str = "Catalog directory or fsspec URL (default $RUNLEDGER_DATASETS"
                               " or ~/.local/share/runledger/datasets).") -> Any:
    return typer.Option("--catalog", metavar="URL", help=help)


def db_option(help: str = "The projection (default $RUNLEDGER_HOME/projection.duckdb).") -> Any:
    return typer.Option("--db", help=help)


AsJson = Annotated[bool, json_option()]
Bootstrap = Annotated[
    str | None, typer.Option("--bootstrap", help="Kafka bootstrap (default $RUNLEDGER_BOOTSTRAP).")
]
Principal = Annotated[
    str | None, typer.Option("--principal", help="Who asks (default $USER).")
]
RunArg = Annotated[str, typer.Argument(help="The run id that `runledger submit` printed.")]
ProjectedRun = Annotated[str, typer.Argument(help="The run id.")]  # of query and report
Db = Annotated[Path | None, db_option()]
CatalogUrl = Annotated[str | None, catalog_option()]
MetricsAddress = Annotated[
    str | None,
    typer.Option("--metrics", metavar="ADDR",
                 help="Serve Prometheus metrics at HOST:PORT (port 0: any free one)."),
]

# --- configuration -----------------------------------------------------------------


def home() -> Path:
    """``$RUNLEDGER_HOME``, else ``~/.local/state/runledger``."""
    return Path(os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser()


def default_db() -> Path:
    """The projection ``project`` writes and ``query``/``report`` read by default."""
    return home() / "projection.duckdb"


def agent_work_dir(node: str) -> Path:
    """An agent's default work directory: its workers' cwd and logs."""
    return home() / "agent" / node


def stack_data_dir() -> Path:
    """The local stack's default data directory."""
    return home() / "stack"


def external_bootstrap() -> str | None:
    """``RUNLEDGER_BOOTSTRAP`` when set and non-empty: an existing cluster to use."""
    return os.environ.get(ENV_BOOTSTRAP) or None


def bootstrap(explicit: str | None = None) -> str:
    """``--bootstrap``, else ``RUNLEDGER_BOOTSTRAP``; an ``EventsError`` naming both if neither."""
    return bootstrap_from_env(explicit)


def connect(explicit: str | None = None) -> str:
    """The bootstrap address, after one broker has answered (a fast, clear failure)."""
    address = bootstrap(explicit)
    check_broker(address, timeout_s=BROKER_CHECK_S)
    return address


def catalog(explicit: str | None = None) -> Catalog:
    """The dataset catalog at ``--catalog``, else ``$RUNLEDGER_DATASETS`` or its default."""
    return Catalog(explicit if explicit is not None else default_catalog_url())
