"""The checkpoint manifest: the transaction record of one distributed checkpoint.

It is written last, by the coordinator, after every shard is on storage and
its byte count and CRC32C are known, and after the coverage check. It names
everything a restore needs to trust the checkpoint before loading a byte:
the files with sizes and checksums, the keys DCP stored, the run, generation
and step, the data cursor (dataset id, algorithm, the loader state with its
per-source counts and packer residue), counters and code version. Its
SHA-256 is what ``ManifestProposed`` carries and the log commits, so a
manifest that changed after commit is caught too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dataplane.documents import sha256_digest
from worker.errors import VerificationFailed

FORMAT = "runledger-checkpoint/v1"


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str  # relative to the checkpoint directory
    bytes: int
    crc32c: int
    rank: int  # the rank that wrote it (-1: the coordinator's DCP metadata)


@dataclass(frozen=True, slots=True)
class CheckpointManifest:
    run_id: str
    generation: int
    step: int
    world_size: int
    files: tuple[FileEntry, ...]
    keys: tuple[str, ...]
    dataset_id: str | None = None
    data: dict[str, Any] | None = None  # the loader's state dict at this step boundary
    counters: dict[str, int] = field(default_factory=dict)
    code_version: str = ""
    parent_digest: str | None = None
    format: str = FORMAT

    def to_json(self) -> bytes:
        doc = {
            "format": self.format, "run_id": self.run_id, "generation": self.generation,
            "step": self.step, "world_size": self.world_size,
            "files": [{"path": f.path, "bytes": f.bytes, "crc32c": f.crc32c, "rank": f.rank}
                      for f in self.files],
            "keys": list(self.keys), "dataset_id": self.dataset_id, "data": self.data,
            "counters": self.counters, "code_version": self.code_version,
            "parent_digest": self.parent_digest,
        }
        # Not dataplane.documents.canonical_json on purpose: that keeps non-ASCII
        # text as UTF-8, this escapes it (\u00e9). The digest of these bytes is
        # what the log commits, so a state key or path with non-ASCII characters
        # would get a different digest in the other form; a manifest is verified
        # against its stored bytes, never re-serialised, so nothing needs both.
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)


def digest(data: bytes) -> str:
    return sha256_digest(data)


def parse(data: bytes, where: str) -> CheckpointManifest:
    """A manifest from its bytes; anything malformed is ``manifest_invalid``."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r} is not {FORMAT}")
        files = tuple(FileEntry(path=_str(f["path"]), bytes=_int(f["bytes"]),
                                crc32c=_int(f["crc32c"]), rank=int(f["rank"]))
                      for f in doc["files"])
        data_state = doc.get("data")
        if data_state is not None and not isinstance(data_state, dict):
            raise ValueError("data must be an object or null")
        counters = doc.get("counters") or {}
        if not isinstance(counters, dict):
            raise ValueError("counters must be an object")
        return CheckpointManifest(
            run_id=_str(doc["run_id"]), generation=_int(doc["generation"]),
            step=_int(doc["step"]), world_size=_int(doc["world_size"]), files=files,
            keys=tuple(_str(k) for k in doc["keys"]), dataset_id=doc.get("dataset_id"),
            data=data_state, counters={str(k): _int(v) for k, v in counters.items()},
            code_version=str(doc.get("code_version", "")),
            parent_digest=doc.get("parent_digest"))
    except (ValueError, KeyError, TypeError) as exc:
        raise VerificationFailed("manifest_invalid", f"{where}: {exc}") from None


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{v!r} is not a non-negative integer")
    return v


def _str(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"{v!r} is not a non-empty string")
    return v
