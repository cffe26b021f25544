"""CRC32C on the write path: DCP's writer with every stream it opens checksummed.

Reading every shard back after DCP wrote it cost ~15% of a bare DCP save
(bench/checkpoint.py). Instead, the file system object a DCP writer opens its
streams through is wrapped: each byte DCP writes passes through
:class:`CrcStream`, which keeps the running CRC32C and byte count of that file.
The checksum is of what the worker handed to the store; reading the files back
(``worker.commit.READBACK``) is the opt-in check that the store kept it.

Large writes are checksummed on the helper thread (``worker.storage.crc_pool``)
while the same bytes go to the stream: both release the GIL, so the CRC mostly
hides behind the copy into the page cache. The caller waits for both before
``write`` returns, so the buffer is never read after DCP may reuse it.

Tested in tests/worker/test_crcwrite.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import crc32c

from worker.storage import crc_pool

# Below this a thread hand-off costs more than the CRC it would hide (~12 GB/s).
_OVERLAP_MIN = 1 << 20


@dataclass(frozen=True, slots=True)
class Sum:
    """One file as written: its byte count and CRC32C."""

    bytes: int
    crc32c: int


class CrcStream:
    """A binary write stream that checksums what passes through it; the rest delegates."""

    def __init__(self, raw: Any, name: str, sums: dict[str, Sum]) -> None:
        self._raw = raw
        self._name = name
        self._sums = sums
        self._crc = 0
        self._size = 0

    def write(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        if view.nbytes >= _OVERLAP_MIN:
            crc: Future[int] = crc_pool().submit(crc32c.crc32c, view, self._crc)
            try:
                n = self._raw.write(view)
            finally:
                self._crc = crc.result()
        else:
            n = self._raw.write(view)
            self._crc = crc32c.crc32c(view, self._crc)
        # A short write would leave the CRC covering bytes the file lacks: refuse it.
        if n is not None and n != view.nbytes:
            raise OSError(f"{self._name}: short write, {n} of {view.nbytes} bytes")
        self._size += view.nbytes
        self._sums[self._name] = Sum(self._size, self._crc)
        return view.nbytes

    def seek(self, *args: Any) -> int:
        # Rewriting earlier bytes would make the running CRC wrong; DCP never does.
        raise OSError(f"{self._name}: a checksummed stream is written front to back only")

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def __getattr__(self, attr: str) -> Any:  # tell, flush, fileno, close, ...
        return getattr(self._raw, attr)


class CrcFileSystem:
    """Wraps a DCP ``FileSystemBase``: streams opened for writing are checksummed."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.sums: dict[str, Sum] = {}

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
        with self._inner.create_stream(path, mode) as stream:
            if "w" not in mode:
                yield stream
                return
            name = os.path.basename(os.fspath(path).rstrip("/"))
            self.sums[name] = Sum(0, 0)
            yield CrcStream(stream, name, self.sums)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


def checksummed(writer: Any) -> CrcFileSystem:
    """Make ``writer`` (a DCP FileSystemWriter or FsspecWriter) checksum what it writes;
    the returned object's ``sums`` fill in as it writes, keyed by file name."""
    fs = CrcFileSystem(writer.fs)
    writer.fs = fs
    return fs
