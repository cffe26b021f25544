"""``runledger demo`` end to end, as a user runs it: one subprocess, checked from its
JSON summary and from the run's log.

It starts the demo's own broker in the work directory (``--keep-stack`` leaves it
up so this test can read the log, and stops it at the end) rather than using
the session's broker: a controller acts on every run it finds on its broker,
so the demo's controller would act on other tests' runs, and theirs on the
demo's (see tests/e2e/harness.py). That costs the broker's start, about 7 s.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from events.kafka.connection import ENV_CREDENTIALS
from events.kafka.consume import read_log
from events.model import Event, GenerationStarted, ManifestCommitted, StepCommitted
from events.topics import RUNS
from queries.runner import run_query
from runledger.stack import Stack
from tests.e2e.harness import demo_processes, of_type
from tests.queries.ettr_oracle import ettr_parts

STEPS, INTERVAL, KILL = 20, 5, 12  # rank 1 dies after step 12: steps 11 and 12 are replayed


@pytest.mark.e2e
@pytest.mark.slow
def test_the_demo_kills_a_worker_recovers_from_a_checkpoint_and_succeeds(
        tmp_path: Path) -> None:
    work = tmp_path / "demo"
    session = os.environ.get(ENV_CREDENTIALS)
    env = {k: v for k, v in os.environ.items() if k != "RUNLEDGER_BOOTSTRAP"}
    cmd = [sys.executable, "-m", "runledger.cli", "demo", "--work-dir", str(work), "--json",
           "--keep-stack", "--steps", str(STEPS), "--interval", str(INTERVAL),
           "--kill-step", str(KILL), "--step-sleep", "0.3", "--timeout", "400"]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=540,
                              check=False)
        assert done.stdout.strip(), done.stderr[-4000:]
        summary = json.loads(done.stdout)
        assert done.returncode == 0, f"{summary['error']}\n{done.stderr[-4000:]}"
        _check_summary(summary, work)
        # The demo's stack has principals of its own: read as its operator.
        os.environ[ENV_CREDENTIALS] = str(work / "stack" / "credentials" / "operator.properties")
        try:
            facts = [r.event for r in read_log(summary["bootstrap"], RUNS)
                     if r.event.run_id == summary["run_id"]]
        finally:
            if session is None:
                os.environ.pop(ENV_CREDENTIALS, None)
            else:
                os.environ[ENV_CREDENTIALS] = session
        _check_log(facts)
        _check_ettr(summary, facts)
        _check_provenance(summary, work)
        _check_audit(summary, work)
        _check_no_secret_leaked(work)
        assert Path(summary["report"]).is_file()
        # Every process the demo started is gone (only the broker stays, --keep-stack).
        assert demo_processes(work) == []
    finally:
        Stack(work / "stack").down(purge=True)


def _audit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runledger.cli", "audit", "verify", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def _check_audit(summary: dict[str, Any], work: Path) -> None:
    """The demo's signed log verifies offline from its copy; a copy with one byte
    altered, and one with a record removed, fail, naming the record."""
    copy = work / "log-copy"
    assert _audit("--from", str(copy)).returncode == 0
    lines = (copy / "runs.jsonl").read_text().splitlines()
    run_key = base64.b64encode(summary["run_id"].encode()).decode()
    ours = [i for i, line in enumerate(lines) if json.loads(line)["key"] == run_key]
    at = ours[len(ours) // 2]  # a fact in the middle of the run's chain
    doc = json.loads(lines[at])
    where = f"{doc['topic']}[{doc['partition']}]@{doc['offset']}"
    value = bytearray(base64.b64decode(doc["value"]))
    value[-1] ^= 0x01
    altered = [*lines[:at], json.dumps({**doc, "value": base64.b64encode(value).decode()}),
               *lines[at + 1:]]
    removed = [*lines[:at], *lines[at + 1:]]
    for name, variant in (("altered", altered), ("removed", removed)):
        tampered = work / f"log-copy-{name}"
        shutil.copytree(copy, tampered)
        (tampered / "runs.jsonl").write_text("\n".join(variant) + "\n")
        done = _audit("--from", str(tampered))
        assert done.returncode == 1, (name, done.stdout, done.stderr)
        # The altered record itself; after a removal, the next fact of the run, whose
        # link no longer matches.
        named = where if name == "altered" else json.loads(lines[ours[ours.index(at) + 1]])
        if name == "removed":
            named = f"{named['topic']}[{named['partition']}]@{named['offset']}"
        assert named in done.stdout + done.stderr, (name, done.stdout)


def _check_no_secret_leaked(work: Path) -> None:
    """No password and no private key of the demo's stack is in anything the demo
    wrote besides the secret files themselves: logs, the projection, the report, the
    summary, the log copy, the workers' files, the broker's logs and data."""
    secrets: list[bytes] = []
    for creds in (work / "stack" / "credentials").glob("*.properties"):
        secrets += [line.partition("=")[2].encode() for line in creds.read_text().splitlines()
                    if line.startswith("sasl.password=")]
    for key in (work / "stack" / "keys").glob("*.key"):
        body = "".join(line for line in key.read_text().splitlines() if "-----" not in line)
        secrets.append(body.encode())
    assert len(secrets) >= 8
    private = {work / "stack" / "credentials", work / "stack" / "keys"}
    checked = 0
    for path in work.rglob("*"):
        if not path.is_file() or any(p in path.parents for p in private):
            continue
        if path.name == "server.properties":  # the broker's own (owner-only) configuration
            continue
        data = path.read_bytes()
        checked += 1
        assert not any(secret in data for secret in secrets), f"a secret is in {path}"
    assert checked > 20


def _check_summary(summary: dict[str, Any], work: Path) -> None:
    assert summary["ok"] is True and summary["error"] is None
    assert summary["state"] == "Succeeded"
    assert summary["workdir"] == str(work) and summary["stack_started"] is True
    assert summary["db"] == str(work / "projection.duckdb") and Path(summary["db"]).is_file()
    assert summary["report"] == str(work / "report.html")
    assert summary["run_id"].startswith("demo-")
    # The live view ran beside the services (8265, or a free port when that was taken).
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", summary["ui_url"]), summary["ui_url"]
    assert json.dumps({"url": summary["ui_url"]}) in (work / "logs" / "ui.log").read_text()
    gens = summary["generations"]
    assert len(gens) >= 2
    assert gens[0]["resume_step"] is None
    committed_g1 = {c["step"] for c in summary["checkpoints"] if c["generation"] == 1}
    assert gens[1]["resume_step"] in committed_g1 and gens[1]["resume_step"] < KILL
    assert summary["final_step"] == summary["planned_steps"] == STEPS
    assert summary["kill_step"] == KILL
    assert (work / "summary.json").is_file()
    assert json.loads((work / "summary.json").read_text()) == summary


def _check_log(facts: list[Event]) -> None:
    (end,) = of_type(facts, "RunFinished")
    assert end.outcome == "succeeded"
    starts: list[GenerationStarted] = of_type(facts, "GenerationStarted")
    assert [g.generation for g in starts] == [1, 2]
    resume = starts[1].resume_step
    assert resume == KILL - KILL % INTERVAL  # the latest checkpoint before the kill
    # That checkpoint was committed by generation 1 before generation 2 started.
    before = facts[: facts.index(starts[1])]
    assert any(isinstance(e, ManifestCommitted) and e.generation == 1 and e.step == resume
               for e in before)
    (failure,) = of_type(facts, "FailureClassified")
    assert failure.generation == 1 and failure.failure_class == "worker_crash"
    assert failure.action == "restart" and failure.signature.endswith("signal=9")
    # Generation 2 replays from the checkpoint to the last planned step, each step once.
    replayed = [e.step for e in facts if isinstance(e, StepCommitted) and e.generation == 2]
    assert replayed == list(range(resume + 1, STEPS + 1))
    first = [e.step for e in facts if isinstance(e, StepCommitted) and e.generation == 1]
    assert resume < max(first) <= KILL  # work past the checkpoint was lost, none past the kill


def _check_ettr(summary: dict[str, Any], facts: list[Event]) -> None:
    """The SQL's parts sum to the allocation within 1%, and a Python recomputation
    from the raw events of the log agrees part by part."""
    con = duckdb.connect(summary["db"], read_only=True)
    try:
        sql = {r["part"]: r["seconds"]
               for r in run_query(con, "ettr", summary["run_id"]).records()}
    finally:
        con.close()
    allocated = sql.pop("allocated")
    assert allocated > 0
    assert abs(sum(sql.values()) - allocated) <= 0.01 * allocated
    assert sql["productive"] > 0 and sql["lost_work"] > 0 and sql["recovery"] > 0
    oracle = ettr_parts(facts)
    assert oracle["allocated"] == pytest.approx(allocated, abs=2e-3)
    for part, seconds in sql.items():
        assert seconds == pytest.approx(oracle[part], abs=5e-3), part


def _check_provenance(summary: dict[str, Any], work: Path) -> None:
    """The final checkpoint's provenance lists exactly the positions the data plane
    served to the steps it holds: per step, the batch of the last generation that
    trained it (earlier generations' lost steps were redone)."""
    served: dict[int, tuple[int, int, int]] = {}  # step -> (generation, start, end)
    for path in sorted((work / "batches").glob("*/g*-r*.jsonl")):
        for line in path.read_text().splitlines():
            t = json.loads(line)
            assert t["cursor"] == t["end"]
            seen = served.get(t["step"])
            if seen is None or t["generation"] > seen[0]:
                served[t["step"]] = (t["generation"], t["start"], t["end"])
            elif t["generation"] == seen[0]:
                assert (t["start"], t["end"]) == seen[1:], "ranks disagree on a global batch"
    con = duckdb.connect(summary["db"], read_only=True)
    try:
        chain = run_query(con, "provenance", summary["run_id"]).records()
    finally:
        con.close()
    head = chain[0]
    assert head["step"] == STEPS
    steps = range(1, head["step"] + 1)
    positions = sorted(p for s in steps for p in range(served[s][1], served[s][2]))
    assert positions == list(range(0, head["position_to"]))
    for link in chain:  # each link: exactly the batches of its steps
        got = sorted(p for s in range(link["step_from"] + 1, link["step"] + 1)
                     for p in range(served[s][1], served[s][2]))
        assert got == list(range(link["position_from"], link["position_to"])), link["step"]
    assert chain[-1]["step_from"] == 0 and chain[-1]["position_from"] == 0
