"""Shared fixtures: a Kafka bootstrap address and unique names per test.

``make test`` starts one broker and exports ``RUNLEDGER_BOOTSTRAP``; a bare
``pytest`` run starts its own single-broker stack, lazily, the first time a
test asks for ``bootstrap``, and stops it at the end of the session. Tests that
run a controller get ``cluster``: a private broker, because a controller acts
on every run it finds on its log.
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from events.connection import ENV_CREDENTIALS
from runledger.stack import Stack
from tests import reaper
from tests.e2e.harness import Cluster
from tests.stacks import private_stack


def pytest_configure(config: pytest.Config) -> None:
    # Brokers, controllers, agents and workers started by tests die with this
    # process, even when it is killed before any teardown runs (tests/reaper.py).
    if reaper.MARK not in os.environ:
        reaper.start()
    # `stack up` remembers its stack under RUNLEDGER_HOME and other commands use it:
    # tests must neither see the user's stack nor leave theirs behind for the user.
    os.environ["RUNLEDGER_HOME"] = tempfile.mkdtemp(prefix="runledger-test-home-")


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
