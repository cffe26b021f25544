"""What one step of the controller appends, folded into its model as it goes.

An :class:`Emitter` serves one ``handle`` or ``tick``: it holds the draft of
the model (``controller.model.Draft``), the step's ``now`` and the records to
append, as ``(topic, event)`` pairs with deterministic event ids. Each fact is
folded into the draft when it is emitted, so a decision taken later in the same
step sees it, and the model returned already includes every record's effect: a
caller that appends them in one Kafka transaction keeps model and log in step.
Commands are no facts of a run and change nothing in the model.

A fact that ends a run (``RunFinished``, ``RunCancelled``) is followed at once,
in the same step and so the same transaction, by the run's
``RunManifestPublished`` (``events.runmanifest``); the shell then writes the
document it digests (``controller.service``).
"""

from __future__ import annotations

from collections.abc import Callable

from controller import checkpoints, rejections
from controller.model import Draft, Model, PlanOf
from events import runmanifest
from events.model import (
    Event,
    GroupStopCommanded,
    Header,
    RunCancelled,
    RunFinished,
    RunManifestPublished,
    WriteRejected,
)
from events.state import RunState
from events.topics import COMMANDS, RUNS

PRODUCER = "controller"
# The fact's figures are Avro longs; sums of reported tokens could pass one (the
# document itself, JSON, holds any integer).
_LONG_MAX = (1 << 63) - 1

Out = tuple[str, Event]


def everything(_key: str) -> bool:
    """A lone controller owns every run and node key."""
    return True


class Emitter:
    def __init__(self, model: Model, now: int, plan_of: PlanOf,
                 owns: Callable[[str], bool] = everything) -> None:
        self.draft = Draft(model, plan_of)
        self.now = now
        self.out: list[Out] = []
        # Whether this controller writes the facts of a run or node key
        # (controller.ownership): a node's facts have one writer, its key's owner.
        self.owns = owns

    def result(self) -> tuple[Model, list[Out]]:
        return self.draft.freeze(), self.out

    def header(
        self, run_id: str, generation: int, event_id: str, cause: str | None = None
    ) -> Header:
        return Header(event_id, run_id, generation, self.now, PRODUCER, cause)

    def header_for(self, event: Event) -> checkpoints.HeaderFor:
        """Headers for facts caused by ``event``, in its run and generation."""
        return lambda event_id, cause: self.header(event.run_id, event.generation, event_id,
                                                   cause)

    def emit(self, topic: str, event: Event) -> None:
        self.out.append((topic, event))
        if topic == RUNS and self.draft.absorb(event).accepted \
                and isinstance(event, RunFinished | RunCancelled):
            self.publish_manifest(event)

    def publish_manifest(self, end: RunFinished | RunCancelled) -> None:
        """The run's post-run manifest fact, after the fact that ended it."""
        run = self.draft.get(end.run_id)
        if run is None or not run.state.status.terminal:
            return
        doc = runmanifest.document(run.state, run.tally)
        tokens, model = doc["tokens"], doc["model"]
        root = run.plan.checkpoint.root if run.plan.checkpoint is not None else None
        cost = doc["cost"]
        self.emit(RUNS, RunManifestPublished(
            header=self.header(end.run_id, end.generation, f"{end.run_id}/RunManifestPublished",
                               end.header.event_id),
            digest=runmanifest.digest(doc), path=runmanifest.path_for(root, end.run_id),
            status=doc["status"], checkpoint_step=model["step"] if model else None,
            accepted_loss_tokens=min(tokens["accepted_loss_tokens"], _LONG_MAX),
            discarded_loss_tokens=min(tokens["discarded_loss_tokens"], _LONG_MAX),
            incidents=len(doc["incidents"]), cost=cost["total"] if cost else None))

    def keep(self, report: Event) -> None:
        """Append a report already folded (and accepted) as a fact, not folding it again."""
        self.out.append((RUNS, report))

    def reject(self, event: Event, reason: str, detail: str) -> None:
        """Record a refused input, aggregated per key (``controller.rejections``)."""
        run = self.draft.get(event.run_id)
        h = self.header(event.run_id, run.state.generation if run is not None else 0,
                        f"{event.header.event_id}/WriteRejected", event.header.event_id)
        member = rejections.member_of(event)
        key = rejections.key_for(event.run_id, event.generation, member, reason)
        pending = self.draft.pending_rejections().get(key)
        record = WriteRejected(
            header=h, rejected_event_id=event.header.event_id,
            rejected_event_type=event.event_type, reason=reason, detail=detail,
            member=member or None, rejected_generation=event.generation,
            repeats=rejections.repeats(pending, self.now))
        append, after = rejections.judge(pending, record, self.now)
        if append:
            self.emit(RUNS, record)  # folding it records the key (Draft.absorb)
        else:
            self.draft.set_rejection(key, after)

    def close_rejections(self) -> None:
        """Record what each window that passed suppressed, and forget idle keys."""
        for key, pending in list(self.draft.pending_rejections().items()):
            record = rejections.due(pending, self.now)
            if record is not None:
                self.emit(RUNS, record)
            elif rejections.expired(pending, self.now):
                self.draft.set_rejection(key, None)

    def stop(self, state: RunState, reason: str) -> None:
        """Stop the run's current generation on every node it runs on."""
        if state.generation == 0:
            return
        for node in sorted({m.node for m in state.members}):
            cid = f"{state.run_id}/g{state.generation}/stop/{node}"
            self.emit(COMMANDS, GroupStopCommanded(
                header=self.header(state.run_id, state.generation, cid), command_id=cid,
                node=node, reason=reason))
