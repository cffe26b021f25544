"""One log line per record the controller appends: what a person reads in its log.

Decisions (an admission, a queueing, a generation started or restarted, a
failure classified, a node quarantined, a run's end, a refusal, the commands
to agents) are logged at INFO; the routine facts that arrive many times a
second (heartbeats, steps, step times, cursors) at DEBUG, so the INFO log stays
readable and DEBUG still has every fact. Pure: the service logs what this returns.

Tested in tests/controller/test_narrate.py.
"""

from __future__ import annotations

import dataclasses
import logging

from events.model import Event

ROUTINE = frozenset({"HeartbeatRecorded", "AgentHeartbeatRecorded", "MembersHeartbeatRecorded",
                     "StepCommitted",
                     "StepTimesRecorded", "CursorAdvanced", "ShardWritten",
                     "RunStatusChanged"})  # a derived view of facts already logged
# Fields that are large or repeat the header; the log names the run and event instead.
_SKIP = frozenset({"header", "spec_json"})
MAX_VALUE = 120  # a longer value (an error text) is cut so one fact stays one line


def _value(value: object) -> str | None:
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, str):
        text = " ".join(value.split())  # a multi-line text stays on the line
        return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 1] + "…"
    if isinstance(value, list | tuple) and all(isinstance(v, str | int) for v in value):
        return ",".join(map(str, value)) if len(value) <= 8 else f"[{len(value)} items]"
    return None  # nested records: the event dump has them


def line(topic: str, event: Event) -> tuple[int, str]:
    """The level and the text of the line for ``event`` appended to ``topic``."""
    kind = type(event).__name__
    level = logging.DEBUG if kind in ROUTINE else logging.INFO
    parts = []
    if dataclasses.is_dataclass(event):
        for field in dataclasses.fields(event):
            if field.name in _SKIP:
                continue
            shown = _value(getattr(event, field.name))
            if shown is not None and shown != "":
                parts.append(f"{field.name}={shown}")
    head = event.header
    return level, (f"appended {kind} to {topic}: run {head.run_id} gen {head.generation}"
                   + (f" {' '.join(parts)}" if parts else ""))
