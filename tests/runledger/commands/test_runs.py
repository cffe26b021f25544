"""``runledger submit|status|cancel|runs`` as a user runs them: subprocesses, a real broker.

The tests marked ``kafka`` use the session's broker; the dataset alias tests
resolve through a real catalog in a temporary directory and need none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from typer.testing import CliRunner

from controller.spec.runspec import load_spec, parse_spec
from dataplane.catalog import Catalog, build_manifest
from dataplane.errors import CatalogError
from dataplane.synth import template, write_corpus
from events.kafka.clients import EventProducer
from events.kafka.connection import client_config
from events.kafka.consume import read_log
from events.model import CancelRequested, Event, ResumeRequested, RunSubmitted
from events.topics import REQUESTS, RUNS
from runledger.cli import app
from runledger.errors import BROKER_HINT
from runledger.signer import ENV_KEY
from runledger.specload import DatasetPin
from runledger.stack import Stack
from tests.events.builders import Ev, members
from tests.projectors.test_projector import publish
from tests.stacks import private_stack, registered_key, send_report, session_key

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "run.yaml"
MEMBERS = members("r0", "r1", node="node-a", domain="rack-1")


def cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user of the session's stack runs it: requests signed with its operator
    key (RUNLEDGER_KEY), whose principal is "operator"."""
    key = session_key()
    env = {**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap, "USER": "alice",
           **({ENV_KEY: str(key)} if key is not None else {})}
    return subprocess.run([sys.executable, "-m", "runledger.cli", *args], capture_output=True,
                          text=True, timeout=60, env=env, check=False)


def spec_file(tmp_path: Path, name: str, **changes: object) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text()) | {"name": name[:63]} | changes
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def events_of(bootstrap: str, topic: str, run: str) -> list[Event]:
    return [r.event for r in read_log(bootstrap, topic) if r.event.run_id == run]


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer(client_config(bootstrap, {"group.id": "test-offsets"}))
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in parts}
    finally:
        consumer.close()


@pytest.mark.kafka
def test_submit_writes_the_canonical_spec_to_requests(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    path = spec_file(tmp_path, unique)
    out = cli(bootstrap, "submit", str(path), "--principal", "operator", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    spec = load_spec(path)
    assert doc["spec_digest"] == spec.digest()
    assert doc["run_id"].startswith(f"{spec.name}-")

    [event] = events_of(bootstrap, REQUESTS, doc["run_id"])
    assert isinstance(event, RunSubmitted)
    assert event.spec_json == spec.canonical_json() and event.spec_digest == spec.digest()
    assert (event.principal, event.world_size, event.dataset_id) == (
        "operator", 4, spec.dataset)
    h = event.header
    assert (h.generation, h.producer, h.event_id) == (
        0, "cli/operator", f"{doc['run_id']}/submitted")
    assert abs(h.occurred_at - time.time() * 1000) < 120_000

    plain = cli(bootstrap, "submit", str(path))  # principal: the key's, not $USER; id alone
    assert plain.returncode == 0, plain.stderr
    [second] = plain.stdout.split()
    assert second != doc["run_id"]  # a new submission of the same spec is a new run
    [again] = events_of(bootstrap, REQUESTS, second)
    assert isinstance(again, RunSubmitted) and again.principal == "operator"


@pytest.mark.kafka
def test_a_bad_spec_names_every_bad_field_and_writes_nothing(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    path = spec_file(tmp_path, unique, dataset="corpus/latest", rpo_s=-1, colour="blue",
                     topology={"replicas": 0, "slots_per_node": 2})
    before = end_offsets(bootstrap, REQUESTS)
    out = cli(bootstrap, "submit", str(path), "--principal", f"bad-{unique}")
    after = end_offsets(bootstrap, REQUESTS)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert "4 problems" in out.stderr  # the elastic range is not judged against bad replicas
    for field in ("dataset:", "rpo_s:", "colour:", "topology.replicas:"):
        assert f"  {field}" in out.stderr, out.stderr
    assert "aliases must be resolved first" in out.stderr
    assert out.stdout == ""
    # The broker is shared: whatever others appended meanwhile, none of it is ours.
    if after != before:
        mine = [r for r in read_log(bootstrap, REQUESTS)
                if r.offset >= before.get(r.partition, 0)
                and r.event.header.producer == f"cli/bad-{unique}"]
        assert mine == []


@pytest.mark.kafka
def test_status_and_cancel_of_an_unknown_run_fail_cleanly(bootstrap: str, run_id: str) -> None:
    for args in (["status", run_id], ["cancel", run_id, "--reason", "nope"]):
        out = cli(bootstrap, *args)
        assert out.returncode == 1
        assert out.stderr.strip().splitlines() == [
            f"runledger: unknown run {run_id!r}: not on {REQUESTS} or {RUNS}"
        ]


def test_an_unreachable_broker_is_one_line_and_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each command waits out RUNLEDGER_RETRY_S, so two commands: a read and a write.
    monkeypatch.setenv("RUNLEDGER_RETRY_S", "1")
    for args in (["status", "some-run"], ["submit", str(EXAMPLE)]):
        out = cli("127.0.0.1:1", *args)
        assert out.returncode == 1
        [line] = out.stderr.strip().splitlines()
        assert line.startswith("runledger: no Kafka broker answered at 127.0.0.1:1")
        assert line.endswith(BROKER_HINT)


def test_a_retry_bound_that_is_not_seconds_is_a_usage_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv("RUNLEDGER_RETRY_S", bad)
        out = cli("127.0.0.1:1", "status", "some-run")
        assert out.returncode == 2
        assert out.stderr.strip().splitlines() == [
            f"runledger: RUNLEDGER_RETRY_S={bad!r} is not a number of seconds from 0 to 86400;"
            " unset it for 30 s"]


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[Stack]:
    """A broker of this test's own, to stop and start: never the shared one."""
    stack = private_stack(tmp_path / "kafka")
    try:
        yield stack
    finally:
        stack.down(purge=True)


@pytest.mark.slow
def test_status_with_the_broker_down_is_one_line_after_the_retry_bound(
        own_broker: Stack, run_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    address = own_broker.up().bootstrap
    publish(address, run_id, 3)
    assert cli(address, "status", run_id).returncode == 0
    own_broker.down()
    monkeypatch.setenv("RUNLEDGER_RETRY_S", "3")
    started = time.monotonic()
    out = cli(address, "status", run_id)
    assert 3 <= time.monotonic() - started < 30
    assert out.returncode == 1 and out.stdout == ""
    assert "Traceback" not in out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith(f"runledger: no Kafka broker answered at {address}")
    assert "(waited 3 s)" in line and "`runledger stack up`" in line


@pytest.mark.slow
def test_status_started_while_the_broker_is_down_succeeds_once_it_is_back(
        own_broker: Stack, run_id: str) -> None:
    address = own_broker.up().bootstrap
    publish(address, run_id, 3)
    own_broker.down()
    env = {**os.environ, "RUNLEDGER_BOOTSTRAP": address, "RUNLEDGER_RETRY_S": "90"}
    waiting = subprocess.Popen([sys.executable, "-m", "runledger.cli", "status", run_id,
                                "--json"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        assert waiting.poll() is None, "status gave up while still within its bound"
        assert own_broker.up(port=int(address.rpartition(":")[2])).bootstrap == address
        stdout, stderr = waiting.communicate(timeout=120)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, stderr
    doc = json.loads(stdout)
    assert doc["run_id"] == run_id and doc["state"] == "Submitted"


@pytest.mark.kafka
def test_cancel_writes_cancel_requested_and_status_shows_the_unseen_run(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    submitted = cli(bootstrap, "submit", str(spec_file(tmp_path, unique)))
    run = submitted.stdout.strip()
    mallory = registered_key(bootstrap, "mallory", tmp_path)  # neither submitter nor authority
    out = cli(bootstrap, "cancel", run, "--key", str(mallory), "--reason", "wrong data")
    assert out.returncode == 0, out.stderr
    assert run in out.stdout
    assert "not in the cancel authority" in out.stderr  # a warning: the controller decides

    [_, cancel] = events_of(bootstrap, REQUESTS, run)
    assert isinstance(cancel, CancelRequested)
    assert (cancel.principal, cancel.reason, cancel.header.producer) == (
        "mallory", "wrong data", "cli/mallory")

    status = cli(bootstrap, "status", run, "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["cancel_requested"] and doc["cancel_requests"][0]["principal"] == "mallory"
    # Unless a controller shares this broker, the run exists on requests only
    # (tests/runledger/views/test_runview.py covers that display without a broker).
    if not doc["seen_by_controller"]:
        assert doc["state"] == "Submitted"
        human = cli(bootstrap, "status", run).stdout
        assert "Submitted (not yet seen by the controller)" in human
        assert "requested by mallory" in human


@pytest.mark.kafka
def test_resume_writes_resume_requested_and_warns_when_the_run_is_not_paused(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    submitted = cli(bootstrap, "submit", str(spec_file(tmp_path, unique)))
    run = submitted.stdout.strip()
    out = cli(bootstrap, "resume", run, "--reason", "lr lowered")
    assert out.returncode == 0, out.stderr
    assert f"resume of {run} requested by operator" in out.stdout
    assert "not paused" in out.stderr  # a warning: the controller decides
    [_, resume] = events_of(bootstrap, REQUESTS, run)
    assert isinstance(resume, ResumeRequested)
    assert (resume.principal, resume.reason) == ("operator", "lr lowered")
    assert cli(bootstrap, "resume", run, "--reason", " ").returncode != 0


@pytest.mark.kafka
def test_status_and_runs_show_facts_from_the_runs_topic(
    bootstrap: str, run_id: str, unique: str
) -> None:
    spec = parse_spec(spec_file_text(unique), "t")
    now = int(time.time() * 1000)

    ev = Ev(run_id, start=now - 60_000, tick=1, ids="{run}/e{n}")  # a minute ago
    facts: list[Event] = [
        ev.submitted(spec_digest=spec.digest(), spec_json=spec.canonical_json(), principal="bob",
                     world_size=2, dataset_id=spec.dataset, n=0),
        ev.admitted(members=MEMBERS, n=1),
        ev.generation_started(1, members=MEMBERS, reason="admitted", n=2),
        ev.confirmed(1, 2, n=3),
        ev.failure(1, signature="exit:-9", detail="r1 killed", logical_id=None, node=None,
                   backoff_ms=1000, n=4),
        ev.generation_started(2, members=MEMBERS, reason="restart", n=5),
        ev.confirmed(2, 2, n=6),
        ev.committed(2, 20, manifest_path=f"ckpt/{run_id}/g2/s20",
                     manifest_digest="sha256:" + "c" * 64, n=7),
    ]
    reports = [
        ev.heartbeat(2, "r0", step=21, at=now - 2_000, n=8),
        # Generation 1 is revoked: its heartbeat says nothing about r1 today.
        ev.heartbeat(1, "r1", step=9, at=now - 500, n=9),
    ]
    producer = EventProducer(bootstrap)
    for e in facts:
        producer.send(RUNS, e)
    for e in reports:
        send_report(bootstrap, producer, e)
    producer.flush()

    out = cli(bootstrap, "status", run_id, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["state"], doc["generation"], doc["seen_by_controller"]) == ("Running", 2, True)
    assert doc["name"] == unique[:63] and doc["principal"] == "bob"
    assert doc["checkpoint"]["step"] == 20 and doc["checkpoint"]["generation"] == 2
    assert doc["failures"] == {"exit:-9": 1} and doc["retries"] == 1
    assert doc["last_failure"]["action"] == "restart"
    r0, r1 = doc["members"]
    assert r0["heartbeat_step"] == 21 and 2_000 <= r0["heartbeat_age_ms"] < 60_000
    assert r1["heartbeat_age_ms"] is None

    human = cli(bootstrap, "status", run_id).stdout
    assert "Running" in human and "step 20" in human and "exit:-9 x1" in human

    listing = cli(bootstrap, "runs", "--json")
    assert listing.returncode == 0, listing.stderr
    [row] = [r for r in json.loads(listing.stdout)["runs"] if r["run_id"] == run_id]
    assert (row["state"], row["generation"], row["principal"]) == ("Running", 2, "bob")
    assert row["name"] == unique[:63]
    assert run_id in cli(bootstrap, "runs").stdout


def spec_file_text(name: str) -> str:
    doc = yaml.safe_load(EXAMPLE.read_text()) | {"name": name[:63]}
    doc["topology"] = {"replicas": 2, "slots_per_node": 2}
    doc["membership"] = {"kind": "fixed"}
    return yaml.safe_dump(doc)


# --- the dataset alias at submit -------------------------------------------------


@pytest.fixture
def catalog(tmp_path: Path) -> tuple[str, str]:
    """A synthetic corpus stored in a fresh catalog as corpus/latest: (catalog URL, id)."""
    root = str(tmp_path / "corpus")
    write_corpus(root, seed=3)
    url = str(tmp_path / "cat")
    store = Catalog(url)
    manifest_id = store.put(build_manifest(template(root, seed=3), root))
    store.set_alias("corpus/latest", manifest_id)
    return url, manifest_id


def test_the_pin_resolves_an_alias_and_remembers_it(catalog: tuple[str, str]) -> None:
    url, manifest_id = catalog
    pin = DatasetPin(url)
    assert pin("corpus/latest") == manifest_id and pin.alias == "corpus/latest"
    with pytest.raises(CatalogError, match="known aliases: corpus/latest"):
        DatasetPin(url)("corpus/old")


def test_the_pin_checks_an_id_only_where_a_catalog_exists(
    catalog: tuple[str, str], tmp_path: Path
) -> None:
    url, manifest_id = catalog
    elsewhere = "sha256:" + "5b" * 32
    nowhere = DatasetPin(str(tmp_path / "no-catalog"))
    assert nowhere(elsewhere) == elsewhere and nowhere.alias is None
    pin = DatasetPin(url)
    shouted = "SHA256:" + manifest_id.removeprefix("sha256:").upper()
    assert pin(shouted) == shouted  # found in the catalog; the spec check lowercases it
    assert pin.alias is None
    with pytest.raises(CatalogError, match="unknown dataset manifest"):
        pin(elsewhere)
    assert pin("sha256:not-an-id") == "sha256:not-an-id"  # the spec check names it


def test_submit_prints_the_resolution_before_connecting(
    catalog: tuple[str, str], tmp_path: Path
) -> None:
    url, manifest_id = catalog
    doc = yaml.safe_load(EXAMPLE.read_text()) | {"dataset": "corpus/latest"}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    env = {"RUNLEDGER_DATASETS": None, "RUNLEDGER_BOOTSTRAP": None}
    out = CliRunner().invoke(app, ["submit", str(path), "--catalog", url, "--principal", "bob"],
                             env=env)
    assert out.exit_code == 1  # no broker configured: the failure comes after resolution
    first, second = out.stderr.splitlines()
    assert first == f"resolved corpus/latest -> {manifest_id}"
    assert second.startswith("runledger: no Kafka bootstrap address")

    path.write_text(yaml.safe_dump(doc | {"dataset": "corpus/old"}))
    out = CliRunner().invoke(app, ["submit", str(path), "--catalog", url], env=env)
    assert out.exit_code == 1 and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("runledger: unknown dataset alias 'corpus/old'")


def test_submit_dry_run_prints_the_canonical_spec_and_digest_and_writes_nothing(
    catalog: tuple[str, str], tmp_path: Path
) -> None:
    url, manifest_id = catalog
    doc = yaml.safe_load(EXAMPLE.read_text()) | {"dataset": "corpus/latest"}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    # No broker anywhere: a dry run must not look for one.
    env = {"RUNLEDGER_DATASETS": None, "RUNLEDGER_BOOTSTRAP": None,
           "RUNLEDGER_HOME": str(tmp_path / "home")}
    out = CliRunner().invoke(app, ["submit", str(path), "--catalog", url, "--dry-run"], env=env)
    assert out.exit_code == 0, out.output
    shown = json.loads(out.stdout)
    expected = load_spec(path, resolve_dataset=DatasetPin(url))
    assert shown["spec_digest"] == expected.digest()
    assert shown["spec"] == json.loads(expected.canonical_json())
    assert shown["spec"]["dataset"] == manifest_id  # the alias resolved, as a run records it
    assert not (tmp_path / "home").exists()
    as_json = CliRunner().invoke(app, ["submit", str(path), "--catalog", url, "--dry-run",
                                       "--json"], env=env)
    assert json.loads(as_json.stdout) == shown and len(as_json.stdout.splitlines()) == 1
    path.write_text(yaml.safe_dump(doc | {"topology": {"replicas": 0}}))
    bad = CliRunner().invoke(app, ["submit", str(path), "--catalog", url, "--dry-run"], env=env)
    assert bad.exit_code == 1 and bad.stdout == "" and "replicas" in bad.stderr


@pytest.mark.kafka
def test_submit_records_the_resolved_id(
    bootstrap: str, unique: str, catalog: tuple[str, str], tmp_path: Path
) -> None:
    url, manifest_id = catalog
    path = spec_file(tmp_path, unique, dataset="corpus/latest")
    env = {**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap, "RUNLEDGER_DATASETS": url,
           ENV_KEY: str(session_key())}
    out = subprocess.run([sys.executable, "-m", "runledger.cli", "submit", str(path), "--json"],
                         capture_output=True, text=True, timeout=60, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stderr == f"resolved corpus/latest -> {manifest_id}\n"
    doc = json.loads(out.stdout)
    [event] = events_of(bootstrap, REQUESTS, doc["run_id"])
    assert isinstance(event, RunSubmitted) and event.dataset_id == manifest_id
    assert json.loads(event.spec_json)["dataset"] == manifest_id
    # The spec digest is that of the spec with the id written in place of the alias.
    pinned = load_spec(spec_file(tmp_path, unique, dataset=manifest_id))
    assert doc["spec_digest"] == pinned.digest()


def _bomb(levels: int, width: int) -> str:
    lines = ["  l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]"
              for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("change", "expected"), [
    (lambda t: t + "# " + "x" * 1_000_000 + "\n", "(spec): too_large: the spec is 1006"),
    (lambda t: t + "deep: " + "[" * 3000 + "]" * 3000 + "\n", "(spec): too_deep: nested more"),
    (lambda t: t.replace("\nmodel:\n", "\nmodel:\n" + _bomb(9, 10), 1),
     "(spec): too_many_aliases:"),
    (lambda t: t.replace("\nmodel:\n", "\nmodel:\n" + _bomb(6, 10), 1),
     "(spec): too_many_values:"),
    (lambda t: t.replace("mtbf_prior_s: 21600", "mtbf_prior_s: 1.0e+300"),
     "checkpoint.mtbf_prior_s: 1e+300 is out of range: must be >= 1 and <= 315576000 s"),
    (lambda t: t.replace("root: s3://training-checkpoints/tiny-lm", "root: /ckpt/../../etc"),
     "checkpoint.root: bad_path: root '/ckpt/../../etc' has a '..' segment"),
])
def test_submit_refuses_an_unbounded_spec_quickly_with_no_traceback(
    tmp_path: Path, change: Any, expected: str
) -> None:
    text = EXAMPLE.read_text()
    path = tmp_path / "run.yaml"
    path.write_text(change(text))
    assert path.read_text() != text
    started = time.monotonic()
    out = cli("127.0.0.1:1", "submit", str(path))  # refused before any broker is asked
    assert time.monotonic() - started < 20  # the interpreter's start included; no hang
    assert out.returncode == 1 and out.stdout == ""
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[0] == f"runledger: {path}: invalid run spec, 1 problem:", lines
    assert lines[1].strip().startswith(expected), lines
