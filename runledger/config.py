"""The command line's shared edge: option types, configuration and the broker connection.

Option types shared by several commands are declared here once; a command
whose option reads differently in ``--help`` takes the same declaration with
its own help line (``json_option``, ``catalog_option``, ``db_option``).
Configuration comes from the environment, with one default each:

- ``RUNLEDGER_HOME`` (default ``~/.local/state/runledger``, defined with the
  catalog in :mod:`dataplane.catalog`): everything runledger keeps, the
  projection (:func:`default_db`), the agents' work directories
  (:func:`agent_work_dir`), the local stack (:func:`stack_data_dir`) and the
  dataset catalog;
- ``--bootstrap``, else ``RUNLEDGER_BOOTSTRAP``, else the stack ``stack up``
  started last (:mod:`runledger.current`, with the credentials of the command's
  role, operator unless a service says otherwise, when ``RUNLEDGER_CREDENTIALS``
  is unset, and the controller's or the operator's signing key,
  :func:`stack_signing_key`): the
  Kafka cluster (:func:`bootstrap`, :func:`connect`, :func:`external_bootstrap`);
- ``--catalog``, else ``RUNLEDGER_DATASETS``, else ``$RUNLEDGER_HOME/datasets``: the
  dataset catalog (:func:`catalog`);
- ``RUNLEDGER_RETRY_S`` (default 30): how long a command waits for a broker that
  is down or failing over before it gives up with one line (:func:`retry_s`).

Tested in tests/runledger/commands/test_runs.py, tests/runledger/commands/test_dataset.py and
tests/runledger/stack/test_cluster.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataplane.home import default_catalog_url, runledger_home
from events.errors import BrokerUnavailable, NoBootstrapAddress
from events.kafka.broker import bootstrap_from_env, check_broker
from events.kafka.connection import ENV_CREDENTIALS
from events.workerenv import ENV_BOOTSTRAP
from runledger import current
from runledger.errors import UsageError

if TYPE_CHECKING:  # the data plane loads numpy: only the commands that use it pay
    from dataplane.catalog import Catalog

ENV_KEY = "RUNLEDGER_KEY"  # an operator's signing key file (runledger.signer)
BROKER_CHECK_S = 5.0  # one try's wait: a fast, clear failure instead of librdkafka's
RETRY_ENV = "RUNLEDGER_RETRY_S"
# Long enough for a broker restart or a partition leader's failover, short enough
# that a command against a broker that is not there gives up before its user does.
DEFAULT_RETRY_S = 30.0
RETRY_PAUSE_S = 0.5

# --- option types ----------------------------------------------------------------


def json_option(help: str = "Print one JSON object.") -> Any:
    return typer.Option("--json", help=help)


def catalog_option(help: str = "Catalog directory or fsspec URL (default $RUNLEDGER_DATASETS"
                               " or $RUNLEDGER_HOME/datasets).") -> Any:
    return typer.Option("--catalog", metavar="URL", help=help)


def db_option(help: str = "The projection (default $RUNLEDGER_HOME/projection.duckdb).") -> Any:
    return typer.Option("--db", help=help)


AsJson = Annotated[bool, json_option()]
Bootstrap = Annotated[
    str | None, typer.Option("--bootstrap", help="Kafka bootstrap (default $RUNLEDGER_BOOTSTRAP).")
]
Principal = Annotated[
    str | None, typer.Option(
        "--principal",
        help="Who asks: the signing key's principal, checked against runledger.keys (a "
             "request is its key's principal's; default: the key's).")
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
    return runledger_home()


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


def bootstrap(explicit: str | None = None, role: str = current.ROLE) -> str:
    """``--bootstrap``, else ``RUNLEDGER_BOOTSTRAP``, else the remembered local stack
    (with ``role``'s credentials); a ``BrokerUnavailable`` naming all three if none."""
    if explicit or external_bootstrap():
        return bootstrap_from_env(explicit)
    stack = current.recall(home(), role)
    if stack is None:
        raise NoBootstrapAddress(
            f"no Kafka bootstrap address: pass --bootstrap, set {ENV_BOOTSTRAP}, or start a"
            f" local stack with `runledger stack up` (it is remembered in"
            f" {current.pointer(home())})")
    if stack.credentials is not None and not os.environ.get(ENV_CREDENTIALS):
        # The clients read the credentials from the environment (events.kafka.connection);
        # only this process's copy is set, and only for the remembered stack's address.
        os.environ[ENV_CREDENTIALS] = str(stack.credentials)
    return stack.bootstrap


def stack_signing_key(explicit: str | None = None, role: str = "controller") -> Path | None:
    """The remembered secure stack's key of ``role`` (``keys/controller.key``, or
    ``keys/operator.key`` for a person's requests), when the command talks to that stack
    (no ``--bootstrap``, no ``RUNLEDGER_BOOTSTRAP``); else None."""
    if explicit or external_bootstrap():
        return None
    stack = current.recall(home(), role)
    return stack.signing_key if stack is not None else None


def retry_s() -> float:
    """``RUNLEDGER_RETRY_S``: seconds to wait for a broker that is down or failing
    over (0: try once); 30 when unset."""
    text = os.environ.get(RETRY_ENV, "").strip()
    if not text:
        return DEFAULT_RETRY_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86_400:  # also refuses nan and inf
        raise UsageError(f"{RETRY_ENV}={text!r} is not a number of seconds from 0 to 86400;"
                         f" unset it for {DEFAULT_RETRY_S:g} s")
    return value


def connect(explicit: str | None = None, role: str = current.ROLE) -> str:
    """The bootstrap address (as :func:`bootstrap`), once a broker has answered; tried
    again for :func:`retry_s` seconds while none does (a restart, a failover)."""
    address = bootstrap(explicit, role)
    patience = retry_s()
    deadline = time.monotonic() + patience
    while True:
        left = deadline - time.monotonic()
        try:
            check_broker(address, timeout_s=min(BROKER_CHECK_S, max(left, 1.0)))
            return address
        except BrokerUnavailable as exc:
            if time.monotonic() + RETRY_PAUSE_S >= deadline:
                waited = f" (waited {patience:g} s)" if patience > 0 else ""
                raise BrokerUnavailable(f"{exc}{waited}") from None
            time.sleep(RETRY_PAUSE_S)


def catalog(explicit: str | None = None) -> Catalog:
    """The dataset catalog at ``--catalog``, else ``$RUNLEDGER_DATASETS`` or its default."""
    from dataplane.catalog import Catalog

    return Catalog(explicit if explicit is not None else default_catalog_url())
