"""Checkpoint storage through fsspec: checksums, write-once files, listings, removal.

Every error from the store becomes a :class:`~worker.errors.StorageFault`
naming the stage and the URL, so a worker reports it and exits with the
storage exit code instead of dying on a bare ``OSError``.

DCP's storage reader and writer for a checkpoint directory are made here too
(:func:`dcp_reader`, :func:`dcp_writer`: the plain file system's for a local
path, fsspec's, ``worker.dcpfs``, for any other store), as is the one helper
thread CRC32C runs on while bytes move (:func:`crc_pool`: ``worker.crcwrite``
as DCP writes, ``worker.verified`` as restore reads). torch is imported only
when a DCP reader or writer is made: reading a manifest needs none of it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import crc32c
import fsspec

from worker.errors import StorageFault

T = TypeVar("T")
_BLOCK = 8 << 20
_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def guarded(stage: str, url: str, action: Callable[[], T]) -> T:
    try:
        return action()
    except StorageFault:
        raise
    except (OSError, ValueError) as exc:
        raise StorageFault(stage, f"{url}: {exc}") from exc


def checksum(url: str) -> tuple[int, int]:
    """``(bytes, crc32c)`` of a stored file, read back in full from the store."""
    def run() -> tuple[int, int]:
        fs, path = _fs(url)
        crc = 0
        size = 0
        with fs.open(path, "rb") as f:
            while chunk := f.read(_BLOCK):
                crc = crc32c.crc32c(chunk, crc)
                size += len(chunk)
        return size, crc
    return guarded("checksumming", url, run)


def size_of(url: str) -> int | None:
    fs, path = _fs(url)
    try:
        return int(fs.size(path))
    except FileNotFoundError:
        return None


def write_once(url: str, data: bytes) -> None:
    """Write a file that must not exist yet (a manifest is never rewritten)."""
    def run() -> None:
        fs, path = _fs(url)
        if fs.exists(path):
            raise StorageFault("writing the manifest", f"{url} already exists; manifests are"
                               " immutable")
        tmp = path + ".partial"
        if is_local(url):
            # The manifest is the commit record: it must be on disk before it is
            # proposed, and so must the rename that makes it visible.
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            return
        with fs.open(tmp, "wb") as f:
            f.write(data)
        fs.mv(tmp, path)
    guarded("writing the manifest", url, run)


def read_bytes(url: str) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    fs, path = _fs(url)
    try:
        data: bytes = fs.cat_file(path)
    except FileNotFoundError:
        return None
    return data


def list_names(url: str) -> list[str]:
    """Entry names directly under a directory URL (none when it does not exist)."""
    fs, path = _fs(url)
    try:
        entries = fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)


def remove_tree(url: str) -> None:
    fs, path = _fs(url)
    with contextlib.suppress(FileNotFoundError):  # already gone: removal is retried safely
        fs.rm(path, recursive=True)


def is_local(url: str) -> bool:
    fs, _ = _fs(url)
    proto = fs.protocol
    return "file" in ((proto,) if isinstance(proto, str) else tuple(proto))


def local_path(url: str) -> str:
    _, path = _fs(url)
    return path


def dcp_reader_class(url: str) -> tuple[type[Any], str]:
    """The class :func:`dcp_reader` makes for ``url`` and the location it is made with,
    for a caller that extends it (``worker.verified``'s reader of held shards)."""
    if is_local(url):
        from torch.distributed.checkpoint.filesystem import FileSystemReader

        return FileSystemReader, local_path(url)
    from worker.dcpfs import FsspecReader

    return FsspecReader, url


def dcp_reader(url: str) -> Any:
    """DCP's storage reader of the checkpoint directory at ``url``."""
    cls, where = dcp_reader_class(url)
    return cls(where)


def dcp_writer(url: str) -> Any:
    """DCP's storage writer into the checkpoint directory at ``url``: files synced, none
    overwritten."""
    if is_local(url):
        from torch.distributed.checkpoint.filesystem import FileSystemWriter

        return FileSystemWriter(local_path(url), sync_files=True, overwrite=False)
    from worker.dcpfs import FsspecWriter

    return FsspecWriter(url, sync_files=True, overwrite=False)


def crc_pool() -> ThreadPoolExecutor:
    """The helper thread that checksums one buffer while the next is written or read
    (both release the GIL); one per process, made on first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runledger-crc")
        return _pool
