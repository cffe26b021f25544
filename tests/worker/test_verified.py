"""worker/verified.py and restore's one read: a file's count and CRC32C read once (mapped
when local, buffered through fsspec otherwise, across chunk boundaries), tensors taken
from torch.save bytes without a copy, and a load served from the verified bytes rather
than from the store again."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import crc32c
import fsspec
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.worker import support
from tests.worker.support import RUN, candidate, model_keys, write
from worker import restore, storage, verified
from worker.comm import Comm
from worker.errors import VerificationFailed
from worker.layout import CheckpointDir

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


@settings(max_examples=30, deadline=None)
@given(data=st.binary(max_size=200), chunk=st.integers(1, 64), hold=st.booleans(),
       local=st.booleans())
def test_read_checked_counts_and_sums_every_byte_once(data: bytes, chunk: int, hold: bool,
                                                      local: bool) -> None:
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        mp.setattr(verified, "_CHUNK", chunk)
        url = f"{d}/f" if local else f"memory://rl-verified{d}/f"
        fs, path = fsspec.core.url_to_fs(url)
        fs.pipe_file(path, data)
        n, crc, buf = verified.read_checked(url, len(data), hold)
        assert (n, crc) == (len(data), crc32c.crc32c(data))
        assert (buf is not None) == hold
        if buf is not None:
            assert bytes(buf.numpy()) == data
        fs.rm(path)


@pytest.mark.parametrize("local", [True, False])
def test_a_file_longer_or_shorter_than_the_manifest_reads_as_another_count(
        tmp_path: Path, local: bool) -> None:
    url = str(tmp_path / "f") if local else f"memory://rl-verified-len{tmp_path}/f"
    fs, path = fsspec.core.url_to_fs(url)
    fs.pipe_file(path, b"x" * 100)
    for expected in (90, 110):
        for hold in (True, False):
            assert verified.read_checked(url, expected, hold)[0] != expected


@pytest.mark.parametrize("tensor", [
    torch.arange(12, dtype=torch.float32).reshape(3, 4),
    torch.arange(10, dtype=torch.int64)[3:8],  # a view: torch.save keeps the storage offset
    torch.ones(5, dtype=torch.bfloat16),
    torch.zeros(0),
])
def test_tensor_of_reads_torch_save_bytes_in_place(tensor: torch.Tensor) -> None:
    out = io.BytesIO()
    torch.save(tensor, out)
    padded = torch.frombuffer(bytearray(b"\x07" * 13 + out.getvalue() + b"\x09" * 5),
                              dtype=torch.uint8)
    segment = padded[13:13 + len(out.getvalue())]
    got = verified.tensor_of(segment)
    assert got.dtype == tensor.dtype and torch.equal(got, tensor)
    if got.numel():  # a view of the segment's bytes, not a copy
        start = padded.data_ptr()
        assert start <= got.data_ptr() < start + padded.numel()


def test_load_uses_the_verified_bytes_not_the_store_again(tmp_path: Path) -> None:
    model, state = support.small_state()
    written = write(CheckpointDir(str(tmp_path), RUN, 1, 7), state, required=model_keys(model))
    good = candidate(written)
    restore.verify(good, Comm.single(), run_id=RUN, dataset_id=None)
    # The shards go away after the check (GC, a lost volume): the load still has them.
    for f in written.manifest.files:
        if f.path.endswith(".distcp"):
            Path(written.ckdir.file(f.path)).unlink()
    target = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()}}
    held = restore._held[good.url]
    restore.load(good, target, Comm.single())
    for k, v in state["model"].items():
        assert torch.equal(target["model"][k], v), k
    assert restore._held == {} and held == {}  # released after the load, not left to gc


def test_a_refused_checkpoint_holds_nothing(tmp_path: Path) -> None:
    model, state = support.small_state()
    written = write(CheckpointDir(str(tmp_path), RUN, 1, 8), state, required=model_keys(model))
    shard = next(f for f in written.manifest.files if f.path.endswith(".distcp"))
    support.flip_bit(Path(written.ckdir.file(shard.path)), shard.bytes - 1)
    with pytest.raises(VerificationFailed) as err:
        restore.verify(candidate(written), Comm.single(), run_id=RUN, dataset_id=None)
    assert err.value.reason == "shard_checksum"
    assert restore._held == {}


def test_the_writer_rank_of_a_shard_verifies_it() -> None:
    assert restore._verifier(0, "__3_0.distcp", 4) == 3
    assert restore._verifier(0, "__13_0.distcp", 4) == 1
    assert restore._verifier(5, ".metadata", 4) == 1
    assert storage.is_local("/tmp")


def test_a_remote_shard_over_the_budget_is_checked_streaming_and_read_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model, state = support.small_state()
    ckdir = CheckpointDir("memory://rl-verified-budget", RUN, 1, 9)
    written = write(ckdir, state, required=model_keys(model))
    for room, expect_held in ((0, False), (1 << 30, True)):
        monkeypatch.setattr(verified, "HOLD_MAX", room)
        restore.verify(candidate(written), Comm.single(), run_id=RUN, dataset_id=None)
        assert bool(restore._held[ckdir.url]) == expect_held
        target = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()}}
        restore.load(candidate(written), target, Comm.single())
        for k, v in state["model"].items():
            assert torch.equal(target["model"][k], v), k
    storage.remove_tree(ckdir.url)
