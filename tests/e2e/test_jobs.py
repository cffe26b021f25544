"""A user's own job, end to end: its code's error is its own, legible, and spares the node.

One scenario on real processes: a script that raises at import fails fast on
every rank as the job's own error (no retry, no quarantine); ``status`` shows
its output tail and log path, ``logs`` prints its output, and the node takes
the next run, whose running worker ``logs --follow`` follows until it exits.
A spec whose script is missing is refused at submit. A checkpoint root
outside the agent's allowed roots is refused by the agent before launch, and
fails the run as the job's error too, with nothing counted against the node.
One outside the controller's roots is refused by the controller before any
start, and the controller writes nothing there (it once wrote the run's
``run-manifest.json``).
A chatty job writes 25 times its agent's log cap per rank: each worker's files
on disk stay within (keep + 1) x cap, its exit report still carries its last
lines, and ``logs --tail`` prints them while ``logs`` says what the cap dropped.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from events.model import FailureClassified, NodeQuarantined, RunFinished, node_key
from tests.e2e.harness import PY, Cluster, of_type, spec

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def finished(facts: list[object]) -> bool:
    return any(isinstance(e, RunFinished) for e in facts)


def test_a_script_that_raises_at_import_fails_fast_as_the_job_s_own_error(
        cluster: Cluster) -> None:
    code = cluster.work / "code"
    code.mkdir()
    (code / "bad.py").write_text('print("loading config")\n'
                                 'raise RuntimeError("boom at import: no such config key")\n')
    missing = code / "missing.yaml"
    missing.write_text(yaml.safe_dump(spec("missing", [], command=[PY, "nope.py"])))
    refused = cluster.cli("submit", str(missing), *cluster.signed_as("alice"))
    assert refused.returncode != 0
    assert f"{code}/nope.py (nope.py in code.workdir) does not exist" in refused.stderr

    cluster.controller()
    cluster.agent("n1", 2)
    bad = code / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec("bad", [], command=[PY, "bad.py"])))
    submitted = cluster.cli("submit", str(bad), *cluster.signed_as("alice"))
    assert submitted.returncode == 0, submitted.stderr
    run = submitted.stdout.strip()
    facts = cluster.wait_facts(run, finished, timeout=90, what="the bad run's end")
    (failure,) = of_type(facts, "FailureClassified")
    assert isinstance(failure, FailureClassified)
    assert (failure.failure_class, failure.signature, failure.action) == (
        "job", "job:start_exit=1", "escalate")
    assert "RuntimeError: boom at import" in failure.stderr_tail
    log_path = Path(failure.log_path)
    assert log_path.is_file() and "loading config" in log_path.read_text()
    (end,) = of_type(facts, "RunFinished")
    assert end.outcome == "failed" and "fix it and submit again" in end.reason

    status = cluster.cli("status", run)
    assert status.returncode == 0, status.stderr
    assert "job job:start_exit=1 -> escalate" in status.stdout
    assert str(log_path) in status.stdout and "RuntimeError: boom at import" in status.stdout
    logs = cluster.cli("logs", run)
    assert logs.returncode == 0, logs.stderr
    assert "loading config" in logs.stdout and "Traceback" in logs.stdout
    last = cluster.cli("logs", run, "--tail", "2")
    assert last.returncode == 0, last.stderr
    assert last.stdout.splitlines() == logs.stdout.splitlines()[-2:]
    assert "its last 2 lines" in last.stderr
    doc = json.loads(cluster.cli("logs", run, "--tail", "2", "--json").stdout)
    assert (doc["state"], doc["path"], doc["text"]) == ("exited", str(log_path), last.stdout)
    unknown = cluster.cli("logs", run, "--rank", "9")
    assert unknown.returncode != 0 and "its ranks are 0 (r0), 1 (r1)" in unknown.stderr

    # The node was never blamed: the next run starts on it and succeeds; while
    # it runs, `logs --follow` prints what it writes, and ends once it exits.
    go = code / "go"
    (code / "live.py").write_text(
        "import os, time\n"
        "print('live: started', os.environ['RUNLEDGER_LOGICAL_ID'], flush=True)\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.1)\n"
        "print('live: done', flush=True)\n")
    good = code / "good.yaml"
    good.write_text(yaml.safe_dump(spec("good", [], command=[PY, "live.py"])))
    submitted = cluster.cli("submit", str(good), *cluster.signed_as("alice"))
    assert submitted.returncode == 0, submitted.stderr
    good_run = submitted.stdout.strip()
    cluster.wait_facts(good_run, lambda fs: bool(of_type(fs, "GenerationStarted")), timeout=90,
                       what="the good run's start")
    follow(cluster, good_run, go)
    done = cluster.wait_facts(good_run, finished, timeout=90, what="the good run's end")
    assert of_type(done, "RunFinished")[0].outcome == "succeeded"
    assert not [e for e in cluster.facts(node_key("n1")) if isinstance(e, NodeQuarantined)]


def follow(cluster: Cluster, run: str, go: Path) -> None:
    """``logs --follow`` of a running worker prints its output, then returns once it exits."""
    proc = subprocess.Popen([PY, "-m", "runledger.cli", "logs", run, "--follow"],
                            env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or ()],
                     daemon=True).start()
    try:
        first = lines.get(timeout=90)  # the worker waits for `go`: it is running now
        assert first.startswith("live: started r0"), first
        assert proc.poll() is None, "logs --follow ended while its worker ran"
        assert not of_type(cluster.facts(run), "WorkerExited")
        go.touch()
        assert proc.wait(timeout=90) == 0, proc.stderr.read() if proc.stderr else ""
        assert lines.get(timeout=10) == "live: done\n"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_checkpoint_root_outside_the_agents_roots_fails_as_the_job_s_error_not_the_node_s(
        cluster: Cluster) -> None:
    # The agent allows its work dir and the cluster's dir (harness: --allow-root); this
    # root lies elsewhere. Only the agent knows its roots, so submit accepts the spec;
    # the controller is told it may write there, so that the agent is the one to refuse.
    outside = str(cluster.work.parent / "not-allowed" / "ckpt")
    cluster.controller("ctl", "controller", "--allow-root", outside)
    cluster.agent("n1", 2)
    run = cluster.submit(spec("outside", ["--steps", "3"], checkpoint={
        "policy": "fixed", "interval_steps": 100, "root": outside}))
    facts = cluster.wait_facts(run, finished, timeout=90, what="the refused run's end")
    (failure,) = of_type(facts, "FailureClassified")
    assert isinstance(failure, FailureClassified)
    assert (failure.failure_class, failure.signature, failure.action) == (
        "job", "job:launch", "escalate")
    said = (f"path_outside_roots: checkpoint.root {outside!r} is outside the allowed roots "
            f"({(cluster.work / 'n1').resolve()}, {cluster.work}); set checkpoint.root under "
            f"one of them, or start the agent on n1 with --allow-root {outside}")
    assert said in failure.detail and "fix it and submit again" in failure.detail
    (end,) = of_type(facts, "RunFinished")
    assert end.outcome == "failed" and end.reason.startswith("job:launch: the job's own error")
    assert not of_type(facts, "GenerationStarted")[1:], "a job's error is never retried"

    status = cluster.cli("status", run)
    assert status.returncode == 0, status.stderr
    assert "job job:launch -> escalate" in status.stdout and outside in status.stdout
    # Nothing counted against the node, which stays ready for the next run.
    listed = cluster.cli("nodes", "--json")
    assert listed.returncode == 0, listed.stderr
    (n1,) = json.loads(listed.stdout)["nodes"]
    assert (n1["node"], n1["state"], n1["failures"]) == ("n1", "ready", 0)
    assert not [e for e in cluster.facts(node_key("n1")) if isinstance(e, NodeQuarantined)]


def test_a_checkpoint_root_outside_the_controller_s_roots_is_refused_and_nothing_written(
        cluster: Cluster) -> None:
    # The attack: a spec names a checkpoint root outside every allowed root; the run
    # failed on the agent's refusal and the controller then wrote run-manifest.json
    # there. The harness's controller may write only under the cluster's dir.
    outside = cluster.work.parent / "not-allowed" / "ckpt"
    cluster.controller()
    cluster.agent("n1", 2)
    run = cluster.submit(spec("outside-ctl", ["--steps", "3"], checkpoint={
        "policy": "fixed", "interval_steps": 100, "root": str(outside)}))
    facts = cluster.wait_facts(run, finished, timeout=90, what="the refused run's end")
    (end,) = of_type(facts, "RunFinished")
    assert end.outcome == "failed"
    assert end.reason.startswith(
        f"invalid spec: path_outside_roots: checkpoint.root {str(outside)!r} is outside the "
        f"controller's allowed roots ({cluster.work}); set checkpoint.root under one of "
        f"them, or start the controller with --allow-root {outside}"), end.reason
    # Refused before admission: nothing started, no node involved or blamed, no file.
    assert not of_type(facts, "RunAdmitted") and not cluster.commands(run)
    assert not of_type(facts, "FailureClassified")
    (published,) = of_type(facts, "RunManifestPublished")
    assert published.path == ""
    assert not outside.parent.exists(), "the controller wrote outside its roots"
    status = cluster.cli("status", run)
    assert status.returncode == 0, status.stderr
    assert "checkpoint.root" in status.stdout and str(cluster.work) in status.stdout
    listed = cluster.cli("nodes", "--json")
    assert listed.returncode == 0, listed.stderr
    (n1,) = json.loads(listed.stdout)["nodes"]
    assert (n1["node"], n1["state"], n1["failures"]) == ("n1", "ready", 0)


def test_a_chatty_job_s_log_stays_bounded_on_disk_and_logs_shows_its_last_lines(
        cluster: Cluster) -> None:
    code = cluster.work / "code"
    code.mkdir()
    (code / "chatty.py").write_text(
        "import os, sys\n"
        "me = os.environ['RUNLEDGER_LOGICAL_ID']\n"
        "for i in range(30000):\n"  # about 1.6 MB: 25 times the cap
        "    print(f'{me} line {i:06d} ' + 'x' * 40)\n"
        "sys.stdout.flush()\n"
        "print(f'{me}: the last line', flush=True)\n"
        "raise SystemExit(f'{me}: chatty gives up')\n")
    cluster.controller()
    cluster.agent("n1", 2, 3.0, "--log-cap", "64KiB", "--log-keep", "2")
    chatty = code / "chatty.yaml"
    chatty.write_text(yaml.safe_dump(spec("chatty", [], command=[PY, "chatty.py"])))
    submitted = cluster.cli("submit", str(chatty), *cluster.signed_as("alice"))
    assert submitted.returncode == 0, submitted.stderr
    run = submitted.stdout.strip()
    facts = cluster.wait_facts(run, finished, timeout=120, what="the chatty run's end")
    (failure,) = of_type(facts, "FailureClassified")
    assert failure.stderr_tail.endswith("r0: the last line\nr0: chatty gives up\n") or \
        failure.stderr_tail.endswith("r1: the last line\nr1: chatty gives up\n")
    cap = 64 << 10
    for lid in ("r0", "r1"):
        log = cluster.work / "n1" / run / "g1" / f"{lid}.log"
        files = [log.with_name(f"{lid}.log.2"), log.with_name(f"{lid}.log.1"), log]
        assert sorted(p.name for p in log.parent.iterdir() if p.name.startswith(lid)) == [
            f"{lid}.log", f"{lid}.log.1", f"{lid}.log.2", f"{lid}.log.dropped"]
        assert all(p.stat().st_size <= cap for p in files)
        assert sum(p.stat().st_size for p in files) <= 3 * cap

    last = cluster.cli("logs", run, "--rank", "0", "--tail", "3")
    assert last.returncode == 0, last.stderr
    assert last.stdout.splitlines() == [f"r0 line 029999 {'x' * 40}", "r0: the last line",
                                        "r0: chatty gives up"]
    assert "its output in 3 files (rotated at its cap)" in last.stderr
    whole = cluster.cli("logs", run, "--rank", "0")
    assert whole.returncode == 0, whole.stderr
    assert "were dropped by the log cap" in whole.stderr and "64 KiB" in whole.stderr
    assert whole.stdout.endswith(last.stdout) and len(whole.stdout) <= 3 * cap
    assert not whole.stdout.startswith("r0 line 000000")
    doc = json.loads(cluster.cli("logs", run, "--rank", "0", "--json").stdout)
    assert len(doc["files"]) == 3 and doc["dropped_bytes"] > 20 * cap
    assert doc["text"] == whole.stdout
