"""The informational records of the run fold (``events.fold``): what they do to a run.

Rejections, alerts, stop commands, a lost node and the post-run manifest never
change a run's status and stay legal after the run has ended: they are about the
run, stop commands follow a cancellation by design, the manifest follows the end,
and a ``NodeLost`` is the controller's account of a failure whose own record
(``FailureClassified``) does the changing.
``events.fold.apply`` lets them past its terminal check and takes their effect
from :func:`advance`.

Tested in tests/events/test_fold.py and tests/events/test_fold_properties.py.
"""

from __future__ import annotations

from dataclasses import replace

from events.model import (
    AlertRaised,
    AlertResolved,
    GroupStopCommanded,
    NodeLost,
    RunManifestPublished,
    WriteRejected,
)
from events.state import RunState

INFORMATIONAL = (WriteRejected, AlertRaised, AlertResolved, GroupStopCommanded,
                 RunManifestPublished, NodeLost)

Informational = (WriteRejected | AlertRaised | AlertResolved | GroupStopCommanded
                 | RunManifestPublished | NodeLost)


def advance(state: RunState, e: Informational) -> RunState:
    """The state after an informational record (always accepted)."""
    match e:
        case WriteRejected():
            return replace(state, rejections=state.rejections + 1 + e.repeats)
        case AlertRaised():
            if e.key in state.open_alerts:  # a duplicate of an open alert changes nothing
                return state
            return replace(state, alerts=state.alerts + 1,
                           open_alerts={**state.open_alerts, e.key: e.header.event_id})
        case AlertResolved():
            if state.open_alerts.get(e.key) != e.raised_event_id:
                return state
            return replace(state, open_alerts={k: v for k, v in state.open_alerts.items()
                                               if k != e.key})
    return state  # a stop command, a manifest, a lost node: recorded by projections
