"""worker/commit.py: the checkpoint commit protocol on CPU with real files: writing a
checkpoint, a round trip of model, optimizer, scheduler and RNG through restore, world-size
changes with real gloo processes, and each fault point killing a write.

Restore's verification is tests/worker/test_restore.py; parsing faults,
tests/worker/test_faults.py; the RNG streams alone, tests/worker/test_rng.py."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import crc32c
import pytest
import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from tests.worker import support
from tests.worker.support import DATASET, RUN, candidate, make_model, model_keys, write
from worker import rng
from worker.comm import Comm
from worker.errors import StorageFault
from worker.layout import DCP_METADATA, MANIFEST, CheckpointDir
from worker.manifest import FileEntry
from worker.restore import Candidate, load, verify

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

# -- write_checkpoint ------------------------------------------------------------------

def test_write_checkpoint_single_process(tmp_path: Path) -> None:
    model, state = support.small_state()
    ckdir = CheckpointDir(str(tmp_path / "root"), RUN, 3, 42)
    shards: list[FileEntry] = []
    written = write(ckdir, state, required=model_keys(model), on_shard=shards.append)

    base = tmp_path / "root" / RUN / "g000003" / "step-0000000042"
    assert ckdir.url == str(base)
    assert sorted(os.listdir(base)) == sorted(["__0_0.distcp", DCP_METADATA, MANIFEST])
    assert written.manifest_url == str(base / MANIFEST)

    raw = (base / MANIFEST).read_bytes()
    assert written.digest == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert raw == written.manifest.to_json()
    doc = json.loads(raw)
    assert (doc["run_id"], doc["generation"], doc["step"], doc["world_size"]) == (RUN, 3, 42, 1)
    assert doc["dataset_id"] == DATASET
    assert doc["counters"] == {"step": 42, "tokens": 420}
    assert doc["data"] == {"epoch": 0, "position": 42}
    listed = {f["path"]: f for f in doc["files"]}
    # Every file but the manifest itself is listed, with exact size and CRC32C.
    assert set(listed) == {"__0_0.distcp", DCP_METADATA}
    for name, entry in listed.items():
        data = (base / name).read_bytes()
        assert entry["bytes"] == len(data) > 0
        assert entry["crc32c"] == crc32c.crc32c(data)
    assert listed["__0_0.distcp"]["rank"] == 0
    assert listed[DCP_METADATA]["rank"] == -1
    assert set(model_keys(model)) <= set(doc["keys"])
    assert {"extra.note", "extra.n"} <= set(doc["keys"])

    # on_shard got this rank's shard files (not the coordinator's metadata).
    assert [(e.path, e.bytes, e.crc32c) for e in shards] == [
        ("__0_0.distcp", listed["__0_0.distcp"]["bytes"], listed["__0_0.distcp"]["crc32c"])]


def test_a_second_write_to_the_same_step_is_a_storage_fault(tmp_path: Path) -> None:
    model, state = support.small_state()
    ckdir = CheckpointDir(str(tmp_path), RUN, 1, 5)
    write(ckdir, state, required=model_keys(model))
    before = Path(ckdir.manifest_url).read_bytes()
    try:
        with pytest.raises(StorageFault):
            write(ckdir, state, required=model_keys(model))
    finally:
        assert Path(ckdir.manifest_url).read_bytes() == before


def test_an_unwritable_root_is_a_storage_fault(tmp_path: Path) -> None:
    blocker = tmp_path / "root"
    blocker.write_bytes(b"a file where the checkpoint root should be a directory")
    _, state = support.small_state()
    with pytest.raises(StorageFault) as info:
        write(CheckpointDir(str(blocker), RUN, 1, 5), state)
    assert info.value.stage == "writing shards"


def test_the_manifest_is_never_rewritten(tmp_path: Path) -> None:
    model, state = support.small_state()
    ckdir = CheckpointDir(str(tmp_path), RUN, 1, 5)
    write(ckdir, state, required=model_keys(model))
    before = Path(ckdir.manifest_url).read_bytes()
    for name in os.listdir(ckdir.url):  # shards gone, the manifest stays: DCP may rewrite
        if name != MANIFEST:
            os.remove(ckdir.file(name))
    with pytest.raises(StorageFault) as info:
        write(ckdir, state, required=model_keys(model))
    assert info.value.stage == "writing the manifest"
    assert Path(ckdir.manifest_url).read_bytes() == before
    assert not Path(ckdir.manifest_url + ".partial").exists()


def test_a_required_key_missing_from_the_state_fails_coverage(tmp_path: Path) -> None:
    model, state = support.small_state()
    ckdir = CheckpointDir(str(tmp_path), RUN, 1, 5)
    with pytest.raises(StorageFault) as info:
        write(ckdir, state, required=[*model_keys(model), "model.9.weight"])
    assert info.value.stage == "checking coverage"
    assert "model.9.weight" in info.value.detail
    assert not os.path.exists(ckdir.manifest_url)
    assert MANIFEST not in os.listdir(ckdir.url)  # shards are left as staging residue


# -- round trip --------------------------------------------------------------------------

def test_round_trip_model_optimizer_scheduler_rng(tmp_path: Path) -> None:
    def lam(step: int) -> float:
        return 0.5 ** step

    model = make_model(seed=1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    support.train(model, opt, steps=3, seed=2, sched=sched)

    support.reseed(42)
    captured = rng.capture()
    expected = support.draws()  # what the streams give right after the capture
    msd, osd = get_state_dict(model, [opt])
    state = {"model": msd, "optim": osd, "scheduler": sched.state_dict(), "rng.rank0": captured}
    w = write(CheckpointDir(str(tmp_path), RUN, 1, 3), state, required=model_keys(model))
    saved_params, saved_optim = support.params(model), support.optim_tensors(opt)
    saved_sched = sched.state_dict()

    # Fresh objects, different initial values, streams elsewhere.
    model2 = make_model(seed=9)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=0.7, weight_decay=0.1)
    sched2 = torch.optim.lr_scheduler.LambdaLR(opt2, lam)
    support.reseed(7)
    msd2, osd2 = get_state_dict(model2, [opt2])
    template: dict[str, Any] = {"model": msd2, "optim": osd2,
                                "scheduler": sched2.state_dict(), "rng.rank0": rng.capture()}
    assert not all(torch.equal(saved_params[k], v) for k, v in support.params(model2).items())

    c = candidate(w)
    verify(c, Comm.single(), run_id=RUN, dataset_id=DATASET)
    load(c, template, Comm.single())
    set_state_dict(model2, [opt2], model_state_dict=template["model"],
                   optim_state_dict=template["optim"])
    sched2.load_state_dict(template["scheduler"])
    rng.restore(template["rng.rank0"])
    got = support.draws()

    assert support.params(model2).keys() == saved_params.keys()
    for k, v in support.params(model2).items():
        assert torch.equal(v, saved_params[k]), k
    optim2 = support.optim_tensors(opt2)
    assert optim2.keys() == saved_optim.keys() and len(saved_optim) == 12
    for ok, ov in optim2.items():
        assert torch.equal(ov, saved_optim[ok]), ok
    assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]
    assert sched2.state_dict() == saved_sched
    assert torch.equal(got[0], expected[0])
    assert got[1:] == expected[1:]

    # And training continues identically.
    support.train(model, opt, steps=2, seed=3, sched=sched)
    support.train(model2, opt2, steps=2, seed=3, sched=sched2)
    for k, v in support.params(model2).items():
        assert torch.equal(v, support.params(model)[k]), k
    assert sched2.get_last_lr() == sched.get_last_lr()


# -- world-size changes, two real gloo processes -----------------------------------------

def test_save_at_two_ranks_restore_at_one(tmp_path: Path) -> None:
    out, root = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    try:
        support.run_ranks(support.save_ddp_rank, 2, (str(out), str(root)), timeout=150)
    except AssertionError:
        errors = "".join(p.read_text() for p in out.glob("error.rank*.txt"))
        raise AssertionError(errors) from None
    r0, r1 = (torch.load(out / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    for k, v in r0["params"].items():  # DDP kept the replicas identical
        assert torch.equal(v, r1["params"][k]), k
    assert r0["digest"] == r1["digest"]
    files = {f.path: f for f in r0["files"]}
    assert {s.path for s in r0["shards"]} | {s.path for s in r1["shards"]} == (
        set(files) - {DCP_METADATA})
    assert [s.path for s in r0["shards"]] == ["__0_0.distcp"]
    assert [s.path for s in r1["shards"]] == ["__1_0.distcp"]
    for s in (*r0["shards"], *r1["shards"]):
        assert (files[s.path].rank, files[s.path].bytes, files[s.path].crc32c) == (
            s.rank, s.bytes, s.crc32c)
    keys = set(r0["keys"])
    assert any(k.startswith("rng.rank0.") for k in keys)
    assert any(k.startswith("rng.rank1.") for k in keys)

    c = Candidate(10, r0["manifest_url"], r0["digest"])
    manifest = verify(c, Comm.single(), run_id=RUN, dataset_id=DATASET)
    assert manifest.world_size == 2
    model = make_model(seed=77)
    opt = torch.optim.AdamW(model.parameters(), lr=0.9)
    msd, osd = get_state_dict(model, [opt])
    template: dict[str, Any] = {"model": msd, "optim": osd, "rng.rank0": rng.capture()}
    load(c, template, Comm.single())  # requests rank 0's streams only, not rng.rank1
    set_state_dict(model, [opt], model_state_dict=template["model"],
                   optim_state_dict=template["optim"])
    assert sorted(template) == ["model", "optim", "rng.rank0"]
    for k, v in support.params(model).items():
        assert torch.equal(v, r0["params"][k]), k
    got_optim = support.optim_tensors(opt)
    assert got_optim.keys() == r0["optim"].keys()
    for k, v in got_optim.items():
        assert torch.equal(v, r0["optim"][k]), k
    # This rank's streams are rank 0's, not rank 1's.
    assert torch.equal(template["rng.rank0"]["torch"], r0["rng"]["torch"])
    assert not torch.equal(template["rng.rank0"]["torch"], r1["rng"]["torch"])
    rng.restore(template["rng.rank0"])
    x = random.random()
    rng.restore(r0["rng"])
    assert random.random() == x


def test_save_at_one_rank_restore_at_two(tmp_path: Path) -> None:
    out, root = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    model = make_model(seed=5)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    support.train(model, opt, steps=3, seed=6)
    msd, osd = get_state_dict(model, [opt])
    state: dict[str, Any] = {"model": msd, "optim": osd, "rng.rank0": rng.capture()}
    good = write(CheckpointDir(str(root), RUN, 1, 10), state, required=model_keys(model))
    bad = write(CheckpointDir(str(root), RUN, 1, 20), state, required=model_keys(model))
    # File 1 of the manifest is the DCP metadata: at world size 2 rank 1 checks it, and
    # rank 0, which finds nothing wrong in its share, must fail the same way.
    assert [f.path for f in bad.manifest.files][1] == DCP_METADATA
    support.flip_bit(Path(bad.ckdir.file(DCP_METADATA)), 11)
    try:
        support.run_ranks(support.restore_rank, 2,
                          (str(out), candidate(good), candidate(bad)), timeout=150)
    except AssertionError:
        errors = "".join(p.read_text() for p in out.glob("error.rank*.txt"))
        raise AssertionError(errors) from None

    saved, saved_optim = support.params(model), support.optim_tensors(opt)
    r0, r1 = (torch.load(out / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    for r in (r0, r1):
        assert r["corrupt"] == "shard_checksum"
        assert (r["chosen"], r["fell_back"], r["rejected"]) == (
            candidate(good), 1, [(20, "shard_checksum")])
        for k, v in r["params"].items():
            assert torch.equal(v, saved[k]), k
        assert r["optim"].keys() == saved_optim.keys()
        for k, v in r["optim"].items():
            assert torch.equal(v, saved_optim[k]), k
        assert r["lr"] == [0.05]
    assert r0["requested"] == ["model", "optim", "rng.rank0"]
    assert r1["requested"] == ["model", "optim"]  # the checkpoint has no rank-1 streams
    assert torch.equal(r0["rng"]["torch"], state["rng.rank0"]["torch"])
    assert r1["rng"] is None


# -- the fault points kill a write -----------------------------------------------------

_CRASH = textwrap.dedent("""
    import sys
    import torch
    from tests.worker.support import make_model, model_keys, write
    from worker.faults import Fault, Faults
    from worker.layout import CheckpointDir
    root, point = sys.argv[1], sys.argv[2]
    model = make_model(seed=0, dim=64)
    state = {"model": model.state_dict()}
    write(CheckpointDir(root, "run-f", 1, 4), state, required=model_keys(model))
    write(CheckpointDir(root, "run-f", 1, 5), state, required=model_keys(model),
          faults=Faults(Fault(point, 5), 0, 1, "run-f"),
          on_shard=lambda e: print("shard", e.path, e.bytes, flush=True))
    print("survived", flush=True)
""")


def _crash(root: Path, point: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    proc = subprocess.run([sys.executable, "-c", _CRASH, str(root), point], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    return proc, root / "run-f" / "g000001" / "step-0000000004", \
        root / "run-f" / "g000001" / "step-0000000005"


def test_mid_shard_fault_kills_with_a_truncated_shard_and_no_manifest(tmp_path: Path) -> None:
    proc, ref, crashed = _crash(tmp_path, "mid_shard")
    assert proc.returncode == -9, proc.stderr
    assert "survived" not in proc.stdout
    assert "shard" not in proc.stdout  # died before reporting any shard
    assert MANIFEST in os.listdir(ref)
    full = (ref / "__0_0.distcp").stat().st_size
    assert sorted(os.listdir(crashed)) == ["__0_0.distcp"]  # no metadata, no manifest
    assert (crashed / "__0_0.distcp").stat().st_size == full // 2


def test_after_shards_fault_kills_with_complete_shards_and_no_manifest(tmp_path: Path) -> None:
    proc, ref, crashed = _crash(tmp_path, "after_shards")
    assert proc.returncode == -9, proc.stderr
    assert "survived" not in proc.stdout
    full = (ref / "__0_0.distcp").stat().st_size
    assert proc.stdout.split() == ["shard", "__0_0.distcp", str(full)]
    assert sorted(os.listdir(crashed)) == sorted(["__0_0.distcp", DCP_METADATA])
    ref_crc = crc32c.crc32c((ref / "__0_0.distcp").read_bytes())
    assert crc32c.crc32c((crashed / "__0_0.distcp").read_bytes()) == ref_crc


def test_mid_shard_fault_cuts_only_this_ranks_shard(tmp_path: Path) -> None:
    crashed = tmp_path / "run-f" / "g000001" / "step-0000000005"
    crashed.mkdir(parents=True)
    other = os.urandom(4000)  # rank 1 finished its shard first
    (crashed / "__1_0.distcp").write_bytes(other)
    proc, _, _ = _crash(tmp_path, "mid_shard")
    assert proc.returncode == -9, proc.stderr
    assert (crashed / "__1_0.distcp").read_bytes() == other
