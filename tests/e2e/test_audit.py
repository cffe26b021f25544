"""A signed run audited as a user would: ``key list``, ``submit --key``, ``audit verify``.

Real processes on a private secure broker whose ``stack up`` made and
registered its keys (tests/e2e/harness.py). The cluster's controller signs
with the stack's ``controller.key``, which ``stack up`` registered; the run is
submitted signed with the stack's ``operator.key``. When
it has finished, ``runledger audit verify`` passes every run of the log with
the stack's admin key pinned, and in an exported copy one flipped byte of a
fact is named by where it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from events.model import RunFinished
from events.signing import SigningKey
from runledger.logcopy import RUNS_FILE, from_line, to_line
from tests.e2e.harness import Cluster, spec

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def test_a_signed_run_verifies_through_the_cli_and_a_flipped_byte_is_named(
        cluster: Cluster, tmp_path: Path) -> None:
    keys = tmp_path / "kafka" / "keys"  # the private stack's (tests/conftest.py)
    admin = SigningKey.load(keys / "admin.key")
    listed = cluster.cli("key", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert SigningKey.load(keys / "controller.key").key_id in listed.stdout
    cluster.controller()
    cluster.agent("n1", 2)
    path = cluster.work / "audited.yaml"
    path.write_text(yaml.safe_dump(spec("audited", ["--steps", "8", "--step-time", "0.1"])))
    out = cluster.cli("submit", str(path), "--key", str(keys / "operator.key"), "--json")
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)["run_id"]
    cluster.wait_facts(run, lambda f: any(isinstance(e, RunFinished) for e in f), timeout=120,
                       what="the run's end")

    verdict = cluster.cli("audit", "verify", "--trust", admin.key_id)
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    lines = verdict.stdout.splitlines()
    assert lines[0].startswith(f"trust anchor {admin.key_id} (admin's admin key)")
    [line] = [x for x in lines if x.startswith(f"run {run}: ")]
    assert line.startswith(f"run {run}: ok, ")

    copy = tmp_path / "copy"
    exported = cluster.cli("audit", "export", str(copy))
    assert exported.returncode == 0, exported.stderr
    lines = (copy / RUNS_FILE).read_text().splitlines()
    mine = [i for i, x in enumerate(lines) if from_line(x, "x").key == run.encode()]
    at = mine[len(mine) // 2]
    record = from_line(lines[at], "x")
    value = bytearray(record.value)
    value[-1] ^= 0x01
    lines[at] = to_line(type(record)(record.topic, record.partition, record.offset,
                                     bytes(value), record.headers, record.key))
    (copy / RUNS_FILE).write_text("\n".join(lines) + "\n")
    broken = cluster.cli("audit", "verify", run, "--from", str(copy))
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"run {run}: FAILED" in broken.stdout
    assert f"  {record.where} {run}: bad_signature (" in broken.stdout
