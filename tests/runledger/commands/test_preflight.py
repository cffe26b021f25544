"""``runledger preflight`` on the session's broker, as an operator runs it.

A tiny spec over a real dataset on disk, with a live agent registered, passes
and its ``PreflightCompleted``, signed with the operator's key, is on
``runledger.requests`` under the spec's key; the same spec with a read-only
checkpoint root, and with a dataset object deleted, fails (exit 1) naming the root and the object.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import yaml

from agent.node import send_report
from dataplane.catalog import Catalog
from events.kafka.clients import EventProducer
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    Header,
    PreflightCompleted,
    node_key,
    spec_key,
)
from events.signed.signing import SigningKey
from runledger.nodekeys import enroll
from tests.dataplane.corpus import write_dataset
from tests.runledger.commands.test_signed_requests import cli, judge, request_of, stack_dir

TINY = Path(__file__).resolve().parents[3] / "examples" / "tiny.yaml"
PYTHON = platform.python_version()


def _torch() -> str:
    """As the agents this venv starts report it, so an agent of an earlier test still
    live agrees with this one."""
    try:
        return version("torch")
    except PackageNotFoundError:
        return "-"


def _dataset(tmp_path: Path) -> tuple[str, Path, str]:
    """A catalog holding a 3-object dataset: (catalog, the dataset's root, its id)."""
    data = tmp_path / "data"
    manifest = write_dataset(data, {"web": [[40, 30], [50], [20, 20]]})
    catalog = str(tmp_path / "catalog")
    return catalog, data, Catalog(catalog).put(manifest)


@contextmanager
def _agent(bootstrap: str, unique: str) -> Iterator[None]:
    """A live agent with 2 free slots: registered, then a heartbeat a second, as an agent
    beats, so it stays live however long a loaded machine takes to run the command."""
    node = f"pf-{unique[-8:]}"
    producer = EventProducer(bootstrap)
    stop = threading.Event()
    # Signed with its own node key, as an agent's reports are (events.kafka.reportdoor).
    with tempfile.TemporaryDirectory() as folder:
        key, _ = enroll(bootstrap, node, Path(folder) / "node.key",
                        SigningKey.load(stack_dir() / "keys" / "admin.key"))

    def header(n: int) -> Header:
        return Header(f"{node_key(node)}/pf{n}", node_key(node), 0, int(time.time() * 1000),
                      f"agent/{node}")

    send_report(producer, AgentRegistered(header=header(0), node=node, slots=2,
                                          domain="default", python_version=PYTHON,
                                          torch_version=_torch()), key)
    producer.flush(30.0)

    def beat() -> None:
        n = 1
        while not stop.wait(1.0):
            send_report(producer, AgentHeartbeatRecorded(
                header=header(n), node=node, slots=2, domain="default", busy_slots=0), key)
            producer.flush(30.0)
            n += 1

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


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
    catalog, _, mid = _dataset(tmp_path)
    spec = _spec(tmp_path, "tiny", mid, str(tmp_path / "ckpt"))
    key = stack_dir() / "keys" / "operator.key"
    with _agent(bootstrap, unique):
        out = cli("preflight", str(spec), "--catalog", catalog, "--key", str(key), "--json")
    assert out.returncode == 0, (out.stdout, out.stderr)
    doc = json.loads(out.stdout)
    assert doc["verdict"] == "pass" and doc["principal"] == "operator"
    checks = {r["check"]: r for r in doc["checks"]}
    assert checks["agents"]["verdict"] == "pass" and checks["agents"]["threshold"] == 2
    assert checks["software.python"]["verdict"] == "pass" and PYTHON in checks[
        "software.python"]["reason"]
    assert checks["storage.write"]["subject"] == str(tmp_path / "ckpt")
    assert checks["data.objects"]["figure"] == 3 and checks["data.digests"]["figure"] == 3
    assert not list((tmp_path / "ckpt" / ".preflight").iterdir())  # the probe was deleted
    event, record = request_of(bootstrap, spec_key(doc["spec_digest"]), PreflightCompleted)
    assert isinstance(event, PreflightCompleted) and judge(bootstrap, record, "operator") is None
    assert (event.verdict, event.spec_digest, event.header.event_id) == (
        "pass", doc["spec_digest"], doc["event_id"])
    assert [c.check for c in event.checks] == [r["check"] for r in doc["checks"]]


@pytest.mark.kafka
def test_preflight_fails_naming_a_read_only_root_and_a_missing_object(
        bootstrap: str, unique: str, tmp_path: Path) -> None:
    catalog, data, mid = _dataset(tmp_path)
    ro_root = _read_only_root(tmp_path)
    gone = data / "web" / "part-001.rltok"
    signs = ("--key", str(stack_dir() / "keys" / "operator.key"))
    with _agent(bootstrap, unique):
        ro = cli("preflight", str(_spec(tmp_path, "ro", mid, ro_root)), "--catalog", catalog,
                 *signs)
        gone.unlink()
        spec = _spec(tmp_path, "gone", mid, str(tmp_path / "ckpt"))
        missing = cli("preflight", str(spec), "--catalog", catalog, "--json", *signs)

    assert ro.returncode == 1, (ro.stdout, ro.stderr)
    [line] = ro.stderr.strip().splitlines()
    assert line.startswith("runledger: preflight of ")
    assert line.endswith(f"failed: storage.write {ro_root}"), line
    [row] = [s for s in ro.stdout.splitlines() if s.startswith("FAIL")]
    assert ro_root in row and "Error" in row  # the root and the store's error

    assert missing.returncode == 1, (missing.stdout, missing.stderr)
    assert missing.stderr.strip().endswith(
        f"failed: data.object {gone}; data.objects {mid}"), missing.stderr
    doc = json.loads(missing.stdout)
    [row] = [r for r in doc["checks"] if r["check"] == "data.object"]
    assert row["verdict"] == "fail" and f"{gone} is missing" in row["reason"]
    event, _ = request_of(bootstrap, spec_key(doc["spec_digest"]), PreflightCompleted)
    assert isinstance(event, PreflightCompleted) and event.verdict == "fail"
