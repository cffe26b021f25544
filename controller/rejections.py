"""Bounded rejections: one ``WriteRejected`` per (run, generation, member, reason) per window.

A zombie or orphaned worker keeps reporting after it is fenced, and each of
its reports is refused; recorded one by one, ~12 a second from one orphaned
pair would grow the forever-retained log without bound. Here the first
rejection of a key is recorded at once; the ones after it within
:data:`WINDOW_MS` are only counted, and the next record of that key (a later
rejection, or :func:`due` once the window has passed) carries the count in
``repeats``. So a key costs at most two records per window, and no rejection
is lost from the count: ``RunState.rejections`` adds ``1 + repeats``.

Rejections of inputs for runs nobody submitted share one key per reason (the
run id of a forgery is whatever its sender chose). Pure: the controller's
model holds the :class:`Pending` per key, rebuilt on replay from the records
(:func:`recorded`), so a restarted controller at most records one more.

Tested in tests/controller/test_rejections.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from events.fold import UNKNOWN_RUN
from events.model import Event, WriteRejected

WINDOW_MS = 60_000

# (run id, the rejected input's generation, its member or "", reason)
Key = tuple[str, int, str, str]


@dataclass(frozen=True, slots=True)
class Pending:
    recorded_at: int  # when the key's last record was appended
    suppressed: int = 0  # rejections of the key since, not recorded yet
    # The last suppressed rejection, recorded by ``due`` for all of them.
    last: WriteRejected | None = None


def member_of(event: Event) -> str:
    return str(getattr(event, "logical_id", "") or "")


def key_for(run_id: str, generation: int, member: str, reason: str) -> Key:
    return ("" if reason == UNKNOWN_RUN else run_id, generation, member, reason)


def key_of(record: WriteRejected) -> Key:
    gen = record.rejected_generation if record.rejected_generation is not None else -1
    return key_for(record.run_id, gen, record.member or "", record.reason)


def judge(pending: Pending | None, record: WriteRejected, now: int) -> tuple[bool, Pending]:
    """Whether to append ``record`` now (with ``repeats`` filled in by the caller), and the
    key's bookkeeping after it."""
    if pending is None or now - pending.recorded_at >= WINDOW_MS:
        return True, Pending(now)
    return False, Pending(pending.recorded_at, pending.suppressed + 1, record)


def repeats(pending: Pending | None, now: int) -> int:
    """The count a record appended now carries: what was suppressed before it."""
    if pending is None or now - pending.recorded_at < WINDOW_MS:
        return 0
    return pending.suppressed


def recorded(record: WriteRejected) -> tuple[Key, Pending]:
    """The bookkeeping a record on the log stands for (live and on replay alike)."""
    return key_of(record), Pending(record.header.occurred_at)


def due(pending: Pending, now: int) -> WriteRejected | None:
    """The record that closes a key's window, if the window passed with rejections in it."""
    if pending.last is None or pending.suppressed == 0 or now - pending.recorded_at < WINDOW_MS:
        return None
    last = pending.last
    return replace(last, header=replace(last.header, occurred_at=now),
                   repeats=pending.suppressed - 1)


def expired(pending: Pending, now: int) -> bool:
    """A key with nothing left to record and its window over: forget it."""
    return pending.suppressed == 0 and now - pending.recorded_at >= WINDOW_MS
