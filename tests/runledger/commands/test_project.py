"""``runledger project --once`` and ``runledger replay --db NEW``, run as the README writes them.

The shared broker's log holds every test's records, so the checks are about this
test's run and about the two files agreeing, not about absolute totals.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from projectors.projector import table_digests
from tests.projectors.test_projector import count, publish

pytestmark = pytest.mark.kafka


def cli(*args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runledger.cli", *args, "--bootstrap", bootstrap],
                          capture_output=True, text=True, timeout=300)


def test_replay_rebuilds_the_projection_and_prints_equal_digests(
        bootstrap: str, tmp_path: Path, run_id: str) -> None:
    publish(bootstrap, run_id, 30)
    live = tmp_path / "live.duckdb"
    projected = cli("project", "--db", str(live), "--once", bootstrap=bootstrap)
    assert projected.returncode == 0, projected.stderr
    assert projected.stdout.startswith("projected ") and str(live) in projected.stdout
    assert count(live, f"SELECT count(*) FROM steps WHERE run_id = '{run_id}'") == 30

    new = tmp_path / "replay.duckdb"
    replayed = cli("replay", "--db", str(new), "--json", bootstrap=bootstrap)
    assert replayed.returncode == 0, replayed.stderr
    doc = json.loads(replayed.stdout)
    assert doc["records"] > 0
    assert count(new, f"SELECT count(*) FROM steps WHERE run_id = '{run_id}'") == 30
    # Both files stopped at the end of the log each saw; nobody else writes this
    # test's run, so its rows agree, and the printed digests are the file's own.
    assert doc["tables"] == table_digests(new)
    for table in ("steps", "checkpoints", "members", "generations"):
        sql = f"SELECT count(*) FROM {table} WHERE run_id = '{run_id}'"
        assert count(new, sql) == count(live, sql), table


def test_replay_refuses_an_existing_file(bootstrap: str, tmp_path: Path) -> None:
    existing = tmp_path / "there.duckdb"
    existing.write_bytes(b"")
    out = cli("replay", "--db", str(existing), bootstrap=bootstrap)
    assert out.returncode == 1
    assert out.stderr.strip() == (f"runledger: {existing} exists; replay builds a new database"
                                  " (remove it or pick another path)")
    assert existing.read_bytes() == b""
