"""End-to-end fixtures: a private broker and the processes of one scenario."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runledger.stack import Stack
from tests.e2e.harness import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    stack = Stack(tmp_path / "kafka", brokers=1)
    info = stack.up()
    work = tmp_path / "work"
    work.mkdir()
    c = Cluster(info.bootstrap, work)
    try:
        yield c
    finally:
        c.close()
        stack.down(purge=True)
