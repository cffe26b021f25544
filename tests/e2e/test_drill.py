"""``runledger drill`` on examples/tiny.yaml, as docs/cli.md writes the command.

A real secure stack, a controller and one local agent with room for a fenced
generation and its successor (slots 4, a long ``--grace`` so a stale worker
that ignores SIGTERM lives long enough to wake: ``runledger.rehearse.drillrun``). The
spec is examples/tiny.yaml with only what this machine needs changed: the
interpreter (this one), the workers' directory (examples/) and a checkpoint
root inside the test's directory. The documented command must pass and show
each fault's verdict with RPO and RTO, the topology change skipped on this
fixed spec; then the same stale-worker drill against a worker told to ignore
its fence (``RUNLEDGER_DRILL_IGNORE_FENCE=1``, the "broken build") must fail,
naming the stale shards that reached storage.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from dataplane.catalog import Catalog
from events.kafka.consume import read_log
from events.model import DrillCompleted
from events.topics import REQUESTS
from tests.e2e import ckpt_setup
from tests.e2e.harness import PY, Cluster

pytestmark = [pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- drill -->"
BLOCK = re.compile(re.escape(MARKER) + r"\n```sh\n(.*?)\n```", re.S)
LIMIT_S = 900  # generous for a loaded 2-core machine


def readme_command() -> list[str]:
    found = BLOCK.findall((REPO / "docs" / "cli.md").read_text())
    assert len(found) == 1, f"docs/cli.md needs exactly one {MARKER} followed by a ```sh block"
    lines = [ln.split("#")[0].strip() for ln in str(found[0]).splitlines()]
    (command,) = [ln for ln in lines if ln.startswith("runledger drill") and "--faults" in ln]
    return shlex.split(command)


def tiny_here(cluster: Cluster) -> Path:
    """examples/tiny.yaml with this interpreter, its workdir and a checkpoint root here."""
    doc = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
    doc["command"] = [PY, *doc["command"][1:]]
    doc["code"] = {"workdir": str(REPO / "examples")}
    doc["checkpoint"]["root"] = str(cluster.work / "ckpt")
    path = cluster.work / "tiny.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def drill(cluster: Cluster, argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "runledger.cli", *argv[1:]], env={**cluster.env, **env},
                          text=True, capture_output=True, timeout=LIMIT_S)


def test_the_readme_drill_passes_on_tiny_and_a_fence_ignoring_worker_fails_it(
        cluster: Cluster) -> None:
    ds = ckpt_setup.dataset(cluster)  # first: the agent's workers read this catalog
    cluster.controller()
    cluster.agent("n1", 4, grace=60.0)
    Catalog(cluster.env["RUNLEDGER_DATASETS"]).set_alias("synth/latest", ds)
    spec = tiny_here(cluster)
    argv = [str(spec) if a == "examples/tiny.yaml" else a for a in readme_command()]
    html = cluster.work / "drill.html"
    argv = [str(html) if a == "drill.html" else a for a in argv]

    done = drill(cluster, argv)
    # On a failure: the drill's verdicts, then each drill run's generations and failures.
    out = done.stdout + done.stderr + "\n" + "\n".join(
        ln for ln in cluster.log_of("controller").splitlines()
        if " GenerationStarted " in ln or " FailureClassified " in ln)
    assert done.returncode == 0, out
    rows = {ln.split()[0]: ln.split() for ln in done.stdout.splitlines() if ln.strip()}
    assert rows["kill_compute"][1] == "PASS", out
    assert rows["stale_worker"][1] == "PASS", out
    assert rows["topology_change"][1] == "SKIP" and "fixed" in out, out
    # RPO and RTO measured for a restart: numbers, not "-".
    assert re.fullmatch(r"\d+\.\d\d", rows["kill_compute"][2]), out
    assert re.fullmatch(r"\d+\.\d\d", rows["kill_compute"][3]), out
    assert "<table>" in html.read_text()

    # One DrillCompleted per fault, bound to the digest of the spec as given.
    recorded = [r.event for r in read_log(cluster.bootstrap, REQUESTS)
                if isinstance(r.event, DrillCompleted)]
    assert sorted(e.fault for e in recorded) == ["kill_compute", "stale_worker",
                                                 "topology_change"]
    assert len({e.spec_digest for e in recorded}) == 1

    broken = drill(cluster, [*argv[:3], "--faults", "stale_worker", "--steps",
                             argv[argv.index("--steps") + 1], "--json"],
                   RUNLEDGER_DRILL_IGNORE_FENCE="1")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    (fault,) = json.loads(broken.stdout)["faults"]
    assert fault["verdict"] == "fail", fault
    checks = {c["check"]: c for c in fault["checks"]}
    assert "no_stale_writes" in checks, fault
    stale = checks["no_stale_writes"]
    assert stale["verdict"] == "fail" and "ignored its fence" in stale["reason"], fault
