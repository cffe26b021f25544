"""Run state: the value the fold produces. Immutable; every change is a copy (``copy_with``
is the fast one for the hottest events).

What grows with the world size is kept so that one report costs the same at 10
ranks and at 100,000: the members' heartbeats and exits are :class:`~events.shelf.Shelf`
maps (a change copies a bucket, not the map), and ``placed`` indexes the
members by logical id (the node of each), rebuilt only when the members change.

Tested in tests/events/test_fold.py, tests/events/test_fold_properties.py and
tests/events/test_fold_sdc.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from events.model import Member
from events.shelf import Shelf


class Status(StrEnum):
    SUBMITTED = "Submitted"
    QUEUED = "Queued"
    ADMITTED = "Admitted"
    STARTING = "Starting"
    RUNNING = "Running"
    RECOVERING = "Recovering"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def active(self) -> bool:
        """A generation is live: its workers may report and propose."""
        return self in ACTIVE


TERMINAL = frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELLED})
ACTIVE = frozenset({Status.STARTING, Status.RUNNING, Status.RECOVERING})


CHECKPOINT_HISTORY = 64


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The newest accepted manifest: "latest" comes only from the log."""

    step: int
    manifest_path: str
    manifest_digest: str
    generation: int
    committed_at: int


@dataclass(frozen=True, slots=True)
class Cursor:
    step: int
    dataset_id: str
    epoch: int
    position: int
    source_counts: dict[str, int]
    generation: int


@dataclass(frozen=True, slots=True)
class Suspicion:
    """The open silent-data-corruption suspicion (``events.fold_sdc``): the state at
    ``step`` of ``generation`` is distrusted until a replay classifies it."""

    step: int
    generation: int
    detector: str
    ranks: tuple[int, ...]  # the deviating ranks; empty: every rank
    fingerprints: tuple[str, ...]  # what each rank held at step, rank order
    nodes: tuple[str, ...]  # where each rank ran, rank order
    part: str
    consumed: tuple[str, ...] = ()  # what each rank consumed at step; () when unknown


@dataclass(frozen=True, slots=True)
class RunState:
    run_id: str
    status: Status
    spec_digest: str
    principal: str
    world_size: int
    dataset_id: str | None
    submitted_at: int
    updated_at: int
    generation: int = 0
    members: tuple[Member, ...] = ()
    queue_reason: str = ""
    # Progress of the current generation; a restart resumes from its checkpoint.
    step: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    checkpoint: Checkpoint | None = None
    # Committed checkpoints, oldest first, the newest CHECKPOINT_HISTORY of them:
    # a restore falls back along this list when the latest fails verification.
    checkpoints: tuple[Checkpoint, ...] = ()
    checkpoint_interval_steps: int | None = None
    cursor: Cursor | None = None
    # Last heartbeat time (ms) per logical id, current generation only.
    heartbeats: Mapping[str, int] = field(default_factory=Shelf)
    exits: Mapping[str, int | None] = field(default_factory=Shelf)
    # Failure counts by signature: the policy's escalation input, kept in the log.
    failures: dict[str, int] = field(default_factory=dict)
    failure_count: int = 0
    # The policy's backoff: no new generation before this time (ms), from the log.
    retry_not_before: int = 0
    # A restart was decided and the next generation has not started yet.
    awaiting_generation: bool = False
    generation_started_at: int = 0
    # Time of the newest accepted progress (StepCommitted), or of the generation start.
    last_progress_at: int = 0
    rejections: int = 0
    alerts: int = 0
    # Open alerts: dedup key (alert/subject) -> the AlertRaised event id.
    open_alerts: dict[str, str] = field(default_factory=dict)
    cancel_requested: bool = False
    # An alert's pause action holds the run queued until an operator resumes it.
    paused: bool = False
    outcome_reason: str = ""
    # No checkpoint at or after its step commits while it is open (events.fold_sdc).
    suspicion: Suspicion | None = None
    # Derived: each member's node by logical id, for ``members`` as they are (the fold
    # asks it of every report). Never given; rebuilt by __post_init__ when stale.
    placed: Placed | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # A dict given for a per-member map (a test, a hand-built state) becomes a shelf,
        # so the fold's one-key changes stay cheap whatever built the state.
        for name in ("heartbeats", "exits"):
            value = getattr(self, name)
            if not isinstance(value, Shelf):
                object.__setattr__(self, name, Shelf.of(value))
        if self.placed is None or self.placed.members is not self.members:
            object.__setattr__(self, "placed", Placed.of(self.members))

    def node_of(self, logical_id: str) -> str | None:
        """The node member ``logical_id`` of the current members is placed on; None if none."""
        assert self.placed is not None  # set by __post_init__
        return self.placed.nodes.get(logical_id)


@dataclass(frozen=True, slots=True)
class Placed:
    """The node of each member, by logical id, for one ``members`` tuple (by identity)."""

    members: tuple[Member, ...]
    nodes: Mapping[str, str]

    @classmethod
    def of(cls, members: tuple[Member, ...]) -> Placed:
        return cls(members, {m.logical_id: m.node for m in members})


_FIELDS = tuple(f.name for f in fields(RunState))


def copy_with(state: RunState, **changes: Any) -> RunState:
    """``dataclasses.replace`` for the two events that are most of every log.

    Heartbeats and steps are ~95% of a real log; the generic ``replace`` costs
    several times this field-by-field copy (bench/controller.py). It skips
    ``__post_init__``, so it never changes the members (their index would go stale).
    """
    assert "members" not in changes and "placed" not in changes, "use dataclasses.replace"
    new = object.__new__(RunState)
    for name in _FIELDS:
        object.__setattr__(new, name, changes[name] if name in changes else getattr(state, name))
    return new
