"""Restoring: only committed manifests, verified in full before anything loads.

Candidates come from the log (newest committed first, within the rollback
window). For each, every rank reads the manifest, checks its SHA-256 against
the digest the log committed, checks that it belongs to this run and dataset,
then checksums its share of the files (file ``i`` goes to rank ``i mod W``);
the ranks agree on the first failure, so all of them move to the same older
candidate. Only a candidate that passes is handed to DCP, which reshards
when the world size changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from worker import storage
from worker.comm import Comm
from worker.commit import _reader
from worker.errors import NoUsableCheckpoint, VerificationFailed
from worker.layout import dir_of_manifest
from worker.manifest import CheckpointManifest, digest, parse


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
    try:
        manifest = _verify_manifest(candidate, run_id, dataset_id)
        for i, f in enumerate(manifest.files):
            if i % comm.world_size == comm.rank:
                _verify_file(candidate.url, f.path, f.bytes, f.crc32c)
    except VerificationFailed as exc:
        problem = (exc.reason, exc.detail)
    problems = comm.all_gather(problem)
    first = next((p for p in problems if p is not None), None)
    if first is not None:
        raise VerificationFailed(*first)
    assert manifest is not None
    return manifest


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


def _verify_file(url: str, name: str, size: int, crc: int) -> None:
    where = f"{url}/{name}"
    actual_size = storage.size_of(where)
    if actual_size is None:
        raise VerificationFailed("shard_missing", f"{where} does not exist")
    if actual_size != size:
        raise VerificationFailed("shard_size", f"{where} has {actual_size} bytes, the manifest"
                                 f" says {size}")
    try:
        _, actual_crc = storage.checksum(where)
    except Exception as exc:
        raise VerificationFailed("shard_missing", f"{where}: {exc}") from exc
    if actual_crc != crc:
        raise VerificationFailed("shard_checksum", f"{where} has CRC32C {actual_crc:#010x}, the"
                                 f" manifest says {crc:#010x}")


def load(candidate: Candidate, state: dict[str, Any], comm: Comm) -> None:
    """DCP load in place (collective); ``state`` holds only keys the checkpoint has."""
    dcp_load(state, storage_reader=_reader(candidate.url), process_group=comm.group,
             no_dist=not comm.distributed)


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
