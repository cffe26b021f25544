"""Run summaries and a projection made from one hand-written timeline, without Kafka.

The summary is what the controller would put on ``runledger.status`` after the
timeline's facts (``events.status.summarize`` over the fold), and the projection
is what the projector would write for the same events, so a test sees both
sides of the live view agree, or not, as they would.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from events.fold import apply
from events.state import RunState
from events.status import NO_NOTES, RunStatusChanged, note, summarize
from events.topics import REPORTS
from tests.queries.timeline import Timeline, crash_and_recover, project


def summary_of(tl: Timeline, upto: int | None = None) -> RunStatusChanged:
    """The summary after the timeline's facts (the first ``upto`` events of it)."""
    state: RunState | None = None
    notes = NO_NOTES
    at = tl.start_ms
    for event in tl.events[:upto]:
        if event.TOPIC == REPORTS:  # reports never fold into a run
            continue
        t = apply(state, event)
        if t.state is None or not t.verdict.accepted:
            continue
        state = t.state
        notes = note(notes, event)
        at = event.header.occurred_at
    assert state is not None
    return summarize(state, notes, at)


def recovered_run(path: Path, run_id: str = "run-a") -> tuple[Timeline, RunStatusChanged]:
    """A run that crashed and recovered, projected into ``path``; its final summary."""
    tl = Timeline(run_id=run_id)
    crash_and_recover(tl)
    con = duckdb.connect(str(path))
    try:
        project(con, tl)
    finally:
        con.close()
    return tl, summary_of(tl)
