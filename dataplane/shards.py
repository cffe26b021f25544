"""The ``rltok-v1`` shard format: tokenized documents as one memory-mappable file.

Layout (little endian)::

    0   8 bytes  magic b"RLTOK\\x00\\x01\\x00"
    8   u32      token item size in bytes (2 or 4)
    12  u32      reserved, 0
    16  u64      record count n
    24  u64      token count t
    32  32 bytes reserved, 0
    64  u64[n+1] offsets: record r is tokens[offsets[r]:offsets[r+1]], offsets[0] == 0
    ..  item[t]  tokens

Everything is fixed width, so a reader maps it (a local file) or reads exactly
the ranges it needs (any fsspec store): the 64-byte header and the offsets
index once per object, then one range read per record. Readers check the
object against its manifest entry before serving a record from it.

Tested in tests/dataplane/test_synth.py, tests/dataplane/test_catalog.py and
tests/dataplane/test_loader.py.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import numpy.typing as npt

from dataplane.documents import sha256_digest

MAGIC = b"RLTOK\x00\x01\x00"
HEADER_BYTES = 64
_HEADER = struct.Struct("<8sIIQQ32x")
DTYPES: dict[int, type[np.unsignedinteger[Any]]] = {2: np.uint16, 4: np.uint32}

Tokens = npt.NDArray[np.unsignedinteger[Any]]
Offsets = npt.NDArray[np.uint64]


class ShardFormatError(ValueError):
    """Bytes that are not an rltok-v1 shard; callers turn it into a DataFault."""


def itemsize_for(vocab_size: int) -> int:
    return 2 if vocab_size <= 1 << 16 else 4


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """What the manifest records about a written object."""

    digest: str
    bytes: int
    records: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Header:
    itemsize: int
    records: int
    tokens: int

    @property
    def offsets_at(self) -> int:
        return HEADER_BYTES

    @property
    def tokens_at(self) -> int:
        return HEADER_BYTES + 8 * (self.records + 1)

    @property
    def size(self) -> int:
        return self.tokens_at + self.itemsize * self.tokens


def encode(docs: Iterable[npt.ArrayLike], itemsize: int) -> bytes:
    """The bytes of one shard holding ``docs`` in order."""
    dtype = DTYPES[itemsize]
    arrays = [np.asarray(d) for d in docs]
    for i, a in enumerate(arrays):
        if a.ndim != 1:
            raise ValueError(f"document {i} is not one-dimensional")
        if a.size and (a.min() < 0 or int(a.max()) > np.iinfo(dtype).max):
            raise ValueError(f"document {i} has a token outside {dtype.__name__}")
    lengths = np.array([a.size for a in arrays], dtype=np.uint64)
    offsets = np.zeros(len(arrays) + 1, dtype=np.uint64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = (np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype=dtype))
    head = _HEADER.pack(MAGIC, itemsize, 0, len(arrays), int(offsets[-1]))
    body = tokens.astype(np.dtype(dtype).newbyteorder("<")).tobytes()
    return head + offsets.astype("<u8").tobytes() + body


def write_shard(url: str, docs: Iterable[npt.ArrayLike], itemsize: int) -> ShardInfo:
    """Write one shard through fsspec and return what its manifest entry needs."""
    data = encode(docs, itemsize)
    with fsspec.open(url, "wb") as f:
        f.write(data)
    header = parse_header(data[:HEADER_BYTES])
    return ShardInfo(digest=sha256_digest(data), bytes=len(data),
                     records=header.records, tokens=header.tokens)


def parse_header(raw: bytes) -> Header:
    if len(raw) < HEADER_BYTES:
        raise ShardFormatError(f"the header is {len(raw)} bytes, expected {HEADER_BYTES}")
    magic, itemsize, _, records, tokens = _HEADER.unpack(raw[:HEADER_BYTES])
    if magic != MAGIC:
        raise ShardFormatError(f"bad magic {magic!r}: not an rltok-v1 shard")
    if itemsize not in DTYPES:
        raise ShardFormatError(f"token item size {itemsize} is neither 2 nor 4")
    return Header(itemsize=itemsize, records=records, tokens=tokens)


def parse_offsets(raw: bytes, header: Header) -> Offsets:
    offsets = np.frombuffer(raw, dtype="<u8").astype(np.uint64)
    if offsets.size != header.records + 1:
        raise ShardFormatError(
            f"the offsets index holds {offsets.size} entries, expected {header.records + 1}")
    if (offsets[0] != 0 or int(offsets[-1]) != header.tokens
            or bool(np.any(offsets[1:] < offsets[:-1]))):
        raise ShardFormatError(
            "the offsets index is not a non-decreasing run from 0 to the token count")
    return offsets


def file_digest(fs: fsspec.AbstractFileSystem, path: str, block: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def read_lengths(url: str) -> tuple[Header, Offsets]:
    """The header and offsets index of one shard (two small range reads)."""
    fs, path = fsspec.core.url_to_fs(url)
    header = parse_header(fs.cat_file(path, 0, HEADER_BYTES))
    raw = fs.cat_file(path, header.offsets_at, header.tokens_at)
    return header, parse_offsets(raw, header)


def shard_info(url: str) -> ShardInfo:
    """Digest, size and counts of a stored shard, for ``runledger dataset build``."""
    fs, path = fsspec.core.url_to_fs(url)
    header, _ = read_lengths(url)
    size = int(fs.size(path))
    if size != header.size:
        raise ShardFormatError(f"the file is {size} bytes but its header implies {header.size}")
    return ShardInfo(digest=file_digest(fs, path), bytes=size, records=header.records,
                     tokens=header.tokens)
