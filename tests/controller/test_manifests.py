"""The shell's write of run-manifest.json (controller.manifests): real files, no broker."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from controller.manifests import write_published
from controller.model import Model
from controller.reconcile import handle
from controller.runplan import RunPlan
from events import runmanifest
from events.model import Event, RunManifestPublished, RunSubmitted
from events.topics import RUNS
from events.workerenv import CheckpointEnv
from tests.events.builders import Ev


def _cancelled(root: str) -> tuple[Model, list[Event]]:
    """A run cancelled while queued, under a plan whose checkpoints go to ``root``."""
    plan = RunPlan(world_size=1, argv=("train",), cancel_authority=frozenset({"bob"}),
                   checkpoint=CheckpointEnv(root=root))

    def plan_of(_: RunSubmitted) -> RunPlan:
        return plan

    ev = Ev("run-7", start=1_000, tick=10)
    model = Model(since=0)
    log: list[Event] = []
    for event in (ev.submitted(world_size=1), ev.cancel_requested()):
        model, out = handle(model, event, ev.now, plan_of)
        log += [e for topic, e in out if topic == RUNS]
    return model, log


def test_the_file_holds_the_bytes_the_log_digests(tmp_path: Path) -> None:
    model, log = _cancelled(f"file://{tmp_path}/ckpt")
    (published,) = [e for e in log if isinstance(e, RunManifestPublished)]
    assert published.path == f"file://{tmp_path}/ckpt/run-7/run-manifest.json"
    assert write_published(model, log) == [published.path]
    data = (tmp_path / "ckpt" / "run-7" / "run-manifest.json").read_bytes()
    assert runmanifest.digest(json.loads(data)) == published.digest
    assert json.loads(data) == runmanifest.build(log)
    assert json.loads(data)["status"] == "Cancelled"
    assert write_published(model, log) == [published.path]  # the same bytes: left alone


def test_a_rejection_after_the_end_in_the_same_cycle_still_writes_the_file(
        tmp_path: Path) -> None:
    # A worker's report that reaches the controller in the cycle that cancelled its run is
    # refused after RunManifestPublished; the file is written from the model all the same.
    model, log = _cancelled(f"file://{tmp_path}/ckpt")
    ev = Ev("run-7", start=2_000, tick=10)
    model, out = handle(model, ev.heartbeat(0, "w0"), ev.now, lambda _: RunPlan(
        world_size=1, argv=("train",)))
    assert [e.event_type for _, e in out] == ["WriteRejected"]
    log += [e for topic, e in out if topic == RUNS]
    (published,) = [e for e in log if isinstance(e, RunManifestPublished)]
    assert write_published(model, log) == [published.path]
    assert runmanifest.digest(runmanifest.build(log) or {}) == published.digest


def test_a_file_with_other_contents_is_never_replaced(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    model, log = _cancelled(str(tmp_path))
    target = tmp_path / "run-7" / "run-manifest.json"
    target.parent.mkdir()
    target.write_bytes(b"{}")
    with caplog.at_level(logging.ERROR):
        assert write_published(model, log) == []
    assert target.read_bytes() == b"{}"
    assert "never replaced" in caplog.text


def test_an_unwritable_root_is_logged_and_does_not_stop_the_controller(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    model, log = _cancelled(str(blocker))
    with caplog.at_level(logging.ERROR):
        assert write_published(model, log) == []
    assert f"{blocker}/run-7/run-manifest.json" in caplog.text
    assert "runledger query manifest run-7" in caplog.text


def test_a_path_outside_the_controller_s_roots_is_never_written(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A run admitted before the controller's roots narrowed: its fact names a path the
    # controller may no longer write (controller.roots), so nothing is written there.
    model, log = _cancelled(str(tmp_path / "elsewhere"))
    (published,) = [e for e in log if isinstance(e, RunManifestPublished)]
    with caplog.at_level(logging.ERROR):
        assert write_published(model, log, roots=(str(tmp_path / "allowed"),)) == []
    assert not (tmp_path / "elsewhere").exists()
    assert (f"run run-7: not writing its manifest: path_outside_roots: the file "
            f"{published.path!r} is outside the allowed roots ({tmp_path / 'allowed'})"
            ) in caplog.text
    assert write_published(model, log, roots=(str(tmp_path),)) == [published.path]
