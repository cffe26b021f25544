"""Pause and resume in the run fold (``events.fold``): an alert's ``pause`` action and
an operator's resume.

``RunPaused`` is legal while a generation is live (Starting, Running,
Recovering): it revokes that generation as a requeue does (the run is Queued,
so every report of the old generation is refused as ``run_not_active``) and
marks the run ``paused``, which the controller's admission rule honours: a
paused run is not admitted again. ``RunResumed`` is legal only while the run is
paused; it clears the mark, and the run waits in the queue like any other.
A ``ResumeRequested`` is the operator's request, judged by the controller
(``controller.inputs``); the fold has no rule for it.

Tested in tests/events/test_fold.py and tests/events/test_fold_pause.py.
"""

from __future__ import annotations

from dataclasses import replace

from events.model import RunPaused, RunResumed
from events.state import RunState, Status

PAUSE_EVENTS = (RunPaused, RunResumed)
PauseEvent = RunPaused | RunResumed
RESUME_COMMAND = "runledger resume"


def problem(state: RunState, e: PauseEvent) -> str | None:
    """Why ``e`` is an illegal transition from ``state``, or None when it is legal."""
    match e:
        case RunPaused():
            if not state.status.active:
                return f"RunPaused while {state.status.value}"
        case RunResumed():
            if not state.paused:
                return f"RunResumed while the run is {state.status.value} and not paused"
    return None


def advance(state: RunState, e: PauseEvent) -> RunState:
    """The state after a legal pause or resume."""
    match e:
        case RunPaused():
            why = (f"paused by alert {e.alert}{'/' + e.subject if e.subject else ''}: "
                   f"{e.reason}; `{RESUME_COMMAND} {state.run_id}` to go on")
            return replace(state, status=Status.QUEUED, paused=True, queue_reason=why,
                           awaiting_generation=False)
        case RunResumed():
            return replace(state, paused=False,
                           queue_reason=f"resumed by {e.principal}: {e.reason}")
    return state
