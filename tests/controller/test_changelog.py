"""Which summaries a controller cycle appends (controller.changelog); pure."""

from __future__ import annotations

from controller.changelog import Changelog
from controller.model import replay
from controller.runplan import RunPlan
from events.model import RunSubmitted
from events.partition import partition_for
from events.status import decode
from events.topics import STATUS
from tests.events.builders import Ev


def plan(_: RunSubmitted) -> RunPlan:
    return RunPlan(world_size=1, argv=("true",))


def test_each_owned_run_once_until_it_changes_and_only_after_the_commit() -> None:
    log = [Ev("r1").submitted(), Ev("r2").submitted()]
    model = replay(log, 0, plan)
    book = Changelog(True, 6)
    out = book.pending(model, ["r1", "r2", "r1", "node/x"], lambda rid: rid == "r1", 10)
    assert [(o.topic, o.event.run_id) for o in out] == [(STATUS, "r1")]
    assert decode(out[0].value) == out[0].event
    assert book.pending(model, ["r1"], lambda rid: True, 11)  # not committed yet: again
    book.committed(out)
    assert book.pending(model, ["r1"], lambda rid: True, 12) == []
    assert book.caught_up(model, [partition_for("r2", 6)]) == [
        rid for rid in ("r1", "r2") if partition_for(rid, 6) == partition_for("r2", 6)]
    assert Changelog(False, 6).pending(model, ["r2"], lambda rid: True, 10) == []
