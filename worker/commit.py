"""Writing one checkpoint: shards first, checks, the manifest last (docs/architecture.md §9).

Every rank writes its part with torch.distributed.checkpoint into the
directory that names run, generation and step, checksumming each file as it
is written (``worker.crcwrite``: a byte count and CRC32C, each reported as
``ShardWritten`` by the caller's ``on_shard``), and the coordinator then checks coverage: the DCP
metadata on storage is the one the save planned, every storage reference
resolves to a reported file long enough to hold it, and every model key is
present. Only then is ``manifest.json`` written, once. Proposing it and
waiting for the controller's verdict is the session's business: until the log
commits it, the directory is staging residue that restore never reads.

With :data:`READBACK` on, every shard is also read back from the store and its
checksum compared with the one taken while writing (a store that lost or
changed bytes is then a StorageFault at commit, not a rejection at restore).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from worker import storage
from worker.comm import Comm
from worker.crcwrite import Sum, checksummed
from worker.errors import StorageFault
from worker.faults import Faults
from worker.layout import DCP_METADATA, MANIFEST, CheckpointDir
from worker.manifest import CheckpointManifest, FileEntry, digest

# Off: the write-path CRC is what the manifest records; reading every shard back
# doubled the bytes a commit moves for a check restore makes anyway (it verifies
# every CRC before loading). A module constant, not a spec setting: nothing in a
# run's behaviour depends on it, only how early a lossy store is caught.
READBACK = False


@dataclass(frozen=True, slots=True)
class Written:
    """What the coordinator wrote; every rank gets the same (broadcast)."""

    ckdir: CheckpointDir
    manifest: CheckpointManifest
    digest: str

    @property
    def manifest_url(self) -> str:
        return self.ckdir.manifest_url


@dataclass(frozen=True, slots=True)
class ManifestFields:
    """The manifest content that is not about files: provenance and progress."""

    dataset_id: str | None
    data: dict[str, Any] | None
    counters: dict[str, int]
    code_version: str
    parent_digest: str | None


def write_checkpoint(ckdir: CheckpointDir, state: dict[str, Any], comm: Comm, *,
                     required_keys: Iterable[str], fields: ManifestFields, faults: Faults,
                     on_shard: Callable[[FileEntry], None],
                     readback: bool | None = None) -> Written:
    """Collective over ``comm``: write, check, and (coordinator) write the manifest.

    ``readback`` (default :data:`READBACK`) also reads every shard back and compares."""
    step = ckdir.step
    faults.slow_storage()
    writer = _writer(ckdir.url, faults, step)
    sums = checksummed(writer).sums
    try:
        planned = dcp_save(state, storage_writer=writer, process_group=comm.group,
                           no_dist=not comm.distributed)
    except StorageFault:
        raise
    # DCP wraps storage errors in CheckpointException, a BaseException subclass.
    except (Exception, CheckpointException) as exc:
        raise StorageFault("writing shards", f"{ckdir.url}: {exc}") from exc
    check = READBACK if readback is None else readback
    mine = []
    for name in sorted(n for n in sums if n.endswith(".distcp")):
        if check:
            _read_back(ckdir, name, sums[name])
        entry = FileEntry(path=name, bytes=sums[name].bytes, crc32c=sums[name].crc32c,
                          rank=comm.rank)
        mine.append(entry)
        on_shard(entry)
    gathered = [e for part in comm.all_gather(mine) for e in part]
    written: Written | None = None
    fault: tuple[str, str] | None = None
    if comm.rank == 0:
        try:
            written = _coordinate(ckdir, planned, gathered, set(required_keys), fields,
                                  comm.world_size, faults)
        except StorageFault as exc:
            fault = (exc.stage, exc.detail)
        except Exception as exc:  # never leave the other ranks waiting in the broadcast
            fault = ("writing the manifest", f"{ckdir.url}: {type(exc).__name__}: {exc}")
    written, fault = comm.broadcast((written, fault))
    if fault is not None:
        raise StorageFault(*fault)
    assert written is not None
    return written


def _read_back(ckdir: CheckpointDir, name: str, written: Sum) -> None:
    size, crc = storage.checksum(ckdir.file(name))
    if (size, crc) != (written.bytes, written.crc32c):
        raise StorageFault("reading shards back", f"{ckdir.file(name)} reads back as {size}"
                           f" bytes, CRC32C {crc:#010x}; {written.bytes} bytes, CRC32C"
                           f" {written.crc32c:#010x} were written; check the store")


def _coordinate(ckdir: CheckpointDir, planned: Any, files: list[FileEntry], required: set[str],
                fields: ManifestFields, world_size: int, faults: Faults) -> Written:
    meta_size, meta_crc = storage.checksum(ckdir.file(DCP_METADATA))
    entries = sorted(files, key=lambda e: e.path)
    entries.append(FileEntry(path=DCP_METADATA, bytes=meta_size, crc32c=meta_crc, rank=-1))
    keys = _check_coverage(ckdir, planned, {e.path: e.bytes for e in entries}, required)
    faults.hit("after_shards", ckdir.step)
    manifest = CheckpointManifest(
        run_id=ckdir.run_id, generation=ckdir.generation, step=ckdir.step,
        world_size=world_size, files=tuple(entries), keys=tuple(sorted(keys)),
        dataset_id=fields.dataset_id, data=fields.data, counters=dict(fields.counters),
        code_version=fields.code_version, parent_digest=fields.parent_digest)
    data = manifest.to_json()
    storage.write_once(ckdir.manifest_url, data)
    return Written(ckdir=ckdir, manifest=manifest, digest=digest(data))


def _check_coverage(ckdir: CheckpointDir, planned: Any, sizes: dict[str, int],
                    required: set[str]) -> set[str]:
    """The keys stored; a StorageFault naming the first gap otherwise."""
    url = ckdir.url
    try:
        stored = storage.dcp_reader(url).read_metadata()
    except Exception as exc:
        raise StorageFault("checking coverage", f"{url}: cannot read DCP metadata: {exc}") \
            from exc
    keys = set(stored.state_dict_metadata)
    if planned is not None and set(planned.state_dict_metadata) != keys:
        missing = sorted(set(planned.state_dict_metadata) - keys)[:5]
        raise StorageFault("checking coverage", f"{url}: the stored metadata lacks planned"
                           f" keys {missing}")
    absent = sorted(required - keys)
    if absent:
        raise StorageFault("checking coverage", f"{url}: required keys are not stored:"
                           f" {absent[:5]}")
    for index, info in (stored.storage_data or {}).items():
        size = sizes.get(info.relative_path)
        if size is None:
            raise StorageFault("checking coverage", f"{url}: {index.fqn} is stored in"
                               f" {info.relative_path}, which no rank reported")
        if info.offset + info.length > size:
            raise StorageFault("checking coverage", f"{url}: {index.fqn} needs bytes up to"
                               f" {info.offset + info.length} of {info.relative_path}, which"
                               f" has {size}")
    return keys


def _writer(url: str, faults: Faults, step: int) -> Any:
    if storage.is_local(url) and faults.armed("mid_shard", step):
        return _HalfWriter(storage.local_path(url), faults, step, f"__{faults.rank}_")
    return storage.dcp_writer(url)


class _HalfWriter(FileSystemWriter):
    """Writes this rank's shard, cuts it in half, and dies: a crash mid-shard."""

    def __init__(self, path: str, faults: Faults, step: int, prefix: str) -> None:
        super().__init__(path, sync_files=True, overwrite=False)
        self._faults = faults
        self._step = step
        self._dir = path
        self._prefix = prefix  # only this rank's own shard files

    def write_data(self, plan: Any, planner: Any) -> Any:
        future = super().write_data(plan, planner)
        future.wait()
        import os
        for name in os.listdir(self._dir):
            if name.startswith(self._prefix) and name.endswith(".distcp"):
                full = os.path.join(self._dir, name)
                with open(full, "r+b") as f:
                    f.truncate(os.path.getsize(full) // 2)
        self._faults.hit("mid_shard", self._step)
        return future


__all__ = ["MANIFEST", "ManifestFields", "Written", "write_checkpoint"]
