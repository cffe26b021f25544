"""Shared fixtures: a Kafka bootstrap address and unique names per test.

``make test`` starts one broker and exports ``RUNLEDGER_BOOTSTRAP``; a bare
``pytest`` run starts its own single-broker stack, lazily, the first time a
test asks for ``bootstrap``, and stops it at the end of the session. Tests that
run a controller get ``cluster``: a private broker, because a controller acts
on every run it finds on its log.

The suite is hermetic (:func:`hermetic_home`): before any test module is
imported, HOME, the XDG directories and ``RUNLEDGER_HOME`` point into a fresh
temporary directory (removed at the end) and the user's other ``RUNLEDGER_*``
settings are dropped; ``RUNLEDGER_BOOTSTRAP`` and ``RUNLEDGER_CREDENTIALS``
stay, the session's broker. tests/test_hermetic.py proves a user's catalog and
running stack change nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from events.kafka.connection import ENV_CREDENTIALS
from runledger.stack import Stack, jars
from tests import reaper
from tests.e2e.harness import Cluster
from tests.stacks import private_stack

# What the suite may take from its caller's environment: the session's broker and
# its admin (scripts/with-broker.sh), the Kafka jar cache, the soak's size and the
# reaper's mark. Any other RUNLEDGER_* (a catalog, a key, a fault to inject, a
# home) is the user's, and would change what the tests see.
KEPT_ENV = frozenset({"RUNLEDGER_BOOTSTRAP", ENV_CREDENTIALS, jars.JARS_ENV,
                      "RUNLEDGER_SOAK_ROUNDS", reaper.MARK})
# The variables that name a home; each gets a fresh directory of the suite's own.
HOME_DIRS = {"HOME": "home", "XDG_CONFIG_HOME": "config", "XDG_DATA_HOME": "data",
             "XDG_CACHE_HOME": "cache", "XDG_STATE_HOME": "state", "RUNLEDGER_HOME": "runledger"}
_suite_home: Path | None = None


def hermetic_home() -> Path:
    """Give this process (and every process it starts) a home of its own: HOME, the XDG
    directories and RUNLEDGER_HOME in a fresh temporary directory, and no RUNLEDGER_*
    setting of the user's, so neither the user's catalog nor the stack `stack up`
    remembered for them changes a result, and the suite leaves nothing in their home.
    The Kafka jar cache is found from the real home first."""
    os.environ[jars.JARS_ENV] = str(jars.cache_root())
    for name in [n for n in os.environ if n.startswith("RUNLEDGER_") and n not in KEPT_ENV]:
        del os.environ[name]
    root = Path(tempfile.mkdtemp(prefix="runledger-test-home-"))
    for name, folder in HOME_DIRS.items():
        (root / folder).mkdir()
        os.environ[name] = str(root / folder)
    return root


def pytest_configure(config: pytest.Config) -> None:
    global _suite_home
    # Brokers, controllers, agents and workers started by tests die with this
    # process, even when it is killed before any teardown runs (tests/reaper.py).
    if reaper.MARK not in os.environ:
        reaper.start()
    # Before any test module is imported: even a bare `pytest` never reads or writes
    # the user's home (`make test` gives the whole run one already, scripts/test.sh).
    _suite_home = hermetic_home()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _suite_home is not None:
        shutil.rmtree(_suite_home, ignore_errors=True)


@pytest.fixture(scope="session")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    existing = os.environ.get("RUNLEDGER_BOOTSTRAP")
    if existing:
        yield existing
        return
    stack = Stack(tmp_path_factory.mktemp("kafka"), brokers=1)
    try:
        info = stack.up()
        # Code under test that reads the environment must find the same broker,
        # as the same principal (the stack's admin, as `make test` exports).
        os.environ["RUNLEDGER_BOOTSTRAP"] = info.bootstrap
        os.environ[ENV_CREDENTIALS] = str(info.credentials)
        yield info.bootstrap
    finally:
        os.environ.pop("RUNLEDGER_BOOTSTRAP", None)
        os.environ.pop(ENV_CREDENTIALS, None)
        stack.down(purge=True)


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> str:
    """A suffix unique to this test invocation, legal in topic names and run ids.

    Tests share one broker, so topics, run ids and consumer groups must not collide
    across tests or across repeated runs against a long-lived cluster.
    """
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:60].strip("-")
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic_name(unique: str) -> str:
    return f"test.{unique}"


@pytest.fixture
def run_id(unique: str) -> str:
    return f"run-{unique}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A private one-node broker and the processes of one scenario, all stopped after."""
    stack = private_stack(tmp_path / "kafka")
    info = stack.up()
    work = tmp_path / "work"
    work.mkdir()
    c = Cluster(info.bootstrap, work, info.keys)
    try:
        yield c
    finally:
        c.close()
        stack.down(purge=True)
