"""``runledger pilot`` on a private stack with a controller and an agent as real processes.

docs/cli.md's pilot command on ``examples/tiny.yaml`` (its dataset alias in the
test's catalog, its checkpoint root under the test's directory, where the agent
allows it): the pilot run restores its first checkpoint after the injected
crash, succeeds and publishes its manifest, and the signed ``PilotCompleted``
under the ORIGINAL spec's key carries the figures. The same spec with a
read-only checkpoint root is refused before anything is submitted, naming the
root, and the refusal is recorded too; so is one whose dataset lost an object, naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dataplane.catalog import Catalog
from events.kafka.consume import read_log
from events.model import AgentRegistered, PilotCompleted, spec_key
from events.topics import REPORTS
from tests.e2e.ckpt_setup import dataset
from tests.e2e.harness import Cluster, wait
from tests.runledger.commands.test_preflight import _read_only_root
from tests.runledger.commands.test_signed_requests import judge, request_of

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]

TINY = Path(__file__).resolve().parents[3] / "examples" / "tiny.yaml"
LIMIT_S = 600  # generous for a loaded 2-core machine


def _tiny(cluster: Cluster, name: str, root: str) -> Path:
    doc = yaml.safe_load(TINY.read_text())
    doc.update(name=name, code={"workdir": str(TINY.parent)})
    doc["command"] = [sys.executable, "train_tiny.py"]  # this venv's python, as the README's
    doc["checkpoint"]["root"] = root
    path = cluster.work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _pilot(cluster: Cluster, spec: Path, *args: str) -> subprocess.CompletedProcess[str]:
    key = ["--key", str(cluster.keys / "operator.key")] if cluster.keys is not None else []
    return subprocess.run(
        [sys.executable, "-m", "runledger.cli", "pilot", str(spec), *args, *key],
        env=cluster.env, text=True, capture_output=True, timeout=LIMIT_S, check=False)


def test_pilot_of_tiny_restores_its_first_commit_and_a_read_only_root_is_refused(
        cluster: Cluster, tmp_path: Path) -> None:
    ds = dataset(cluster)
    Catalog(cluster.env["RUNLEDGER_DATASETS"]).set_alias("synth/latest", ds)
    cluster.controller()
    cluster.agent("n1", 2)
    wait(lambda: any(isinstance(r.event, AgentRegistered)
                     for r in read_log(cluster.bootstrap, REPORTS)), 120, "the agent")

    out = _pilot(cluster, _tiny(cluster, "tiny", str(cluster.work / "ckpt")),
                 "--steps", "6", "--replicas", "1", "--timeout", str(LIMIT_S - 60), "--json")
    assert out.returncode == 0, (out.stdout, out.stderr, cluster.log_of("agent-n1")[-3000:])
    doc = json.loads(out.stdout)
    run = doc["pilot_run_id"]
    assert run.startswith("tiny-pilot-") and f"pilot run {run} submitted" in out.stderr
    checks = {r["check"]: r for r in doc["checks"]}
    assert {c: checks[c]["verdict"] for c in ("pilot.run", "pilot.restore", "pilot.manifest")
            } == dict.fromkeys(("pilot.run", "pilot.restore", "pilot.manifest"), "pass")
    assert "generation 2 restored step 2" in checks["pilot.restore"]["reason"]
    assert checks["pilot.checkpoint"]["figure"] >= 2  # steps 2 (gen 1), 4 and 6 (gen 2)
    event, record = request_of(cluster.bootstrap, spec_key(doc["spec_digest"]), PilotCompleted)
    assert isinstance(event, PilotCompleted) and event.verdict == "pass"
    assert (event.pilot_run_id, event.steps, event.replicas) == (run, 6, 1)
    assert event.step_time_ms is not None and event.step_time_ms > 0
    assert event.checkpoint_ms is not None and event.restore_ms is not None
    assert event.restore_ms == doc["figures"]["restore_ms"]
    if cluster.keys is not None:
        assert judge(cluster.bootstrap, record, "operator") is None

    ro_root = _read_only_root(tmp_path)
    ro_spec = _tiny(cluster, "tiny-ro", ro_root)
    ro = _pilot(cluster, ro_spec)  # the table, as an operator reads it
    assert ro.returncode == 1, (ro.stdout, ro.stderr)
    assert f"failed: storage.write {ro_root}; nothing was submitted" in ro.stderr, ro.stderr
    [row] = [line for line in ro.stdout.splitlines() if line.startswith("FAIL")]
    assert "storage.write" in row and ro_root in row
    digest = json.loads(cluster.cli("submit", str(ro_spec), "--dry-run", "--json").stdout)[
        "spec_digest"]
    assert f"pilot fail for {digest} (" in ro.stdout and "pilot run" not in ro.stdout
    event, _ = request_of(cluster.bootstrap, spec_key(digest), PilotCompleted)
    assert isinstance(event, PilotCompleted) and event.verdict == "fail"
    assert event.pilot_run_id == "" and event.step_time_ms is None

    manifest = Catalog(cluster.env["RUNLEDGER_DATASETS"]).get(ds)
    gone = manifest.url(manifest.sources[0].objects[0])
    Path(gone).unlink()
    missing = _pilot(cluster, _tiny(cluster, "tiny-gone", str(cluster.work / "ckpt")), "--json")
    assert missing.returncode == 1, (missing.stdout, missing.stderr)
    assert f"failed: data.object {gone}; data.objects {ds}; nothing was submitted" in (
        missing.stderr), missing.stderr
