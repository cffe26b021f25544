"""``runledger checkpoint list|gc`` against the session broker: JSON output, a
checkpoint that gc removed under retention is marked as removed in the listing, and
with storage tiers the listing shows each tier's verified copy and gc collects every
tier with its own retention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.kafka.clients import EventProducer
from events.model import CheckpointReplicated, Event
from events.topics import RUNS
from runledger.cli import app
from tests.events.builders import Ev, members
from tests.runledger.views.test_ckpttiers import spec_json


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


@pytest.mark.kafka
def test_list_shows_verified_copies_per_tier_and_gc_collects_each_tier_with_its_keep_last(
    bootstrap: str, run_id: str, tmp_path: Path
) -> None:
    local, remote = tmp_path / "local", tmp_path / "remote"
    ev = Ev(run_id)
    spec = spec_json(tiers=[{"name": "local", "root": str(local), "protects": ["process"],
                             "keep_last": 1},
                            {"name": "remote", "root": str(remote), "protects": ["cluster"],
                             "keep_last": 2}])
    facts: list[Event] = [ev.submitted(spec_json=spec),
                          ev.generation_started(1, members=members("r0", node="n1"))]
    commits = {}
    for step in (4, 8, 12):
        manifest = stored(local, run_id, step)
        commits[step] = ev.committed(1, step, manifest_path=manifest,
                                     manifest_digest=f"sha256:{step:064d}")
        facts.append(commits[step])
    for step in (4, 12):  # 8 is not copied yet: the first tier must keep it
        facts.append(ev.event(CheckpointReplicated, 1, dict(
            step=step, manifest_path=stored(remote, run_id, step),
            manifest_digest=commits[step].manifest_digest, logical_id="r0", tier="remote",
            protects="cluster", lag_ms=90.0, bytes=2), {}))
    producer = EventProducer(bootstrap)
    for fact in facts:
        producer.send(RUNS, fact)
    producer.flush()
    env = {"RUNLEDGER_BOOTSTRAP": bootstrap}
    runner = CliRunner()

    listed = runner.invoke(app, ["checkpoint", "list", run_id, "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    assert [(r["step"], [t["tier"] for t in r["tiers"]]) for r in json.loads(listed.stdout)] == [
        (4, ["local", "remote"]), (8, ["local"]), (12, ["local", "remote"])]

    refused = runner.invoke(app, ["checkpoint", "gc", run_id, "--tier", "nvme"], env=env)
    assert refused.exit_code != 0 and "its tiers are local, remote" in refused.output
    gc = runner.invoke(app, ["checkpoint", "gc", run_id, "--json"], env=env)
    assert gc.exit_code == 0, gc.output
    tiers = {t["tier"]: t for t in json.loads(gc.stdout)["tiers"]}
    # local keeps 1 (12) and 8 (not on remote yet); remote keeps 2 (8 and 12: 8 is committed)
    assert [u.rsplit("/", 1)[-1] for u in tiers["local"]["removed"]] == ["step-0000000004"]
    assert (tiers["local"]["keep_last"], tiers["local"]["pinned_steps"]) == (1, [8])
    assert [u.rsplit("/", 1)[-1] for u in tiers["remote"]["removed"]] == ["step-0000000004"]
    assert tiers["remote"]["keep_last"] == 2

    rows = json.loads(runner.invoke(app, ["checkpoint", "list", run_id, "--json"],
                                    env=env).stdout)
    assert [(r["step"], [(t["tier"], t["removed"]) for t in r["tiers"]]) for r in rows] == [
        (4, [("local", True), ("remote", True)]), (8, [("local", False)]),
        (12, [("local", False), ("remote", False)])]
    text = runner.invoke(app, ["checkpoint", "list", run_id], env=env).stdout.splitlines()
    assert "tiers: local (removed), remote (removed)" in text[0] and "REMOVED" in text[0]
    assert text[2].endswith("tiers: local, remote")


def stored(root: Path, run_id: str, step: int) -> str:
    """A checkpoint directory with a manifest, where the worker would write it."""
    step_dir = root / run_id / "g000001" / f"step-{step:010d}"
    step_dir.mkdir(parents=True)
    (step_dir / "manifest.json").write_text("{}")
    return str(step_dir / "manifest.json")
