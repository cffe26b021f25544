"""The demo's inputs: its options, the work directory's layout, the corpus and the run spec.

Everything the demo writes lives under one work directory (:class:`Layout`), so
a finished demo can be inspected (logs, checkpoints, the projection, the
report) and removed with one ``rm -r``. The spec is ``examples/tiny.yaml`` with
the demo's own sizes, paths and topology domain; the domain is unique per demo
so that, on a shared broker, the run is placed only on the demo's own agent.
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from runledger.demo.procs import DemoError, cli_ok

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_SPEC = REPO / "examples" / "tiny.yaml"
EXAMPLE_SCRIPT = REPO / "examples" / "train_tiny.py"
ALIAS = "demo/latest"


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What ``runledger demo`` was asked to do (see :mod:`runledger.commands.demo`)."""

    workdir: Path | None = None
    bootstrap: str | None = None  # an existing broker; None starts one in the workdir
    steps: int = 60
    interval: int = 10
    kill_step: int = 25
    step_sleep_s: float = 0.8
    timeout_s: float = 900.0
    stall_s: float = 120.0
    queries: bool = True
    keep_stack: bool = False
    node: str = "demo-node"
    ui_port: int = 8265  # the live view's; taken: any free one

    def problems(self) -> list[str]:
        """Every inconsistent option, one line each (empty when all is well)."""
        out = []
        if self.steps < 2:
            out.append(f"--steps {self.steps}: at least 2")
        if not 1 <= self.interval < self.steps:
            out.append(f"--interval {self.interval}: between 1 and --steps - 1")
        elif not self.interval < self.kill_step < self.steps:
            out.append(f"--kill-step {self.kill_step}: after the first checkpoint (step"
                       f" {self.interval}) and before the last step ({self.steps})")
        elif self.kill_step % self.interval == 0:
            out.append(f"--kill-step {self.kill_step}: pick a step between two checkpoints"
                       f" (not a multiple of --interval {self.interval}), so that some work"
                       " is lost and replayed")
        if not 0 <= self.ui_port <= 65535:
            out.append(f"--ui-port {self.ui_port}: a port from 0 (any free one) to 65535")
        if self.step_sleep_s < 0:
            out.append(f"--step-sleep {self.step_sleep_s}: not negative")
        if self.timeout_s <= 0 or self.stall_s <= 0:
            out.append("--timeout and --stall-timeout: positive")
        return out

    @property
    def resume_step(self) -> int:
        """The checkpoint generation 2 must resume from: the last one before the kill."""
        return self.kill_step - self.kill_step % self.interval


@dataclass(frozen=True, slots=True)
class Layout:
    """Paths under the work directory."""

    root: Path

    @property
    def stack(self) -> Path:
        return self.root / "stack"

    @property
    def corpus(self) -> Path:
        return self.root / "corpus"

    @property
    def catalog(self) -> Path:
        return self.root / "catalog"

    @property
    def spec(self) -> Path:
        return self.root / "demo.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def batches(self) -> Path:
        return self.root / "batches"

    @property
    def agent(self) -> Path:
        return self.root / "agent"

    @property
    def db(self) -> Path:
        # $RUNLEDGER_HOME/projection.duckdb, the default of `project` and its readers
        return self.root / "projection.duckdb"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def worker_log(self, run_id: str, generation: int, logical_id: str) -> Path:
        return self.agent / run_id / f"g{generation}" / f"{logical_id}.log"


def prepare_workdir(requested: Path | None) -> Layout:
    """A new empty work directory (a fresh temporary one when none is named)."""
    if requested is None:
        return Layout(Path(tempfile.mkdtemp(prefix="runledger-demo-")))
    root = requested.expanduser().resolve()
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        # A second demo in the same place would find the first one's broker,
        # catalog and projection: refuse rather than mix two demos.
        raise DemoError(f"--work-dir {root} exists and is not an empty directory; name a new one")
    root.mkdir(parents=True, exist_ok=True)
    return Layout(root)


def build_dataset(layout: Layout, env: Mapping[str, str], say: Any) -> str:
    """Synthesize the mixed corpus, build its manifest under the alias; the manifest id."""
    say(f"$ runledger dataset synth {layout.corpus}")
    template = cli_ok(["dataset", "synth", str(layout.corpus)], env).strip()
    say(f"$ runledger dataset build {template} --alias {ALIAS}")
    manifest_id = cli_ok(["dataset", "build", template, "--alias", ALIAS], env).strip()
    say(f"  dataset {ALIAS} -> {manifest_id}")
    return manifest_id


def write_spec(layout: Layout, opts: DemoOptions) -> str:
    """The run spec, from examples/tiny.yaml; returns the topology domain it names."""
    for path in (EXAMPLE_SPEC, EXAMPLE_SCRIPT):
        if not path.is_file():
            raise DemoError(f"{path} is missing: the demo runs from a source checkout"
                            " (pip install -e .)")
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE_SPEC.read_text(encoding="utf-8"))
    domain = f"demo-{uuid.uuid4().hex[:8]}"
    doc["name"] = "demo"
    # The interpreter running the demo has torch; a bare `python` may not.
    doc["command"] = [sys.executable, str(EXAMPLE_SCRIPT)]
    doc["model"] = {**doc["model"], "steps": opts.steps, "step_sleep_s": opts.step_sleep_s}
    doc["dataset"] = ALIAS  # `submit` resolves it to the manifest id it names now
    doc["topology"] = {**doc["topology"], "domain": domain}
    # Two ranks on two cores: one intra-op thread each, or they fight over the cores.
    doc["env"] = {**doc.get("env", {}), "OMP_NUM_THREADS": "1"}
    doc["checkpoint"] = {**doc["checkpoint"], "interval_steps": opts.interval,
                         "root": str(layout.checkpoints)}
    header = ("# Written by `runledger demo` from examples/tiny.yaml. The injected kill and\n"
              "# the batch trace are in the agent's environment (RUNLEDGER_* variables\n"
              "# cannot be set by a spec).\n")
    layout.spec.write_text(header + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return domain


def fault_for(opts: DemoOptions) -> str:
    """``RUNLEDGER_FAULT`` for the agent's workers: rank 1 dies after the kill step, once."""
    return f"step@{opts.kill_step}:rank=1:gen=1:run=demo-"
