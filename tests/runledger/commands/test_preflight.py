"""``runledger preflight`` on the session's broker, as an operator runs it.

A tiny spec over a real dataset on disk, with a live agent registered, passes
and its ``PreflightCompleted`` is on ``runledger.requests`` under the spec's
key; the same spec with a read-only checkpoint root, and with a dataset object
deleted, fails (exit 1) naming the root and the object.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from dataplane.catalog import Catalog
from events.kafka import EventProducer
from events.model import PreflightCompleted, node_key, spec_key
from events.topics import REPORTS
from tests.dataplane.corpus import write_dataset
from tests.events.builders import Ev
from tests.runledger.commands.test_signed_requests import cli, request_of

TINY = Path(__file__).resolve().parents[3] / "examples" / "tiny.yaml"


def _setup(tmp_path: Path, unique: str, bootstrap: str) -> tuple[str, Path, str]:
    """A catalog holding a 3-object dataset, a live agent with 2 free slots: (catalog,
    the dataset's root, its id)."""
    data = tmp_path / "data"
    manifest = write_dataset(data, {"web": [[40, 30], [50], [20, 20]]})
    catalog = str(tmp_path / "catalog")
    mid = Catalog(catalog).put(manifest)
    now = int(time.time() * 1000)
    node = f"pf-{unique[-8:]}"
    ev = Ev(node_key(node), start=now, tick=1, ids="{run}/e{n}")
    producer = EventProducer(bootstrap)
    producer.send(REPORTS, ev.agent_registered(node, slots=2, domain="default", n=0))
    producer.flush(30.0)
    return catalog, data, mid


def _spec(tmp_path: Path, name: str, dataset: str, root: str) -> Path:
    doc = yaml.safe_load(TINY.read_text())
    doc.update(name=name, dataset=dataset, code={"workdir": str(TINY.parent)})
    doc["checkpoint"]["root"] = root
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _read_only_root(tmp_path: Path) -> str:
    if os.geteuid() == 0:  # root writes through permission bits; sysfs refuses even root
        return "/sys/runledger-preflight-ro/ckpt"
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return str(ro / "ckpt")


@pytest.mark.kafka
def test_preflight_passes_for_the_tiny_spec_and_records_it_under_the_spec_key(
        bootstrap: str, unique: str, tmp_path: Path) -> None:
    catalog, _, mid = _setup(tmp_path, unique, bootstrap)
    spec = _spec(tmp_path, "tiny", mid, str(tmp_path / "ckpt"))
    out = cli("preflight", str(spec), "--catalog", catalog, "--json")
    assert out.returncode == 0, (out.stdout, out.stderr)
    doc = json.loads(out.stdout)
    assert doc["verdict"] == "pass" and doc["principal"] == "alice"
    checks = {r["check"]: r for r in doc["checks"]}
    assert checks["agents"]["verdict"] == "pass" and checks["agents"]["threshold"] == 2
    assert checks["storage.write"]["subject"] == str(tmp_path / "ckpt")
    assert checks["data.objects"]["figure"] == 3 and checks["data.digests"]["figure"] == 3
    assert not list((tmp_path / "ckpt" / ".preflight").iterdir())  # the probe was deleted
    event, _ = request_of(bootstrap, spec_key(doc["spec_digest"]), PreflightCompleted)
    assert isinstance(event, PreflightCompleted)
    assert (event.verdict, event.spec_digest, event.header.event_id) == (
        "pass", doc["spec_digest"], doc["event_id"])
    assert [c.check for c in event.checks] == [r["check"] for r in doc["checks"]]


@pytest.mark.kafka
def test_preflight_fails_naming_a_read_only_root_and_a_missing_object(
        bootstrap: str, unique: str, tmp_path: Path) -> None:
    catalog, data, mid = _setup(tmp_path, unique, bootstrap)
    ro_root = _read_only_root(tmp_path)
    out = cli("preflight", str(_spec(tmp_path, "ro", mid, ro_root)), "--catalog", catalog)
    assert out.returncode == 1, (out.stdout, out.stderr)
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("runledger: preflight of ") and f"storage.write {ro_root}" in line
    assert "data." not in line
    assert any(s.startswith("FAIL") and ro_root in s for s in out.stdout.splitlines())

    gone = data / "web" / "part-001.rltok"
    gone.unlink()
    spec = _spec(tmp_path, "gone", mid, str(tmp_path / "ckpt"))
    out = cli("preflight", str(spec), "--catalog", catalog, "--json")
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert f"data.object {gone}" in out.stderr and "storage" not in out.stderr
    doc = json.loads(out.stdout)
    [row] = [r for r in doc["checks"] if r["check"] == "data.object"]
    assert row["verdict"] == "fail" and f"{gone} is missing" in row["reason"]
    event, _ = request_of(bootstrap, spec_key(doc["spec_digest"]), PreflightCompleted)
    assert isinstance(event, PreflightCompleted) and event.verdict == "fail"
