"""Restore in one read: shards read once into memory, checked there, and loaded from there.

Verifying every CRC32C and then letting DCP read the files again moved every
byte from the store twice and copied it twice more inside ``torch.load``
(bench/checkpoint.py: 0.23 of a raw sequential read). Here a verified shard is
one buffer: :func:`read_checked` reads the file once (the CRC of each chunk
computed on a helper thread while the next chunk is read), and
:class:`HeldReader` hands DCP tensors that are views into that buffer, so the
only copy left is into the model's own tensors. The bytes loaded are the bytes
whose checksum passed; nothing reaches the model before every rank's check has
(``worker.restore.verify`` agrees on the outcome before ``load`` runs).

A local shard is mapped (``mmap``): the kernel reads it once into the page
cache and both the CRC and the load read it there; the mapping outlives the
file's removal, but not an in-place rewrite, which the write-once layout never
does. A shard on another store is read into a buffer, held only while the
buffers stay under :data:`HOLD_MAX` bytes per process; beyond it, the shard is
checked while streaming and DCP reads it from the store again, as before.

Tested in tests/worker/test_verified.py.
"""

from __future__ import annotations

import inspect
import io
import mmap
import warnings
from concurrent.futures import Future
from typing import IO, Any, cast

import crc32c
import fsspec
import torch
import torch.serialization as tser

# torch's own private names (no public API loads a tensor record in place): a
# third-party package's, which the project's rule against private names across
# modules (tests/test_layout.py) leaves alone.
from torch import _weights_only_unpickler
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner
from torch.futures import Future as TorchFuture

from worker import storage

# Host memory a restore may hold at once for verified shards read from a non-local
# store (one rank's share at most; several ranks share a node's RAM, hence 16 GiB).
HOLD_MAX = 16 << 30
_CHUNK = 64 << 20


def read_checked(url: str, size: int, hold: bool) -> tuple[int, int, torch.Tensor | None]:
    """``(bytes read, CRC32C, the bytes as a uint8 tensor if hold)`` of one stored file.

    ``size`` (from the manifest, already matched against the store) sizes the buffer;
    a file that turns out shorter or longer reads as a different count."""
    fs, path = fsspec.core.url_to_fs(url)
    if hold and size > 0 and _is_local(fs):
        return _mapped(path)
    chunk = max(1, min(_CHUNK, size))
    # Held: the whole file, read in order. Not held: two chunk slots taking turns, so
    # the helper thread checksums one while the other fills.
    buf = torch.empty(size if hold else 2 * chunk, dtype=torch.uint8)
    view = _bytes_of(buf)
    crc = 0
    done = 0
    slot = 0
    pending: Future[int] | None = None
    with fs.open(path, "rb") as f:
        while True:
            at = done if hold else slot * chunk
            want = min(chunk, size - done) if hold else chunk
            n = f.readinto(view[at:at + want]) if want > 0 else 0
            if pending is not None:
                crc = pending.result()
                pending = None
            if not n:
                break
            pending = storage.crc_pool().submit(crc32c.crc32c, view[at:at + n], crc)
            done += n
            slot ^= 1
        extra = len(f.read(1))  # a file longer than the manifest says
    return done + extra, crc, buf[:done] if hold else None


def _mapped(path: str) -> tuple[int, int, torch.Tensor]:
    """A local file mapped read-only: the kernel reads it once into the page cache, the
    CRC and later the load read it there, so no copy is made before the model's own."""
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    size = len(mm)
    mm.madvise(mmap.MADV_SEQUENTIAL)
    view = memoryview(mm)
    crc = 0
    for at in range(0, size, _CHUNK):
        ahead = at + _CHUNK
        if ahead < size:  # start reading the next chunk while this one is checksummed
            page = ahead - ahead % mmap.PAGESIZE  # madvise wants a page-aligned start
            mm.madvise(mmap.MADV_WILLNEED, page, min(ahead + _CHUNK, size) - page)
        crc = crc32c.crc32c(view[at:at + _CHUNK], crc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only buffer: never written
        buf = torch.frombuffer(view, dtype=torch.uint8)
    return size, crc, buf


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    proto = fs.protocol
    return "file" in ((proto,) if isinstance(proto, str) else tuple(proto))


def _bytes_of(t: torch.Tensor) -> memoryview:
    return memoryview(cast(Any, t.numpy())).cast("B")


class _MemFile(io.RawIOBase):
    """A seekable read-only file over a memoryview, for the zip reader of ``torch.load``."""

    def __init__(self, view: memoryview) -> None:
        super().__init__()
        self._view = view
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, b: Any) -> int:
        n = max(0, min(len(b), len(self._view) - self._pos))
        memoryview(b).cast("B")[:n] = self._view[self._pos:self._pos + n]
        self._pos += n
        return n


# torch.load's private ``_load`` takes ``weights_only`` itself in newer releases and
# passes unknown keywords on to the unpickler in older ones (torch 2.11's refused it:
# "Unpickler.__init__() got an unexpected keyword argument 'weights_only'").
_WEIGHTS_ONLY: dict[str, bool] = (
    {"weights_only": True} if "weights_only" in inspect.signature(tser._load).parameters
    else {})


def tensor_of(segment: torch.Tensor) -> torch.Tensor:
    """The tensor ``torch.save`` wrote into ``segment`` (uint8), as a view of its bytes.

    DCP stores each tensor as its own torch.save archive; giving ``torch.load``'s
    reader the segment's storage makes the tensor's storage a slice of it, not a copy."""
    storage = segment.untyped_storage()
    start = segment.storage_offset()
    overall = storage[start:start + segment.numel()]
    source = cast(IO[bytes], _MemFile(_bytes_of(segment)))
    with tser._open_zipfile_reader(source) as zf:
        tensor = tser._load(  # type: ignore[no-untyped-call]
            zf, "cpu", _weights_only_unpickler, overall_storage=overall, **_WEIGHTS_ONLY)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"a DCP tensor record holds {type(tensor).__name__}, not a tensor")
    return tensor


def reader(url: str, held: dict[str, torch.Tensor]) -> Any:
    """A DCP storage reader for ``url`` that serves the files in ``held`` from memory
    (``worker.storage.dcp_reader`` for the rest)."""
    found, where = storage.dcp_reader_class(url)
    base: Any = found

    class HeldReader(base):  # type: ignore[misc]
        def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> TorchFuture[None]:
            rest = []
            for req in plan.items:
                info = self.storage_data[req.storage_index]
                buf = held.get(info.relative_path)
                if buf is None or info.transform_descriptors:
                    rest.append(req)  # not held, or stored through a stream transform
                    continue
                _serve(req, planner, buf[info.offset:info.offset + info.length])
            if rest:
                return cast(TorchFuture[None], super().read_data(
                    LoadPlan(rest, plan.storage_data, plan.planner_data), planner))
            fut: TorchFuture[None] = TorchFuture()
            fut.set_result(None)
            return fut

    return HeldReader(where)


def _serve(req: Any, planner: LoadPlanner, segment: torch.Tensor) -> None:
    if req.type == LoadItemType.BYTE_IO:
        planner.load_bytes(req, io.BytesIO(segment.numpy().tobytes()))
        return
    tensor = narrow_tensor_by_index(tensor_of(segment), req.storage_offsets, req.lengths)
    target = planner.resolve_tensor(req).detach()
    if target.size() != tensor.size():
        raise AssertionError(f"req {req.storage_index} mismatch sizes {target.size()} vs"
                             f" {tensor.size()}")
    target.copy_(tensor)
    planner.commit_tensor(req, target)
