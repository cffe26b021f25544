"""The controller's model, and the one path by which a record changes it.

``Model`` is everything the controller knows: per run a :class:`Tracked` (its
folded state, the plan taken from its spec, what the alert rules watch, its
last staged checkpoint, the shard reports not yet committed and the tally of its
post-run manifest), the inventory, failures counted per node, and when this controller started
(missing heartbeats are only counted from then, so a restarted controller does
not fail healthy runs it has not heard from yet).

Runs that can still change are ``live``; a run that ends moves to ``done``, a
:class:`~controller.shelf.Shelf`, so neither an event of a live run nor a tick
costs anything per finished run. ``closing`` names the finished runs whose
alerts are still open: the tick visits them until the alert rules close them.

:meth:`Draft.absorb` is the one update function. The live controller folds
each report it accepts and each record it appends through it, and a restarted
controller rebuilds its model by folding ``runledger.runs`` through it
(:func:`replay`), so the two cannot drift: the models differ only by what
never becomes a fact (heartbeats and the ``updated_at`` they move, step times,
agents' reports).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, field

from controller import checkpoints, exits, policy, rejections, replays
from controller.gates import EMPTY as NO_GATES
from controller.gates import GateBook
from controller.inventory import EMPTY as NO_NODES
from controller.inventory import NODE_RECORDS, Inventory, count_failures, observe
from controller.runplan import RunPlan
from controller.watch import EMPTY as NOTHING_SEEN
from controller.watch import Watch
from controller.watch import observe as observe_run
from events import runmanifest
from events.fold import Verdict, apply
from events.model import (
    CheckpointStaged,
    Event,
    FailureClassified,
    HeartbeatRecorded,
    ManifestCommitted,
    MembersHeartbeatRecorded,
    NodeQuarantineExpired,
    NodeUncordoned,
    RunSubmitted,
    ShardWritten,
    WriteRejected,
)
from events.shelf import Shelf
from events.state import RunState
from events.status import NO_NOTES, StatusNotes, note

PlanOf = Callable[[RunSubmitted], RunPlan]
_ACCEPTED = Verdict(True)


@dataclass(frozen=True, slots=True)
class Tracked:
    """What the controller knows of one run."""

    state: RunState
    plan: RunPlan
    watch: Watch = NOTHING_SEEN
    staged: checkpoints.Staged | None = None  # the last CheckpointStaged: the auto interval's
    shards: checkpoints.Shards = field(default_factory=dict)
    # What the status summary shows beyond the state (events.status): runledger.status.
    status: StatusNotes = NO_NOTES
    evidence: exits.Evidence = exits.EMPTY  # the current generation's exits (controller.exits)
    tally: runmanifest.Tally = runmanifest.EMPTY  # for its post-run manifest


@dataclass(frozen=True, slots=True)
class NodePolicy:
    """How long a quarantine lasts, the probation after it, and how long a silent node
    is waited for (controller config).

    ``expiry_ms`` 0: a quarantine lasts until an operator uncordons the node.
    ``silence_ms``: how long a silent node takes to count as gone.
    After an expiry the node's failure count is ``probation_failures``: with the
    default, one short of a quarantine, so one more node fault quarantines it again.
    """

    expiry_ms: int = 3_600_000
    probation_failures: int = 2
    # A node whose agent and workers are all this long silent is gone (controller.lost,
    # controller.elastic): three of the agents' heartbeat intervals or more. A large
    # fleet's agents heartbeat less often (``runledger controller --node-silence-s``).
    silence_ms: int = 6_000

    def expires_at(self, quarantined_at: int) -> int:
        """When a quarantine that began then expires (``NodeQuarantined.expires_at``); 0: never."""
        return quarantined_at + self.expiry_ms if self.expiry_ms > 0 else 0


@dataclass(frozen=True, slots=True)
class Model:
    since: int
    live: Mapping[str, Tracked] = field(default_factory=dict)
    done: Shelf[Tracked] = field(default_factory=Shelf)
    closing: frozenset[str] = frozenset()
    inventory: Inventory = NO_NODES
    node_failures: Mapping[str, int] = field(default_factory=dict)
    # Rejections being aggregated, per key (controller.rejections).
    rejections: Mapping[rejections.Key, rejections.Pending] = field(default_factory=dict)
    node_policy: NodePolicy = NodePolicy()
    # Every controller's view of all gate evidence (controller.evidence), not a fold of runs.
    gates: GateBook = NO_GATES
    # The operators' requests taken (applied or refused), by event id, and per node the
    # operations applied to it: folded from their facts (controller.replays).
    requests: Set[str] = frozenset()
    node_epochs: Mapping[str, int] = field(default_factory=dict)

    def tracked(self, run_id: str) -> Tracked | None:
        found = self.live.get(run_id)
        return found if found is not None else self.done.get(run_id)

    @property
    def runs(self) -> Mapping[str, RunState]:
        """Every run's folded state, live and finished."""
        return _States(self)

    def due(self) -> list[str]:
        """The runs a tick visits, in the order it visits them."""
        return sorted(self.live.keys() | self.closing)


class _States(Mapping[str, RunState]):
    __slots__ = ("_model",)

    def __init__(self, model: Model) -> None:
        self._model = model

    def __getitem__(self, run_id: str) -> RunState:
        found = self._model.tracked(run_id)
        if found is None:
            raise KeyError(run_id)
        return found.state

    def __iter__(self) -> Iterator[str]:
        yield from self._model.live
        yield from self._model.done

    def __len__(self) -> int:
        return len(self._model.live) + len(self._model.done)


class Draft:
    """A model being changed, copy on write: the model it starts from is never touched.

    One draft serves one ``handle`` or ``tick`` (or a whole replay), so the live
    runs are copied at most once per step however many records it folds, and
    finished runs only where one changes.
    """

    __slots__ = ("_closing", "_done", "_ended", "_failures", "_failures_copy", "_live",
                 "_live_copy", "_rejections", "_rejections_copy", "_requests",
                 "_requests_copy", "gates", "inventory", "node_epochs", "node_policy",
                 "plan_of", "since")

    def __init__(self, model: Model, plan_of: PlanOf) -> None:
        self.since = model.since
        self.plan_of = plan_of
        self.inventory = model.inventory
        self.node_policy = model.node_policy
        self.gates = model.gates
        self._live: Mapping[str, Tracked] = model.live
        self._live_copy: dict[str, Tracked] | None = None  # ours to write, once made
        self._done = model.done
        self._ended: dict[str, Tracked] = {}  # finished runs changed by this draft
        self._closing = model.closing
        self._failures: Mapping[str, int] = model.node_failures
        self._failures_copy: dict[str, int] | None = None
        self._rejections = model.rejections
        self._rejections_copy: dict[rejections.Key, rejections.Pending] | None = None
        self._requests: Set[str] = model.requests
        self._requests_copy: set[str] | None = None
        self.node_epochs = model.node_epochs

    def get(self, run_id: str) -> Tracked | None:
        found = self._live.get(run_id)
        if found is None:
            found = self._ended.get(run_id)
        return found if found is not None else self._done.get(run_id)

    def live(self) -> Iterable[Tracked]:
        return self._live.values()

    @property
    def node_failures(self) -> Mapping[str, int]:
        return self._failures

    def freeze(self) -> Model:
        """The model reached; the draft stays usable and copies again before its next write."""
        self._done = self._done.with_(self._ended)
        self._ended = {}
        self._live_copy = self._failures_copy = self._rejections_copy = None
        self._requests_copy = None
        return Model(self.since, self._live, self._done, self._closing, self.inventory,
                     self._failures, self._rejections, self.node_policy, self.gates,
                     self._requests, self.node_epochs)

    @property
    def requests(self) -> Set[str]:
        """The operators' requests taken so far, by event id (controller.replays)."""
        return self._requests

    def _took(self, event: Event) -> None:
        """Remember the request a record took, and a node operation's new epoch."""
        request = replays.request_of(event)
        if request is not None and request not in self._requests:
            if self._requests_copy is None:
                self._requests = self._requests_copy = set(self._requests)
            self._requests_copy.add(request)
        epochs = replays.node_epoch(self.node_epochs, event)
        if epochs is not None:
            self.node_epochs = epochs

    def pending_rejections(self) -> Mapping[rejections.Key, rejections.Pending]:
        return self._rejections

    def set_rejection(self, key: rejections.Key, pending: rejections.Pending | None) -> None:
        """Keep (or with None, forget) the aggregation of one rejection key."""
        if self._rejections_copy is None:
            self._rejections = self._rejections_copy = dict(self._rejections)
        if pending is None:
            self._rejections_copy.pop(key, None)
        else:
            self._rejections_copy[key] = pending

    def absorb(self, event: Event) -> Verdict:
        """Fold one record into the model: the one update path, live and on replay.

        Records about nodes change the inventory; any other record is judged by
        the run fold (``events.fold.apply``) once, and an accepted one changes
        the run's state and bookkeeping. The verdict says which it was.
        """
        self._took(event)
        if isinstance(event, NODE_RECORDS):
            self.inventory = observe(self.inventory, event)
            if isinstance(event, NodeUncordoned | NodeQuarantineExpired):
                self._failures = count_failures(self._failures, event)
                self._failures_copy = None  # a new mapping, which the model may share
            return _ACCEPTED
        if isinstance(event, WriteRejected):  # recorded, whatever the run fold says of it
            self.set_rejection(*rejections.recorded(event))
        return self.absorb_run(event)

    def absorb_run(self, event: Event) -> Verdict:
        """:meth:`absorb` for a record about a run (a report names no node)."""
        before = self.get(event.run_id)
        transition = apply(before.state if before is not None else None, event)
        state = transition.state
        if not transition.verdict.accepted or state is None:
            return transition.verdict
        if before is None:
            assert isinstance(event, RunSubmitted)  # the fold accepts nothing else first
            self._put(Tracked(state, self._plan(event), status=note(NO_NOTES, event),
                              tally=runmanifest.observe(runmanifest.EMPTY, event, state)))
            return transition.verdict
        if (isinstance(event, FailureClassified) and event.node
                and policy.counts_against_node(event.failure_class, event.signature)):
            self._count_failure(event.node)
        self._put(_noted(before, state, event))
        return transition.verdict

    def _plan(self, event: RunSubmitted) -> RunPlan:
        """The run's plan; one that cannot be made fails the run (``RunPlan.invalid``),
        live and on replay alike, instead of stopping the controller."""
        try:
            return self.plan_of(event)
        except Exception as exc:
            return RunPlan(world_size=1, argv=(), invalid=f"{type(exc).__name__}: {exc}")

    def _count_failure(self, node: str) -> None:
        if self._failures_copy is None:
            self._failures = self._failures_copy = dict(self._failures)
        self._failures_copy[node] = self._failures_copy.get(node, 0) + 1

    def _writable_live(self) -> dict[str, Tracked]:
        if self._live_copy is None:
            self._live = self._live_copy = dict(self._live)
        return self._live_copy

    def _put(self, run: Tracked) -> None:
        run_id = run.state.run_id
        if not run.state.status.terminal:
            self._writable_live()[run_id] = run
            return
        if run_id in self._live:
            del self._writable_live()[run_id]
        self._ended[run_id] = run
        if bool(run.state.open_alerts) != (run_id in self._closing):
            self._closing = self._closing ^ {run_id}


def _noted(before: Tracked, state: RunState, event: Event) -> Tracked:
    """The run after an accepted record: its state, and the bookkeeping the record adds."""
    staged, shards = before.staged, before.shards
    if (type(event) is HeartbeatRecorded and not event.closing) or (
            type(event) is MembersHeartbeatRecorded
            and not any(b.closing for b in event.beats)):  # most records; none watched
        return Tracked(state, before.plan, before.watch, staged, shards, before.status,
                       before.evidence, before.tally)
    match event:
        case ShardWritten():
            shards = checkpoints.track_shard(shards, event)
        case ManifestCommitted():
            shards = checkpoints.prune_shards(shards, event.step)
        case CheckpointStaged():
            staged = checkpoints.Staged(event.step, event.header.occurred_at, event.stall_ms,
                                        event.generation)
    return Tracked(state, before.plan, observe_run(before.watch, event, before.state), staged,
                   shards, note(before.status, event), exits.observe(before.evidence, event),
                   runmanifest.observe(before.tally, event, state))


def replay(events: Iterable[Event], since: int, plan_of: PlanOf) -> Model:
    """The model a (re)started controller holds after reading ``runledger.runs``."""
    draft = Draft(Model(since=since), plan_of)
    for event in events:
        draft.absorb(event)
    return draft.freeze()
