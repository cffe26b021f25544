"""worker/crcwrite.py and commit's opt-in read-back: the CRC32C taken on the write path
equals the CRC32C of the bytes on disk (small writes and large ones, which are checksummed
on the helper thread), and a store that changed a written byte is caught by the read-back."""

from __future__ import annotations

import os
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.checkpoint.filesystem import FileSystem

from tests.worker import support
from tests.worker.support import RUN, model_keys, write
from worker import commit
from worker.crcwrite import CrcFileSystem, Sum
from worker.errors import StorageFault
from worker.layout import CheckpointDir

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 7, 4096, (1 << 20) - 1, 1 << 20, (3 << 20) + 5]),
                max_size=6), st.integers(0, 255))
def test_the_write_path_sum_is_the_files_sum(sizes: list[int], fill: int) -> None:
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        fs = CrcFileSystem(FileSystem())
        path = Path(d) / "__0_0.distcp"
        with fs.create_stream(path, "wb") as stream:
            for i, n in enumerate(sizes):
                assert stream.write(bytes([(fill + i) % 256]) * n) == n
        data = path.read_bytes()
        assert fs.sums["__0_0.distcp"] == Sum(len(data), crc32c.crc32c(data))


def test_a_checksummed_stream_refuses_to_seek(tmp_path: Path) -> None:
    fs = CrcFileSystem(FileSystem())
    with fs.create_stream(tmp_path / "f", "wb") as stream:
        stream.write(b"abc")
        assert stream.tell() == 3
        with pytest.raises(OSError, match="front to back"):
            stream.seek(0)


def test_streams_opened_for_reading_are_not_wrapped(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"xyz")
    fs = CrcFileSystem(FileSystem())
    with fs.create_stream(tmp_path / "f", "rb") as stream:
        assert stream.read() == b"xyz"
    assert fs.sums == {}


def test_readback_passes_on_a_faithful_store(tmp_path: Path) -> None:
    model, state = support.small_state()
    ckdir = CheckpointDir(str(tmp_path), RUN, 1, 5)
    written = support.write(ckdir, state, required=model_keys(model), readback=True)
    shard = next(f for f in written.manifest.files if f.path.endswith(".distcp"))
    data = Path(ckdir.file(shard.path)).read_bytes()
    assert (shard.bytes, shard.crc32c) == (len(data), crc32c.crc32c(data))


def test_readback_names_a_shard_the_store_changed(tmp_path: Path) -> None:
    model, state = support.small_state()
    ckdir = CheckpointDir(str(tmp_path), RUN, 1, 6)
    written = write(ckdir, state, required=model_keys(model))
    shard = next(f for f in written.manifest.files if f.path.endswith(".distcp"))
    support.flip_bit(Path(ckdir.file(shard.path)), os.path.getsize(ckdir.file(shard.path)) // 2)
    with pytest.raises(StorageFault, match=r"__0_0\.distcp reads back as .* were written"):
        commit._read_back(ckdir, shard.path, Sum(shard.bytes, shard.crc32c))
