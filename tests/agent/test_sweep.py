"""The agent's sweep of a stopped generation's residue (agent.sweep): when it is due, what
it removes (only manifest-less step directories of stopped generations), on real files."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agent import sweep
from agent.decide import WorkerKey
from events.workerenv import CHECKPOINT_ROOT
from worker.layout import CheckpointDir, parse_generation, parse_step


def test_a_sweep_is_due_once_no_worker_of_a_stopped_generation_runs_here() -> None:
    pending = {"a": 2, "b": 1, "c": 3}
    running = [WorkerKey("a", 2, "w0"), WorkerKey("b", 2, "w0"), WorkerKey("c", 1, "w1")]
    # a: its stopped g2 still runs; b: only a newer generation runs; c: g1 <= 3 runs
    assert sweep.due(pending, running) == [("b", 1)]
    assert sweep.due(pending, []) == [("a", 2), ("b", 1), ("c", 3)]


def test_the_plan_takes_manifest_less_steps_of_stopped_generations_oldest_first() -> None:
    entries = [("g000002", "step-0000000008", False), ("g000001", "step-0000000012", False),
               ("g000001", "step-0000000004", True), ("g000003", "step-0000000016", False),
               ("g000001", "notes", False), ("tmp", "step-0000000001", False)]
    assert sweep.plan(entries, upto=2) == [("g000001", "step-0000000012"),
                                           ("g000002", "step-0000000008")]
    assert sweep.plan(entries, upto=2, limit=1) == [("g000001", "step-0000000012")]
    assert sweep.plan(entries, upto=0) == []


def test_the_names_are_the_workers_layout() -> None:
    ck = CheckpointDir("/r", "run", 7, 123)
    gdir, sdir = ck.url.split("/")[-2:]
    assert (parse_generation(gdir), parse_step(sdir)) == (7, 123)
    assert sweep.plan([(gdir, sdir, False)], upto=7) == [(gdir, sdir)]
    assert ck.manifest_url.endswith("/" + sweep.MANIFEST)


@given(st.dictionaries(st.tuples(st.integers(1, 4), st.integers(1, 50)), st.booleans(),
                       max_size=12), st.integers(0, 4))
def test_a_directory_with_its_manifest_or_of_a_live_generation_is_never_planned(
        dirs: dict[tuple[int, int], bool], upto: int) -> None:
    entries = [(f"g{g:06d}", f"step-{s:010d}", m) for (g, s), m in dirs.items()]
    doomed = sweep.plan(entries, upto, limit=100)
    assert doomed == sorted(doomed)
    assert {(g, s) for g, s, _ in entries if (g, s) in set(doomed)} == {
        (f"g{g:06d}", f"step-{s:010d}") for (g, s), m in dirs.items() if not m and g <= upto}


def _write(path: Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_sweep_removes_residue_and_keeps_committed_checkpoints_on_real_files(
        tmp_path: Path) -> None:
    run = tmp_path / "r1"
    _write(run / "g000001" / "step-0000000004" / "manifest.json", "{}")
    _write(run / "g000001" / "step-0000000004" / "__0_0.distcp")
    _write(run / "g000001" / "step-0000000008" / "__0_0.distcp")  # cut short by the stop
    _write(run / "g000002" / "step-0000000008" / "__1_0.distcp")  # a live generation's
    _write(run / "run-manifest.json", "{}")
    removed = sweep.sweep(str(tmp_path), "r1", upto=1)
    assert [Path(u).relative_to(run).as_posix() for u in removed] == [
        "g000001/step-0000000008"]
    assert (run / "g000001" / "step-0000000004" / "__0_0.distcp").exists()
    assert (run / "g000002" / "step-0000000008" / "__1_0.distcp").exists()
    assert (run / "run-manifest.json").exists()
    assert sweep.sweep(str(tmp_path), "r1", upto=1) == []  # again: nothing left to do
    assert sweep.sweep(str(tmp_path), "no-such-run", upto=9) == []
    sweep.in_background(str(tmp_path), "r1", 2).join(30)
    assert not (run / "g000002" / "step-0000000008").exists()


def test_the_root_is_the_start_commands_resolved_where_the_workers_run() -> None:
    assert sweep.root_of({CHECKPOINT_ROOT: "/ckpt"}, "/work") == "/ckpt"
    assert sweep.root_of({CHECKPOINT_ROOT: "s3://b/c"}, "/work") == "s3://b/c"
    assert sweep.root_of({CHECKPOINT_ROOT: "ckpt"}, "/work/") == "/work/ckpt"
    assert sweep.root_of({}, "/work") is None
