"""What ``runledger preflight`` observes: the I/O under :mod:`runledger.rehearse.preflight`'s rules.

Each function observes one thing and returns what it saw, errors included, as
the planner's frozen records; none judges. Storage is probed through fsspec
(write a probe object, stat it, read it back, delete it), the dataset through
the catalog and each object's store, the broker through its metadata.

Tested in tests/runledger/rehearse/test_preflight.py and tests/runledger/commands/test_preflight.py.
"""

from __future__ import annotations

import os
import platform
import time
import uuid
from collections.abc import Iterable

import fsspec
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from controller.inventory import EMPTY, NODE_RECORDS, observe
from controller.run_decide import NODE_TIMEOUT_MS
from controller.runplan import checkpoint_env
from controller.spec.runspec import RunSpec
from dataplane.catalog import Catalog
from dataplane.errors import DataPlaneError
from dataplane.shards import file_digest
from events.kafka.connection import client_config
from events.model import AgentRegistered, Event
from runledger.rehearse.preflight import DataSeen, NodeSeen, ObjectSeen, StorageSeen, sample


def nodes_seen(events: Iterable[Event], now_ms: int) -> tuple[NodeSeen, ...]:
    """Live, placeable nodes and their free slots, as the controller's inventory has them,
    with the versions each agent's newest registration reported."""
    inv = EMPTY
    versions: dict[str, tuple[str, str]] = {}
    for event in events:
        if isinstance(event, NODE_RECORDS):
            inv = observe(inv, event)
        if isinstance(event, AgentRegistered):
            versions[event.node] = (event.python_version, event.torch_version)
    return tuple(NodeSeen(n.name, max(n.slots - n.busy_slots, 0), n.domain,
                          *versions.get(n.name, ("", "")))
                 for n in inv.live(now_ms, NODE_TIMEOUT_MS))


def checkpoint_roots(spec: RunSpec) -> list[str]:
    """Every checkpoint root (each tier's, else the one root), a relative one made absolute
    against the workers' directory as the workers would resolve it."""
    env = checkpoint_env(spec)
    roots = [t.root for t in env.tiers] or ([env.root] if env.root else [])
    base = spec.workdir or os.getcwd()
    return [r if "://" in r or os.path.isabs(r) else os.path.join(base, r) for r in roots]


def probe_storage(root: str, size: int) -> StorageSeen:
    """Write ``size`` bytes under ``root``, stat, read back and delete them; or the error."""
    data = uuid.uuid4().bytes * (size // 16 + 1)
    data = data[:size]
    try:
        fs, base = fsspec.core.url_to_fs(root)
        folder = f"{base.rstrip('/')}/.preflight"
        path = f"{folder}/{uuid.uuid4().hex}.probe"
        fs.makedirs(folder, exist_ok=True)
        t0 = time.perf_counter()
        fs.pipe_file(path, data)
        t1 = time.perf_counter()
        fs.info(path)
        t2 = time.perf_counter()
        back = fs.cat_file(path)
        t3 = time.perf_counter()
        fs.rm_file(path)
    # Any store's error (fsspec backends raise their own kinds) is the finding, named in the row.
    except Exception as exc:
        return StorageSeen(root, error=f"{type(exc).__name__}: {exc}")
    if back != data:
        return StorageSeen(root, error=f"read back {len(back)} bytes that differ from the"
                                       f" {size} written")
    return StorageSeen(root, size=size, write_s=t1 - t0, read_s=t3 - t2, latency_s=t2 - t1)


def probe_data(catalog: Catalog, dataset: str, digests: int) -> DataSeen:
    """Every object of the manifest stat'ed; ``digests`` of them, spread evenly, hashed."""
    try:
        manifest = catalog.get(catalog.resolve(dataset))
    except DataPlaneError as exc:
        return DataSeen(dataset, error=str(exc))
    entries = [o for s in manifest.sources for o in s.objects]
    sampled = set(sample(len(entries), digests))
    seen = []
    for i, entry in enumerate(entries):
        url = manifest.url(entry)
        try:
            fs, path = fsspec.core.url_to_fs(url)
            found = int(fs.size(path))
            ok = file_digest(fs, path) == entry.digest if i in sampled else None
            seen.append(ObjectSeen(url, entry.bytes, found, digest_ok=ok))
        # A missing or unreadable object, whatever its store raises, is the finding.
        except Exception as exc:
            seen.append(ObjectSeen(url, entry.bytes, None, error=f"{type(exc).__name__}: {exc}"))
    return DataSeen(dataset, None, tuple(seen))


def missing_topics(bootstrap: str, topics: Iterable[str], timeout_s: float = 15.0
                   ) -> tuple[str, ...]:
    """Which of ``topics`` the broker's metadata does not show this principal."""
    admin = AdminClient(client_config(bootstrap, {"log_level": 0}))
    try:
        known = set(admin.list_topics(timeout=timeout_s).topics)
    except KafkaException:
        known = set()
    return tuple(t for t in topics if t not in known)


def python_version() -> str:
    return platform.python_version()


def torch_version() -> str | None:
    """This client's torch, without importing it (a CLI start stays fast)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def cuda_devices() -> int:
    """CUDA devices visible here; 0 without torch or CUDA."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
