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
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- own-job -->"
BLOCK = re.compile(re.escape(MARKER) + r"\n```sh\n(.*?)\n```", re.S)
LIMIT_S = 420  # generous for a loaded 2-core machine; a quiet one needs about 60 s


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


def _logs(clone: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
                     for p in sorted(clone.glob("*.log")))
