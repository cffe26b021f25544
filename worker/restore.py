"""Restoring: only committed manifests, verified in full before anything loads.

Candidates come from the log (newest committed first, within the rollback
window). For each, every rank reads the manifest, checks its SHA-256 against
the digest the log committed, checks that it belongs to this run and dataset,
then checksums its share of the files (file ``i`` goes to rank ``i mod W``);
the ranks agree on the first failure, so all of them move to the same older
candidate. Only a candidate that passes is handed to DCP, which reshards
when the world size changed.

One read (``worker.verified``): a shard is checksummed from a buffer it was read
into once, and ``load`` hands DCP views of those verified bytes instead of
reading the store again. A shard ``__R_*`` is verified by rank ``R mod W``,
which is the rank that loads it when the world size did not change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from worker import storage, verified
from worker.comm import Comm
from worker.errors import NoUsableCheckpoint, VerificationFailed
from worker.layout import dir_of_manifest
from worker.manifest import CheckpointManifest, digest, parse

# The verified bytes of the last candidate this process verified, by candidate URL
# then file name, until ``load`` uses them (or another verify replaces them).
_held: dict[str, dict[str, torch.Tensor]] = {}


@dataclass(frozen=True, slots=True)
class Candidate:
    step: int
    manifest_url: str
    manifest_digest: str
    tier: str = ""  # the storage tier this copy is on ("" when the run has one root)

    @property
    def url(self) -> str:
        return dir_of_manifest(self.manifest_url)


def verify(candidate: Candidate, comm: Comm, *, run_id: str,
           dataset_id: str | None) -> CheckpointManifest:
    """Collective: the manifest if the whole checkpoint checks out, else the same
    :class:`VerificationFailed` on every rank."""
    problem: tuple[str, str] | None = None
    manifest: CheckpointManifest | None = None
    _held.clear()
    held: dict[str, torch.Tensor] = {}
    try:
        manifest = _verify_manifest(candidate, run_id, dataset_id)
        # A local shard is mapped (page cache, reclaimable); a remote one is a buffer.
        local = storage.is_local(candidate.url)
        room = verified.HOLD_MAX
        for i, f in enumerate(manifest.files):
            if _verifier(i, f.path, comm.world_size) == comm.rank:
                hold = f.path.endswith(".distcp") and (local or f.bytes <= room)
                buf = _verify_file(candidate.url, f.path, f.bytes, f.crc32c, hold=hold)
                if buf is not None:
                    held[f.path] = buf
                    room -= 0 if local else f.bytes
    except VerificationFailed as exc:
        problem = (exc.reason, exc.detail)
        held.clear()
    problems = comm.all_gather(problem)
    first = next((p for p in problems if p is not None), None)
    if first is not None:
        raise VerificationFailed(*first)
    assert manifest is not None
    _held[candidate.url] = held
    return manifest


def _verifier(index: int, name: str, world_size: int) -> int:
    """The rank that checks file ``index``: a shard's writer rank mod W, else index mod W."""
    head = name.split("_")
    if name.startswith("__") and len(head) > 3 and head[2].isdigit():
        return int(head[2]) % world_size
    return index % world_size


def _verify_manifest(candidate: Candidate, run_id: str,
                     dataset_id: str | None) -> CheckpointManifest:
    try:
        data = storage.read_bytes(candidate.manifest_url)
    except OSError as exc:  # an unreadable tier root: another tier may hold a copy
        raise VerificationFailed("manifest_missing", f"{candidate.manifest_url}: {exc}") from exc
    if data is None:
        raise VerificationFailed("manifest_missing", f"{candidate.manifest_url} does not exist")
    actual = digest(data)
    if actual != candidate.manifest_digest:
        raise VerificationFailed("manifest_digest", f"{candidate.manifest_url} hashes to"
                                 f" {actual}, the log committed {candidate.manifest_digest}")
    manifest = parse(data, candidate.manifest_url)
    if manifest.run_id != run_id:
        raise VerificationFailed("wrong_run", f"{candidate.manifest_url} belongs to run"
                                 f" {manifest.run_id}, not {run_id}")
    if dataset_id is not None and manifest.dataset_id not in (None, dataset_id):
        raise VerificationFailed("wrong_dataset", f"{candidate.manifest_url} was taken on"
                                 f" dataset {manifest.dataset_id}, this run reads {dataset_id}")
    if manifest.step != candidate.step:
        raise VerificationFailed("manifest_invalid", f"{candidate.manifest_url} says step"
                                 f" {manifest.step}, the log committed step {candidate.step}")
    return manifest


def _verify_file(url: str, name: str, size: int, crc: int, *,
                 hold: bool = False) -> torch.Tensor | None:
    """Checks one file; its bytes (read once, checksummed) when ``hold``."""
    where = f"{url}/{name}"
    actual_size = storage.size_of(where)
    if actual_size is None:
        raise VerificationFailed("shard_missing", f"{where} does not exist")
    if actual_size != size:
        raise VerificationFailed("shard_size", f"{where} has {actual_size} bytes, the manifest"
                                 f" says {size}")
    try:
        read, actual_crc, buf = verified.read_checked(where, size, hold)
    except Exception as exc:
        raise VerificationFailed("shard_missing", f"{where}: {exc}") from exc
    if read != size:  # changed between the size check and the read
        raise VerificationFailed("shard_size", f"{where} read as {read} bytes, the manifest"
                                 f" says {size}")
    if actual_crc != crc:
        raise VerificationFailed("shard_checksum", f"{where} has CRC32C {actual_crc:#010x}, the"
                                 f" manifest says {crc:#010x}")
    return buf


def load(candidate: Candidate, state: dict[str, Any], comm: Comm) -> None:
    """DCP load in place (collective); ``state`` holds only keys the checkpoint has.

    Shards this process verified last are loaded from the bytes it checked."""
    held = _held.pop(candidate.url, None)
    reader = storage.dcp_reader(candidate.url) if not held else \
        verified.reader(candidate.url, held)
    try:
        dcp_load(state, storage_reader=reader, process_group=comm.group,
                 no_dist=not comm.distributed)
    finally:
        # The buffers and mappings are as large as the shards: never keep them past a
        # load. The reader's class is in a reference cycle, so empty the dict it holds
        # rather than wait for the cyclic collector (a live mapping pins the page cache).
        if held:
            held.clear()
        _held.clear()


def choose(candidates: Sequence[Candidate], comm: Comm, *, run_id: str,
           dataset_id: str | None,
           on_rejected: Callable[[Candidate, VerificationFailed], None],
           ) -> tuple[Candidate, CheckpointManifest, int]:
    """The first candidate that verifies, its manifest, and how many before it failed.

    With storage tiers a candidate is one copy (``worker.tiers.attempts``), and a
    failure's detail names the tier it was on."""
    for n, candidate in enumerate(candidates):
        try:
            return candidate, verify(candidate, comm, run_id=run_id, dataset_id=dataset_id), n
        except VerificationFailed as exc:
            if candidate.tier:
                exc = VerificationFailed(exc.reason, f"tier {candidate.tier}: {exc.detail}")
            on_rejected(candidate, exc)
    raise NoUsableCheckpoint(
        f"none of the {len(candidates)} committed checkpoint copies in the rollback window"
        " verifies; refusing to start from scratch over committed progress")
