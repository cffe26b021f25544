"""The status summary (events.status) agrees with the refold `status` and `runs` show.

Property: for any log of one run, the summary folded as the controller folds
it (accepted facts only, notes beside the state), through the wire and back,
is the document ``runledger.views.runview`` makes by folding the whole log, except
for what only other topics know (heartbeat ages, undecided cancel requests).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.fold import apply
from events.model import Event
from events.state import RunState
from events.status import (
    HISTORY,
    NO_NOTES,
    PROGRESS_EVERY_MS,
    StatusNotes,
    decode,
    encode,
    note,
    summarize,
    worth_writing,
)
from runledger.views import statusview
from runledger.views.runview import list_rows, status_document
from tests.events.strategies import random_logs, run_logs

PROPS = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NOW = 2_000_000_000_000
# Only the reports and the requests topics know these; the summary leaves them out.
_ELSEWHERE = {"members", "cancel_requests", "source", "summarized_at"}


def as_controller(log: list[Event]) -> tuple[RunState | None, StatusNotes]:
    state: RunState | None = None
    notes = NO_NOTES
    for event in log:
        t = apply(state, event)
        if t.verdict.accepted and t.state is not None:
            state, notes = t.state, note(notes, event)
    return state, notes


@PROPS
@given(st.one_of(run_logs(), random_logs()))
def test_the_summary_is_the_refold(log: list[Event]) -> None:
    state, notes = as_controller(log)
    refold = status_document("r1", [], log, [], NOW)
    if state is None:
        assert refold is None or not refold["seen_by_controller"]
        return
    record = decode(encode(summarize(state, notes, NOW)))
    fast = statusview.document(record)
    assert refold is not None
    # The summary keeps the latest HISTORY failures; the refold has every one.
    assert fast.pop("failure_history") == refold.pop("failure_history")[-HISTORY:]
    assert {k: v for k, v in fast.items() if k not in _ELSEWHERE} == \
        {k: v for k, v in refold.items() if k not in _ELSEWHERE}
    assert [(m["logical_id"], m["node"], m["slot"]) for m in fast["members"]] == \
        [(m["logical_id"], m["node"], m["slot"]) for m in refold["members"]]
    assert statusview.rows([record]) == list_rows([], log)


@PROPS
@given(run_logs(), st.data())
def test_a_summary_is_written_for_every_change_but_progress_and_heartbeats(
        log: list[Event], data: st.DataObject) -> None:
    state, notes = as_controller(log)
    if state is None:
        return
    prev = summarize(state, notes, NOW)
    assert worth_writing(None, prev)
    assert not worth_writing(prev, summarize(state, notes, NOW + 1))
    beat = dict(state.heartbeats) | {"w0": NOW + 5}
    same = RunState(**{**_fields(state), "heartbeats": beat, "updated_at": NOW + 5})
    assert not worth_writing(prev, summarize(same, notes, NOW + 5))
    later = data.draw(st.integers(1, 3 * PROGRESS_EVERY_MS))
    stepped = RunState(**{**_fields(state), "step": state.step + 1})
    assert worth_writing(prev, summarize(stepped, notes, NOW + later)) == \
        (later >= PROGRESS_EVERY_MS)
    queued = RunState(**{**_fields(state), "queue_reason": state.queue_reason + "x"})
    assert worth_writing(prev, summarize(queued, notes, NOW + 1))
    failed = StatusNotes(notes.name, notes.failure_history_json, notes.retries + 1)
    assert worth_writing(prev, summarize(state, failed, NOW + 1))


def _fields(state: RunState) -> dict[str, object]:
    return {f: getattr(state, f) for f in state.__dataclass_fields__}


def test_bytes_of_another_writer_are_refused_with_a_reason() -> None:
    from events.errors import DecodeError

    for data in (b"", b"\xc3\x01" + bytes(8) + b"x", b"junk"):
        try:
            decode(data)
        except DecodeError as exc:
            assert exc.reason in ("unknown_fingerprint", "body_invalid")
        else:
            raise AssertionError(f"{data!r} decoded")
