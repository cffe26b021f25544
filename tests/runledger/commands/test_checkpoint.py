"""``runledger checkpoint list|gc`` against the session broker: JSON output, and a
checkpoint that gc removed under retention is marked as removed in the listing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.kafka import EventProducer
from events.topics import RUNS
from runledger.cli import app
from tests.events.builders import Ev, members


@pytest.mark.kafka
def test_gc_json_and_list_marks_what_retention_removed(
    bootstrap: str, run_id: str, tmp_path: Path
) -> None:
    root = tmp_path / "ckpt"
    ev = Ev(run_id)
    producer = EventProducer(bootstrap)
    producer.send(RUNS, ev.submitted())
    producer.send(RUNS, ev.generation_started(1, members=members("r0", node="n1")))
    for step in (4, 8, 12):
        step_dir = root / run_id / "g000001" / f"step-{step:010d}"
        step_dir.mkdir(parents=True)
        (step_dir / "manifest.json").write_text("{}")
        producer.send(RUNS, ev.committed(1, step, manifest_path=str(step_dir / "manifest.json")))
    producer.flush()
    env = {"RUNLEDGER_BOOTSTRAP": bootstrap}
    gc = CliRunner().invoke(app, ["checkpoint", "gc", run_id, "--root", str(root),
                                  "--keep-last", "1", "--json"], env=env)
    assert gc.exit_code == 0, gc.output
    report = json.loads(gc.stdout)
    assert report["run_id"] == run_id and report["dry_run"] is False
    assert [u.rsplit("/", 1)[-1] for u in report["removed"]] == [
        "step-0000000004", "step-0000000008"]
    listed = CliRunner().invoke(app, ["checkpoint", "list", run_id, "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [(r["step"], r["removed"]) for r in rows] == [(4, True), (8, True), (12, False)]
    text = CliRunner().invoke(app, ["checkpoint", "list", run_id], env=env).stdout.splitlines()
    assert ["REMOVED" in line for line in text] == [True, True, False]
