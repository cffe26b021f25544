"""worker/storage.py: checkpoint storage through fsspec: write-once files, checksums,
listings, removal, and every failure a ``StorageFault`` naming the stage; DCP's reader
and writer for each kind of store, made without importing torch before they are asked
for; the one CRC helper thread."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest

from worker import storage
from worker.errors import StorageFault
from worker.layout import MANIFEST


def test_write_once_writes_then_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "step" / MANIFEST
    target.parent.mkdir()
    storage.write_once(str(target), b"first")
    assert target.read_bytes() == b"first"
    assert sorted(os.listdir(target.parent)) == [MANIFEST]

    with pytest.raises(StorageFault) as info:
        storage.write_once(str(target), b"second")
    assert info.value.stage == "writing the manifest"
    assert "immutable" in info.value.detail
    assert target.read_bytes() == b"first"
    assert sorted(os.listdir(target.parent)) == [MANIFEST]  # no .partial left behind


def test_write_once_into_a_missing_directory_is_a_storage_fault(tmp_path: Path) -> None:
    target = tmp_path / "not-there" / MANIFEST
    with pytest.raises(StorageFault):
        storage.write_once(str(target), b"x")
    assert not target.exists()


def test_checksum_is_size_and_crc32c_of_the_bytes(tmp_path: Path) -> None:
    # Larger than the 8 MiB read block, so the CRC is chained across chunks.
    data = os.urandom(9 * (1 << 20) + 123)
    f = tmp_path / "blob"
    f.write_bytes(data)
    assert storage.checksum(str(f)) == (len(data), crc32c.crc32c(data))
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert storage.checksum(str(empty)) == (0, crc32c.crc32c(b""))
    assert storage.size_of(str(f)) == len(data)


def test_checksum_of_a_missing_file_is_a_storage_fault(tmp_path: Path) -> None:
    with pytest.raises(StorageFault) as info:
        storage.checksum(str(tmp_path / "nope"))
    assert info.value.stage == "checksumming"
    assert storage.size_of(str(tmp_path / "nope")) is None
    assert storage.read_bytes(str(tmp_path / "nope")) is None


def test_list_names_and_remove_tree(tmp_path: Path) -> None:
    assert storage.list_names(str(tmp_path / "missing")) == []
    storage.remove_tree(str(tmp_path / "missing"))  # already gone: fine

    root = tmp_path / "d"
    (root / "sub").mkdir(parents=True)
    (root / "b.txt").write_bytes(b"b")
    (root / ".metadata").write_bytes(b"m")
    (root / "sub" / "x").write_bytes(b"x")
    assert storage.list_names(str(root)) == [".metadata", "b.txt", "sub"]
    assert storage.read_bytes(str(root / "b.txt")) == b"b"

    storage.remove_tree(str(root))
    assert not root.exists()
    storage.remove_tree(str(root))  # twice is fine


def test_local_urls() -> None:
    assert storage.is_local("/tmp/x")
    assert storage.is_local("file:///tmp/x")
    assert storage.local_path("file:///tmp/x") == "/tmp/x"
    assert not storage.is_local("memory://x")


def test_dcp_readers_and_writers_by_store(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter

    from worker.dcpfs import FsspecReader, FsspecWriter

    local = str(tmp_path / "step")
    assert type(storage.dcp_writer(local)) is FileSystemWriter
    assert type(storage.dcp_writer("memory://ck/step")) is FsspecWriter
    assert storage.dcp_reader_class(f"file://{local}") == (FileSystemReader, local)
    assert storage.dcp_reader_class("memory://ck/step") == (FsspecReader, "memory://ck/step")
    assert type(storage.dcp_reader(local)) is FileSystemReader


def test_storage_alone_does_not_import_torch() -> None:
    """`runledger query` reads manifests through it: torch would cost it seconds."""
    code = "import sys, worker.storage; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "False"


def test_one_crc_thread_for_the_process() -> None:
    pool = storage.crc_pool()
    assert storage.crc_pool() is pool
    assert pool.submit(crc32c.crc32c, b"abc", 0).result() == crc32c.crc32c(b"abc")
