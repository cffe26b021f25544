"""Where the controller may write (controller.roots): a spec's checkpoint root is judged
against the controller's roots at admission, and every file path again at the write."""

from __future__ import annotations

from dataclasses import replace

from controller.model import Model
from controller.reconcile import handle, tick
from controller.roots import root_problem, within, write_problem
from controller.runplan import RunPlan
from events.model import Event, RunFinished, RunManifestPublished
from events.topics import COMMANDS, RUNS
from events.workerenv import CheckpointEnv, TierEnv
from tests.events.builders import Ev

ROOTS = ("/srv/ckpt", "s3://bucket/ckpt")


def plan(root: str | None, workdir: str = "/home/alice/job") -> RunPlan:
    return RunPlan(world_size=1, argv=("train",), workdir=workdir,
                   checkpoint=CheckpointEnv(root=root))


def test_a_checkpoint_root_inside_the_roots_or_none_at_all_is_the_controller_s_to_write() -> None:
    for root in ("/srv/ckpt", "/srv/ckpt/alice", "s3://bucket/ckpt/x", "file:///srv/ckpt/y",
                 None):
        assert root_problem(plan(root), ROOTS) is None, root
    # A relative root is the workers', in code.workdir: judged there.
    assert root_problem(plan("ckpt", workdir="/srv/ckpt/job"), ROOTS) is None
    assert root_problem(RunPlan(world_size=1, argv=("train",)), ROOTS) is None


def test_a_root_outside_names_the_field_the_roots_and_both_fixes() -> None:
    assert root_problem(plan("/etc/cron.d"), ROOTS) == (
        "path_outside_roots: checkpoint.root '/etc/cron.d' is outside the controller's "
        "allowed roots (/srv/ckpt, s3://bucket/ckpt); set checkpoint.root under one of "
        "them, or start the controller with --allow-root /etc/cron.d")
    assert root_problem(plan("s3://other/ckpt"), ROOTS) is not None
    assert root_problem(plan("/srv/ckpt-evil"), ROOTS) is not None  # a prefix is no parent
    relative = root_problem(plan("ckpt", workdir=""), ROOTS)
    assert relative is not None and "is relative and the spec has no code.workdir" in relative
    tiered = replace(plan("/elsewhere/a"), checkpoint=CheckpointEnv(
        root="/elsewhere/a", tiers=(TierEnv("local", "/elsewhere/a", "process", 3),)))
    said = root_problem(tiered, ROOTS)
    assert said is not None and said.startswith(
        "path_outside_roots: checkpoint.tiers 'local' root '/elsewhere/a' is outside")


def _submitted(root: str) -> list[tuple[str, Event]]:
    ev = Ev("run-9", start=1_000, tick=10)
    plan_of = within(lambda _: plan(root), ROOTS)
    model, out = handle(Model(since=0), ev.submitted(world_size=1), ev.now, plan_of)
    _, more = tick(model, ev.now, plan_of)
    return out + more


def test_a_run_whose_root_lies_outside_is_refused_before_anything_is_started_or_written(
) -> None:
    out = _submitted("/etc/cron.d")
    facts = [e for topic, e in out if topic == RUNS]
    assert not [e for topic, e in out if topic == COMMANDS], "nothing was started"
    (end,) = [e for e in facts if isinstance(e, RunFinished)]
    assert end.outcome == "failed"
    assert end.reason.startswith("invalid spec: path_outside_roots: checkpoint.root "
                                 "'/etc/cron.d' is outside the controller's allowed roots "
                                 "(/srv/ckpt, s3://bucket/ckpt)")
    (published,) = [e for e in facts if isinstance(e, RunManifestPublished)]
    assert published.path == "", "no manifest file for a root the controller may not use"
    # The same spec with a root inside is admitted (queued here: no node offers slots).
    assert not [e for _, e in _submitted("/srv/ckpt/run") if isinstance(e, RunFinished)]


def test_a_plan_already_invalid_keeps_its_own_reason() -> None:
    bad = RunPlan(world_size=1, argv=(), invalid="topology: bad")
    assert within(lambda _: bad, ROOTS)(Ev("run-9").submitted(world_size=1)) is bad


def test_the_write_itself_is_checked_against_the_roots() -> None:
    assert write_problem("/srv/ckpt/run-9/run-manifest.json", ROOTS) is None
    assert write_problem("s3://bucket/ckpt/run-9/run-manifest.json", ROOTS) is None
    outside = write_problem("/etc/run-9/run-manifest.json", ROOTS)
    assert outside is not None and outside.startswith("path_outside_roots: the file")
    relative = write_problem("ckpt/run-9/run-manifest.json", ROOTS)
    assert relative is not None and "is a relative path" in relative
