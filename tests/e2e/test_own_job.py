"""README's "Your own job", run literally: the shell block under ``<!-- own-job -->``.

The block is taken from README.md as written and run by one ``bash`` in a temp
directory standing in for a fresh clone (its ``.venv`` is this interpreter's
environment; the Kafka jars are the cached ones), with ``RUNLEDGER_HOME`` and
the dataset catalog in the temp directory and nothing exported that would
point a command at another broker. Its services start with ``&`` as the README
says; bash runs in a session of its own, so whatever outlives the block (a
failed step leaves the controller and agent up) dies with that session, and
``stack down`` stops the broker on every exit. The job's spec names its script
by a relative path; the run must end ``Succeeded``.

The block's script and spec are also run on a private broker (a controller
and an agent of the e2e harness) with every rank killed right after the
checkpoint of the last step committed: the restart restores that step, has
nothing left to train, and must exit 0 (it once died of a ``NameError``). Its
log, replayed into a projection, gives that run's provenance: the dataset it
was submitted with, positions not recorded (its own loader reports none), and
PROV and OpenLineage exports that ``prov`` and ``openlineage-python`` read back
with no warning.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from events.model import GenerationStarted, RunFinished
from queries import consumed
from tests.e2e.ckpt_setup import dataset
from tests.e2e.harness import PY, Cluster, of_type
from tests.queries.lineage_check import prov_document, run_event

pytestmark = [pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- own-job -->"
BLOCK = re.compile(re.escape(MARKER) + r"\n```sh\n(.*?)\n```", re.S)
LIMIT_S = 420  # generous for a loaded 2-core machine; a quiet one needs about 60 s


HEREDOC = r"cat > myjob/{name} <<'EOF'\n(.*?)\nEOF\n"


def heredoc(name: str) -> str:
    """The file the README's block writes to ``myjob/<name>``, as written there."""
    found = re.findall(HEREDOC.format(name=re.escape(name)), quickstart(), re.S)
    assert len(found) == 1, f"the {MARKER} block must write myjob/{name} exactly once"
    return str(found[0]) + "\n"


def quickstart() -> str:
    found = BLOCK.findall((REPO / "README.md").read_text())
    assert len(found) == 1, f"README.md needs exactly one {MARKER} followed by a ```sh block"
    return str(found[0])


@pytest.fixture
def clone(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "clone"
    root.mkdir()
    (root / ".venv").symlink_to(Path(sys.prefix))  # what `make venv` leaves in a clone
    yield root
    # A block that stopped early leaves the broker up: stop it as the README would.
    subprocess.run([sys.executable, "-m", "runledger.cli", "stack", "down"], env=_env(tmp_path),
                   capture_output=True, timeout=120, check=False)


def _env(tmp_path: Path) -> dict[str, str]:
    drop = {"RUNLEDGER_BOOTSTRAP", "RUNLEDGER_CREDENTIALS", "RUNLEDGER_KEY",
            "RUNLEDGER_SIGNING_KEY", "RUNLEDGER_CHECKPOINT_ROOT", "VIRTUAL_ENV"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "RUNLEDGER_HOME": str(tmp_path / "home"),
            "RUNLEDGER_DATASETS": str(tmp_path / "datasets"),
            # This checkout's code, whichever checkout the shared venv was installed from.
            "PYTHONPATH": str(REPO)}


def test_the_readme_quickstart_runs_a_job_with_a_relative_script_path(
        clone: Path, tmp_path: Path) -> None:
    script = quickstart()
    assert re.search(r"command: \[python, train\.py", script), "a relative script path"
    (clone / "quickstart.sh").write_text("set -e\n" + script + "\n")
    proc = subprocess.Popen(["bash", "quickstart.sh"], cwd=clone, env=_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the quickstart did not finish in {LIMIT_S} s:\n{out}\n{_logs(clone)}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            # The services it started with `&`, if a failed step left them running.
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"{out}\n{_logs(clone)}"
    assert re.search(r"Succeeded +generation 1 +step 20 .*every member exited 0", out), out
    assert "rank 0: step 20, loss" in out, out  # `runledger logs` printed the job's output
    assert (clone / "myjob" / "train.py").is_file()
    assert "stopped 1 broker(s)" in out, out
    # The live view served while the run trained (8265, or a free port if that was taken).
    assert re.search(r"runledger live view: http://127\.0\.0\.1:\d+",
                     (clone / "ui.log").read_text()), _logs(clone)


def _logs(clone: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
                     for p in sorted(clone.glob("*.log")))


@pytest.mark.kafka
def test_the_readme_job_restarted_after_its_last_step_resumes_there_and_exits_0(
        cluster: Cluster) -> None:
    job = cluster.work / "myjob"
    job.mkdir()
    (job / "train.py").write_text(heredoc("train.py"))
    doc = yaml.safe_load(heredoc("job.yaml"))
    assert doc["checkpoint"]["interval_steps"] == 10, "the last step (20) is checkpointed"
    # The harness's agent: checkpoints beside its work dir, the dataset in a catalog,
    # and this interpreter (the README's `python` is the activated venv's).
    ds = dataset(cluster)
    doc.update(
        command=[PY, "train.py"], dataset=ds,
        checkpoint={**doc["checkpoint"], "root": str(cluster.work / "ckpt")},
        # Every rank of the first generation dies once step 20's checkpoint committed.
        env={"RUNLEDGER_FAULT": "after_commit@20:gen=1"})
    (job / "job.yaml").write_text(yaml.safe_dump(doc))
    cluster.controller()
    cluster.agent("n1", 2)
    submitted = cluster.cli("submit", str(job / "job.yaml"), *cluster.signed_as("alice"))
    assert submitted.returncode == 0, submitted.stderr
    run = submitted.stdout.strip()
    facts = cluster.wait_facts(run, lambda fs: bool(of_type(fs, "RunFinished")), timeout=240,
                               what="the restarted run's end")
    # The kill is one restart; a loaded machine may add one (a slow start), never a job error.
    failures = [(f.signature, f.action, f.detail) for f in of_type(facts, "FailureClassified")]
    assert failures and all(action == "restart" for _, action, _ in failures), failures
    assert failures[0][0] == "worker_crash:signal=9:injected", failures
    restarts = [g for g in of_type(facts, "GenerationStarted") if g.generation > 1]
    assert restarts and all(isinstance(g, GenerationStarted) and g.resume_step == 20
                            for g in restarts), restarts
    (end,) = of_type(facts, "RunFinished")
    assert isinstance(end, RunFinished)
    assert (end.outcome, end.generation) == ("succeeded", restarts[-1].generation), end.reason
    logs = cluster.cli("logs", run)
    assert logs.returncode == 0, logs.stderr
    assert "rank 0: step 20, restored: nothing left to train" in logs.stdout, logs.stdout
    assert "NameError" not in logs.stdout
    _assert_the_provenance_of_an_own_loader(cluster, run, ds)


def _assert_the_provenance_of_an_own_loader(cluster: Cluster, run: str, ds: str) -> None:
    db = str(cluster.work / "projection.duckdb")
    done = cluster.cli("replay", "--db", db)
    assert done.returncode == 0, done.stderr

    def provenance(*fmt: str) -> str:
        out = cluster.cli("query", "provenance", run, "--db", db, *fmt)
        assert out.returncode == 0, out.stderr
        return out.stdout

    text = provenance()
    assert f"dataset   {ds} (as submitted: the job loads its own data)" in text, text
    assert f"positions {consumed.NO_POSITIONS}" in text and "None" not in text, text
    assert "not known" not in text, text  # the tokenizer: from the catalog it was built in
    event = json.loads(provenance("--format", "openlineage"))
    run_event(event)
    assert event["eventType"] == "COMPLETE"
    (data,) = event["inputs"]
    assert data["name"] == ds and data["inputFacets"]["runledger_consumption"][
        "positions"] == {"known": False, "reason": consumed.NO_POSITIONS}
    prov = prov_document(provenance("--format", "prov"))
    assert len(prov.get_records()) > 10
