"""No input and no run can stop the controller: each is isolated, and every fact is checked.

The controller's core (``controller.reconcile``) is pure, but it is code: a
spec value, a report or a bug it has never met may make it raise, or compute a
fact its schema cannot hold (a long past 2**63). Unguarded, that input would be
read again after every restart and stop every run on the cluster. Here:

- :func:`take_input` handles one input and encodes what it appends. If either
  raises, the input is refused as a whole (the model stays as it was before
  it) and recorded as a ``WriteRejected`` with the reason (:data:`INPUT_FAILED`
  or :data:`FACT_INVALID`) and the error, and the loop goes on.
- :func:`take_tick` ticks every run at once; if that raises, it ticks them one
  by one, and a run whose reconcile raises fails (``RunFinished``,
  :data:`RECONCILE_FAILED` and the error), with its workers stopped, while
  every other run goes on.

Facts are encoded here, once, with the codec the writer uses, so what leaves
this module is exactly what the transaction appends. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.emitter import Emitter, Out
from controller.model import Model, PlanOf
from controller.reconcile import (
    Owns,
    Slots,
    everything,
    handle,
    quarantine_nodes,
    reconcile_run,
    tick,
)
from events.model import Event, RunFinished
from events.topics import RUNS

INPUT_FAILED = "input_failed"
FACT_INVALID = "fact_invalid"
RECONCILE_FAILED = "reconcile_failed"

# A fact, as it will be appended: (topic, event, encoded bytes).
Encoded = tuple[str, Event, bytes]
Encode = Callable[[Event], bytes]
# What went wrong and where, for the shell's log: (run id, reason, error text).
Problem = tuple[str, str, str]

_DETAIL_LIMIT = 500  # a refused input's error text, cut: the log is forever


class _Unencodable(Exception):
    def __init__(self, event: Event, error: Exception) -> None:
        super().__init__(f"{event.event_type} {event.header.event_id} does not fit its schema: "
                         f"{type(error).__name__}: {error}")


def take_input(model: Model, event: Event, topic: str, now: int, plan_of: PlanOf,
               encode: Encode, owns: Owns = everything,
               ) -> tuple[Model, list[Encoded], Problem | None]:
    """One input handled and its records encoded; or, if that fails, its refusal."""
    try:
        new, out = handle(model, event, now, plan_of, topic, owns=owns)
        return new, encoded(out, encode), None
    except _Unencodable as exc:
        reason, error = FACT_INVALID, str(exc)
    except Exception as exc:  # whatever it is, it must not stop the loop
        reason, error = INPUT_FAILED, f"{type(exc).__name__}: {exc}"
    em = Emitter(model, now, plan_of)
    em.reject(event, reason, error[:_DETAIL_LIMIT])
    refused, out = em.result()
    try:
        return refused, encoded(out, encode), (event.run_id, reason, error)
    except _Unencodable:  # not even its refusal fits (a forged id of megabytes): log only
        return model, [], (event.run_id, reason, error)


def refuse_input(model: Model, event: Event, now: int, plan_of: PlanOf, encode: Encode,
                 reason: str, detail: str) -> tuple[Model, list[Encoded]]:
    """An input refused before it is handled (a request whose signature fails):
    recorded as a ``WriteRejected`` with the reason, and nothing else changes."""
    em = Emitter(model, now, plan_of)
    em.reject(event, reason, detail[:_DETAIL_LIMIT])
    refused, out = em.result()
    try:
        return refused, encoded(out, encode)
    except _Unencodable:
        return model, []


def take_tick(model: Model, now: int, plan_of: PlanOf, encode: Encode,
              owns: Owns = everything) -> tuple[Model, list[Encoded], list[Problem]]:
    """The tick for every run; on a failure, run by run, failing only the runs that fail."""
    try:
        new, out = tick(model, now, plan_of, owns)
        return new, encoded(out, encode), []
    except Exception:  # found again below, run by run
        pass
    records: list[Encoded] = []
    problems: list[Problem] = []
    for run_id in [r for r in model.due() if owns(r)]:
        try:
            em = Emitter(model, now, plan_of)
            reconcile_run(em, run_id, Slots(em.draft), owns)
            new, out = em.result()
            records += encoded(out, encode)
            model = new
        except Exception as exc:  # this run fails, not the controller
            error = str(exc) if isinstance(exc, _Unencodable) else f"{type(exc).__name__}: {exc}"
            problems.append((run_id, RECONCILE_FAILED, error))
            model, failed = _fail(model, run_id, now, plan_of, error, encode)
            records += failed
    try:  # what the tick does after the runs: nodes' quarantines, rejection windows
        em = Emitter(model, now, plan_of)
        quarantine_nodes(em, owns)
        em.close_rejections()
        new, out = em.result()
        records += encoded(out, encode)
        model = new
    except Exception as exc:
        problems.append(("", RECONCILE_FAILED, f"{type(exc).__name__}: {exc}"))
    return model, records, problems


def _fail(model: Model, run_id: str, now: int, plan_of: PlanOf, error: str,
          encode: Encode) -> tuple[Model, list[Encoded]]:
    """A run the controller cannot reconcile fails, and its workers are stopped."""
    run = model.tracked(run_id)
    if run is None or run.state.status.terminal:
        return model, []  # nothing left to fail; its alerts stay as they are
    state = run.state
    em = Emitter(model, now, plan_of)
    reason = f"{RECONCILE_FAILED}: {error}"[:_DETAIL_LIMIT]
    em.emit(RUNS, RunFinished(
        header=em.header(run_id, state.generation, f"{run_id}/RunFinished"),
        outcome="failed", reason=reason))
    em.stop(state, reason)
    new, out = em.result()
    try:
        return new, encoded(out, encode)
    except _Unencodable:
        return model, []


def encoded(out: list[Out], encode: Encode) -> list[Encoded]:
    """Each record with its bytes; a record that cannot be encoded raises, naming it."""
    records: list[Encoded] = []
    for topic, event in out:
        try:
            records.append((topic, event, encode(event)))
        except Exception as exc:
            raise _Unencodable(event, exc) from None
    return records
