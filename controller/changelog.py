"""The controller's side of ``runledger.status``: which summaries one cycle appends.

A :class:`Changelog` remembers the newest summary on the topic for every run
this controller decides for (``written``), and for the runs a cycle touched
makes the records (``events.status.summarize``) that ``worth_writing`` lets
through. They go into the cycle's transaction with the facts that changed
them, so the topic never shows a state the log does not hold, and they count
as written only once that transaction commits (``committed``).

When a controller starts deciding for partitions (a start, a restart, a
takeover) it first reads what the topic holds for them (``seed``) and then
summarizes every run of theirs it knows, so a summary that a dead or older
controller never wrote, or wrote from an older state, is caught up at once.
A cluster without the topic (set up by an older runledger) gets none: the
controller says so once and ``status`` folds the log instead.

Tested in tests/controller/test_changelog.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from controller.chains import Outgoing
from controller.model import Model
from events.partition import partition_for
from events.status import VERSION, RunStatusChanged, encode, summarize, worth_writing
from events.topics import STATUS


class Changelog:
    def __init__(self, enabled: bool, partitions: int, aligned: bool = True) -> None:
        self.enabled = enabled
        self.partitions = partitions  # of the co-partitioned topics: what a controller owns
        # The status topic has as many partitions, so a run's summary lies on its
        # facts' partition number and a takeover reads only its partitions' summaries.
        self.aligned = aligned
        self.written: dict[str, RunStatusChanged] = {}

    def seed(self, found: Mapping[str, RunStatusChanged]) -> None:
        """What the topic holds for partitions this controller now decides for."""
        self.written.update(found)

    def caught_up(self, model: Model, ready: Iterable[int]) -> list[str]:
        """Every run the model knows on the partitions in ``ready``: each is summarized."""
        parts = set(ready)
        return [rid for rid in model.runs if partition_for(rid, self.partitions) in parts]

    def pending(self, model: Model, run_ids: Iterable[str], owns: Callable[[str], bool],
                now: int) -> list[Outgoing]:
        """The summaries to append for ``run_ids`` (those this controller decides for)."""
        if not self.enabled:
            return []
        out: list[Outgoing] = []
        for rid in sorted(set(run_ids)):
            tracked = model.tracked(rid)
            if tracked is None or not owns(rid):
                continue
            record = summarize(tracked.state, tracked.status, now)
            if worth_writing(self.written.get(rid), record):
                out.append(Outgoing(STATUS, record, encode(record), version=VERSION))
        return out

    def committed(self, out: Sequence[Outgoing]) -> None:
        for o in out:
            if o.topic == STATUS and isinstance(o.event, RunStatusChanged):
                self.written[o.event.run_id] = o.event
