"""Storage tiers on the worker: background replication, restore order, GC per tier.

The checkpoint stall is paid to the first tier only (``worker.commit``). Once
the log commits a checkpoint, the coordinator's :class:`Replicator` copies its
files from the first tier to every other tier, in tier order, on a thread of
its own: each file is streamed, then read back from the tier and checked
against the manifest's byte count and CRC32C; the manifest is copied last and
its SHA-256 checked against the digest the log committed. Only then is the
copy reported (``CheckpointReplicated``, with the durability lag from the
commit verdict to the verified copy), so a checkpoint counts as recoverable
from a failure domain only once a tier that survives it holds a verified copy.

Restore (:func:`attempts`) tries, newest checkpoint first, the tiers that
survive the failure that happened, nearest first: after a host loss the
first tier is never read when it protects only ``process``. A tier that does
not hold a good copy is a verification failure there, and restore falls back
to the next tier, then to the next older checkpoint. A missing or unreadable
tier root is a :class:`~worker.errors.StorageFault` naming the tier when
replicating (the copy cannot be made) and a ``manifest_missing`` verification
failure naming the tier when restoring (another tier may still hold it).

Limitation: the coordinator copies every file, so every rank's files must be
readable from the coordinator's first tier (shared storage, or one node).

Tested in tests/worker/test_tiers.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import fsspec

from events.kafka.consume import read_log
from events.model import CheckpointReplicated, Event, Header
from events.topics import RUNS
from events.workerenv import TierEnv
from worker import storage
from worker.commit import Written
from worker.errors import StorageFault, VerificationFailed
from worker.gc import Retention, Slot, collect, history
from worker.jobs import JobLoop
from worker.layout import CheckpointDir
from worker.manifest import digest
from worker.restore import Candidate

_BLOCK = 8 << 20


# --- pure: which copies a restore tries, in which order -------------------------------


def survivors(tiers: Sequence[TierEnv], failure: str) -> tuple[TierEnv, ...]:
    """The tiers whose copies outlive a loss of ``failure``, nearest first."""
    return tuple(t for t in tiers if t.survives(failure))


def rebase(url: str, src_root: str, dst_root: str) -> str | None:
    """``url`` under ``src_root`` moved to ``dst_root``; None when it is not under it."""
    src = src_root.rstrip("/") + "/"
    if not url.startswith(src):
        return None
    return dst_root.rstrip("/") + "/" + url[len(src):]


def attempts(candidates: Sequence[Candidate], tiers: Sequence[TierEnv],
             failure: str) -> list[Candidate]:
    """What restore tries, in order: each committed checkpoint (newest first) on each
    tier that survives ``failure`` (nearest first).

    The log commits the first tier's path; copies elsewhere sit at the same place
    under their own root. A candidate whose path is not under the first tier's
    root (written before a change of tiers) is tried only as it was committed.
    """
    if not tiers:
        return list(candidates)
    alive = survivors(tiers, failure)
    out: list[Candidate] = []
    for c in candidates:
        for t in alive:
            url = rebase(c.manifest_url, tiers[0].root, t.root)
            if url is not None:
                out.append(replace(c, manifest_url=url, tier=t.name))
        if rebase(c.manifest_url, tiers[0].root, tiers[0].root) is None:
            out.append(c)
    return out


class Refusals:
    """Refused copies, per step. A checkpoint is refused as a whole (reported, and so
    revoked by the controller) only when its last surviving copy is: a bad copy on one
    tier must not revoke a checkpoint another tier still holds."""

    def __init__(self, order: Sequence[Candidate]) -> None:
        self._left = Counter(c.step for c in order)
        self._details: dict[int, list[str]] = {}

    def add(self, c: Candidate, exc: VerificationFailed) -> VerificationFailed | None:
        """The whole checkpoint's refusal (every copy's detail) once ``c`` was its last."""
        self._left[c.step] -= 1
        details = self._details.setdefault(c.step, [])
        details.append(exc.detail)
        return None if self._left[c.step] > 0 else VerificationFailed(exc.reason,
                                                                      "; ".join(details))


# --- I/O: one verified copy -------------------------------------------------------------


def check_root(tier: TierEnv) -> None:
    """A StorageFault naming the tier unless its root exists and can be listed."""
    def run() -> None:
        fs, path = fsspec.core.url_to_fs(tier.root)
        if not fs.isdir(path):
            raise StorageFault(f"reaching tier {tier.name}",
                               f"tier root {tier.root} does not exist or is not a directory")
        fs.ls(path, detail=False)
    storage.guarded(f"reaching tier {tier.name}", tier.root, run)


def copy_verified(written: Written, tier: TierEnv) -> tuple[str, int]:
    """Copy one committed checkpoint to ``tier`` and verify it there; its manifest URL
    and byte count. Files first, the manifest last, as on the first tier."""
    check_root(tier)
    src = written.ckdir
    dst = CheckpointDir(tier.root, src.run_id, src.generation, src.step)
    stage = f"replicating step {src.step} to tier {tier.name}"
    for f in written.manifest.files:
        _copy(src.file(f.path), dst.file(f.path), stage)
        size, crc = storage.checksum(dst.file(f.path))
        if (size, crc) != (f.bytes, f.crc32c):
            raise StorageFault(stage, f"{dst.file(f.path)} reads back {size} bytes with CRC32C"
                               f" {crc:#010x}, the manifest says {f.bytes} and {f.crc32c:#010x}")
    data = storage.read_bytes(src.manifest_url)
    if data is None or digest(data) != written.digest:
        raise StorageFault(stage, f"{src.manifest_url} is gone or no longer hashes to"
                           f" {written.digest}")
    if storage.read_bytes(dst.manifest_url) != data:  # a retried copy finds its own manifest
        storage.write_once(dst.manifest_url, data)
    back = storage.read_bytes(dst.manifest_url)
    if back is None or digest(back) != written.digest:
        raise StorageFault(stage, f"{dst.manifest_url} does not read back as {written.digest}")
    return dst.manifest_url, written.manifest.total_bytes


def _copy(src: str, dst: str, stage: str) -> None:
    def run() -> None:
        sfs, spath = fsspec.core.url_to_fs(src)
        dfs, dpath = fsspec.core.url_to_fs(dst)
        dfs.makedirs(dpath.rsplit("/", 1)[0], exist_ok=True)
        with sfs.open(spath, "rb") as fin, dfs.open(dpath, "wb") as fout:
            while chunk := fin.read(_BLOCK):
                fout.write(chunk)
    storage.guarded(stage, dst, run)


# --- the background copier ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Identity:
    """Who reports the copies: the coordinator's logical id and its header factory."""

    logical_id: str
    header: Callable[[str], Header]


class Replicator:
    """One thread copying committed checkpoints to the later tiers, in commit order
    (a :class:`~worker.jobs.JobLoop`, at the lowest CPU priority).

    A failure is kept and raised on the training thread at its next :meth:`check`
    (a tier that cannot be written is a storage fault, not a silent gap in RPO).
    """

    def __init__(self, tiers: Sequence[TierEnv], who: Identity,
                 report: Callable[[CheckpointReplicated], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.tiers = tuple(tiers)
        self._who = who
        self._report = report
        self._clock = clock
        # (what to copy, when the log committed it on this clock)
        self._jobs: JobLoop[tuple[Written, float]] = JobLoop(
            "rl-replicate", self._copy_all, on_start=_lowest_priority, clock=clock)

    def submit(self, written: Written, committed_at: float) -> None:
        """Copy ``written`` (committed at ``committed_at`` on this clock) everywhere."""
        self._jobs.submit((written, committed_at))

    def pinned(self) -> frozenset[Slot]:
        """Checkpoints still to copy: GC of the first tier must leave them."""
        return frozenset((w.ckdir.generation, w.ckdir.step) for w, _ in self._jobs.items())

    def check(self) -> None:
        self._jobs.check()

    def drain(self, timeout_s: float = 600.0) -> None:
        self._jobs.drain(timeout_s)

    def close(self) -> None:
        self._jobs.close()

    def _copy_all(self, job: tuple[Written, float]) -> None:
        written, committed_at = job
        for tier in self.tiers:
            self._one(written, committed_at, tier)

    def _one(self, written: Written, committed_at: float, tier: TierEnv) -> None:
        url, size = copy_verified(written, tier)
        step = written.ckdir.step
        self._report(CheckpointReplicated(
            header=self._who.header(f"ckpt/{step}/replicated/{tier.name}"), step=step,
            manifest_digest=written.digest, manifest_path=url,
            logical_id=self._who.logical_id, tier=tier.name, protects=tier.protects,
            lag_ms=(self._clock() - committed_at) * 1000.0, bytes=size))


def _lowest_priority() -> None:
    """Run the calling thread at the lowest CPU priority (Linux nice 19 per thread).

    A copy must not slow the training step it runs beside: on a host whose cores
    the step keeps busy it then takes only the cycles the step leaves. Its lag
    is the measure of whether that is enough (``bench/replication.py``)."""
    # Not Linux, or not permitted: the copy runs at normal priority.
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


# --- GC, per tier ---------------------------------------------------------------------------


def collect_tiers(tiers: Iterable[TierEnv], run_id: str, facts: Iterable[Event], keep_last: int,
                  keep_every: int | None, pinned: frozenset[Slot] = frozenset()) -> None:
    """One bounded GC pass on every tier, each with its own ``keep_last``; ``pinned``
    holds on the first tier only (copies are made from there)."""
    hist = history(facts)
    for i, tier in enumerate(tiers):
        collect(tier.root, run_id, hist, Retention(tier.keep_last or keep_last, keep_every),
                pinned=pinned if i == 0 else frozenset())


def gc_thread(bootstrap: str, run_id: str, tiers: Sequence[TierEnv], keep_last: int,
              keep_every: int | None, pinned: frozenset[Slot]) -> threading.Thread:
    """A started background GC pass; a failed pass is retried after the next commit,
    so its errors are printed, not raised."""
    def run() -> None:
        try:
            facts = [r.event for r in read_log(bootstrap, RUNS) if r.event.run_id == run_id]
            collect_tiers(tiers, run_id, facts, keep_last, keep_every, pinned)
        except Exception as exc:  # best effort by design: see the docstring
            print(f"runledger worker: checkpoint gc pass failed: {exc}", file=sys.stderr)

    thread = threading.Thread(target=run, name="rl-gc", daemon=True)
    thread.start()
    return thread
