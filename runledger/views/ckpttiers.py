"""A run's checkpoints per storage tier, from the log: what ``runledger checkpoint list``
shows and what ``runledger checkpoint gc`` collects on each tier (pure; the command
reads the log and storage).

The tiers come from the run's spec (``RunSubmitted.spec_json``, as the controller
copied it to ``runledger.runs``): the first tier holds a checkpoint once the log
commits it (``ManifestCommitted``), every later tier once a ``CheckpointReplicated``
with the same manifest digest says a verified copy is there.

GC keeps, on the first tier, every committed checkpoint that some later tier has no
verified copy of yet: the coordinator copies from the first tier, and the operator's
command cannot see the copier's queue, only the log. The workers' own GC pins the
same checkpoints from the queue (``worker.tiers``).

Tested in tests/runledger/views/test_ckpttiers.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controller.errors import SpecError
from controller.runplan import checkpoint_env
from controller.spec.runspec import parse_spec_json
from events.model import (
    CheckpointReplicated,
    CheckpointRevoked,
    Event,
    ManifestCommitted,
    RunSubmitted,
)
from events.workerenv import ROOT_TIER, CheckpointEnv, TierEnv
from runledger.errors import RunledgerError
from worker.gc import Retention, Slot


def spec_checkpoint(facts: Sequence[Event]) -> CheckpointEnv | None:
    """The run's checkpoint settings from its last submitted spec; None when the log has
    no spec for it or the spec no longer parses (a log older than this code)."""
    spec_json = next((e.spec_json for e in reversed(facts) if isinstance(e, RunSubmitted)), None)
    if spec_json is None:
        return None
    try:
        return checkpoint_env(parse_spec_json(spec_json))
    except SpecError:
        return None


def copies(facts: Sequence[Event], tiers: Sequence[TierEnv]) -> list[dict[str, Any]]:
    """One row per committed checkpoint, oldest first: where each tier holds a verified
    copy (``tiers``: the first from the commit, the others from their replication facts,
    in tier order)."""
    first = tiers[0] if tiers else None
    order = {t.name: i for i, t in enumerate(tiers)}
    revoked = {e.manifest_digest: e.reason for e in facts if isinstance(e, CheckpointRevoked)}
    replicated: dict[str, dict[str, CheckpointReplicated]] = {}
    for e in facts:
        if isinstance(e, CheckpointReplicated):
            replicated.setdefault(e.manifest_digest, {})[e.tier] = e  # a retry says the same
    rows = []
    for e in facts:
        if not isinstance(e, ManifestCommitted):
            continue
        held: list[dict[str, Any]] = [{"tier": first.name if first else ROOT_TIER,
                                       "manifest": e.manifest_path,
                                       "protects": first.protects if first else None,
                                       "lag_ms": None}]
        later = sorted(replicated.get(e.manifest_digest, {}).values(),
                       key=lambda r: order.get(r.tier, len(order)))
        held += [{"tier": r.tier, "manifest": r.manifest_path, "protects": r.protects,
                  "lag_ms": r.lag_ms} for r in later]
        rows.append({"generation": e.generation, "step": e.step, "manifest": e.manifest_path,
                     "digest": e.manifest_digest, "revoked": revoked.get(e.manifest_digest),
                     "tiers": held})
    return rows


@dataclass(frozen=True, slots=True)
class TierGc:
    """One tier's GC pass: where, with which retention, and what it must leave."""

    tier: TierEnv
    keep: Retention
    pinned: frozenset[Slot] = frozenset()


def unreplicated(facts: Sequence[Event], later: Sequence[TierEnv]) -> frozenset[Slot]:
    """Committed checkpoints some tier of ``later`` holds no verified copy of."""
    names = {t.name for t in later}
    have: dict[str, set[str]] = {}
    for e in facts:
        if isinstance(e, CheckpointReplicated):
            have.setdefault(e.manifest_digest, set()).add(e.tier)
    return frozenset((e.generation, e.step) for e in facts if isinstance(e, ManifestCommitted)
                     and not names <= have.get(e.manifest_digest, set()))


def gc_plan(facts: Sequence[Event], ckpt: CheckpointEnv | None, *, only: str | None,
            keep_last: int | None, keep_every: int | None, limit: int) -> list[TierGc]:
    """Each tier's pass, nearest first; ``keep_last``/``keep_every`` given on the command
    line replace the spec's (and each tier's own ``keep_last``)."""
    if ckpt is None:
        raise RunledgerError("the run's spec is not on the log or no longer parses, so its"
                             " storage tiers are unknown: give the tier's root with --root")
    tiers = ckpt.storage_tiers()
    if not tiers:
        raise RunledgerError("the run's spec names no checkpoint root (its workers used"
                             " $RUNLEDGER_CHECKPOINT_ROOT): give that root with --root")
    if only is not None and only not in {t.name for t in tiers}:
        raise RunledgerError(f"--tier {only}: the run has no such tier; its tiers are"
                             f" {', '.join(t.name for t in tiers)}")
    every = keep_every if keep_every is not None else ckpt.keep_every
    first_pins = unreplicated(facts, tiers[1:])
    return [TierGc(t, Retention(keep_last or t.keep_last or ckpt.keep_last, every, limit),
                   first_pins if i == 0 else frozenset())
            for i, t in enumerate(tiers) if only is None or t.name == only]
