"""Checkpoint garbage collection: bounded, safe to retry, never the latest committed.

What is committed comes from the log (``ManifestCommitted`` less
``CheckpointRevoked``), never from a directory listing. Retention keeps the
newest ``keep_last`` committed checkpoints, every committed step that is a
multiple of ``keep_every``, and always the latest. Everything else under the
run's directory is removable when it can no longer become committed: a
committed checkpoint outside retention, a revoked one, and staging residue of
a generation older than the current one (its writer is fenced). Residue of the
current generation is left alone: its commit may still be on the way. One
pass removes at most ``limit`` directories; removing a missing one is fine, so
a crashed pass is simply run again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from events.model import CheckpointRevoked, Event, GenerationStarted, ManifestCommitted
from worker import storage
from worker.layout import parse_generation, parse_step, run_dir

Slot = tuple[int, int]  # (generation, step)


@dataclass(frozen=True, slots=True)
class Retention:
    keep_last: int = 3
    keep_every: int | None = None
    limit: int = 16

    def __post_init__(self) -> None:
        if self.keep_last < 1:
            raise ValueError("keep_last must be >= 1: the latest committed checkpoint is kept")
        if self.keep_every is not None and self.keep_every < 1:
            raise ValueError("keep_every must be >= 1")
        if self.limit < 1:
            raise ValueError("limit must be >= 1")


@dataclass(frozen=True, slots=True)
class History:
    """What the log says about a run's checkpoints."""

    committed: tuple[Slot, ...]  # in commit order, revoked ones removed
    revoked: frozenset[Slot]
    generation: int


def history(events: Iterable[Event]) -> History:
    """Fold a run's facts (in log order) into its checkpoint history."""
    committed: list[Slot] = []
    by_digest: dict[str, Slot] = {}
    revoked: set[Slot] = set()
    generation = 0
    for e in events:
        match e:
            case GenerationStarted():
                generation = max(generation, e.generation)
            case ManifestCommitted():
                slot = (e.generation, e.step)
                by_digest[e.manifest_digest] = slot
                committed.append(slot)
            case CheckpointRevoked():
                gone = by_digest.get(e.manifest_digest)
                if gone is not None:
                    revoked.add(gone)
                    committed = [c for c in committed if c != gone]
    return History(tuple(committed), frozenset(revoked), generation)


def plan(present: Iterable[Slot], hist: History, keep: Retention,
         pinned: frozenset[Slot] = frozenset()) -> list[Slot]:
    """The directories to remove now, oldest first, at most ``keep.limit``; never a
    ``pinned`` one (a checkpoint still being copied to another tier)."""
    committed = list(hist.committed)
    kept: set[Slot] = set(committed[-keep.keep_last:])
    if keep.keep_every is not None:
        kept |= {c for c in committed if c[1] % keep.keep_every == 0}
    if committed:
        kept.add(committed[-1])
    commit_set = set(committed)
    doomed = []
    for slot in sorted(set(present)):
        if slot in kept or slot in pinned:
            continue
        gen, _ = slot
        if slot in commit_set or slot in hist.revoked or gen < hist.generation:
            doomed.append(slot)
    return doomed[: keep.limit]


def present(root: str, run_id: str) -> list[Slot]:
    """Checkpoint directories found under the run's directory."""
    base = run_dir(root, run_id)
    out = []
    for gname in storage.list_names(base):
        gen = parse_generation(gname)
        if gen is None:
            continue
        for sname in storage.list_names(f"{base}/{gname}"):
            step = parse_step(sname)
            if step is not None:
                out.append((gen, step))
    return out


def collect(root: str, run_id: str, hist: History, keep: Retention,
            dry_run: bool = False, pinned: frozenset[Slot] = frozenset()) -> list[str]:
    """Remove what :func:`plan` picks; the URLs removed (or that would be)."""
    base = run_dir(root, run_id)
    urls = [f"{base}/g{gen:06d}/step-{step:010d}"
            for gen, step in plan(present(root, run_id), hist, keep, pinned)]
    if not dry_run:
        for url in urls:
            storage.remove_tree(url)
    return urls
