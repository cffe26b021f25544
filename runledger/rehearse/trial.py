"""Running a trial spec on the live stack: submit, watch, cancel, find its workers.

The shell of ``runledger pilot`` and ``runledger drill``; what the trial spec
is comes from the pure :mod:`runledger.rehearse.trialplan`. Each step is what an
operator would do by hand:

- :func:`submit` requests the run as ``runledger submit`` does (a
  ``RunSubmitted`` on ``runledger.requests`` through ``send_request``, signed
  when a key is given) and returns its run id;
- :class:`RunWatch` reads the run's facts (``runledger.runs``) and reports
  (``runledger.reports``) from the beginning, only the partition its key
  hashes to, and :meth:`RunWatch.wait` polls until a condition on them holds
  or raises :class:`TrialTimeout` naming what it waited for and what it saw;
- :func:`read_run` reads them once, to the end the log has now;
- :func:`cancel` asks the controller to cancel the run (``CancelRequested``);
- :func:`worker_pids` finds the run's worker processes on this machine by the
  identity the agent put in their environment (``events.workerenv``), for a
  drill that stops or kills one; it only sees workers of local agents.

Tested in tests/runledger/rehearse/test_trial.py and tests/runledger/commands/test_pilot.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from controller.spec.runspec import RunSpec, run_id_for
from events.kafka.reader import LogReader
from events.model import CancelRequested, Event, Header, RunSubmitted
from events.signed.signing import SigningKey
from events.topics import REPORTS, RUNS
from events.workerenv import GENERATION, LOGICAL_ID, RUN_ID
from runledger import config
from runledger.errors import RunledgerError
from runledger.signer import send_request

POLL_S = 0.5  # how long one read waits for new records
TERMINAL = ("RunFinished", "RunCancelled")
Until = Callable[[Sequence[Event]], bool]


class TrialTimeout(RunledgerError):
    """A trial run did not reach what was waited for in time; the message names both."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def submit(address: str, spec: RunSpec, who: str, key: SigningKey | None) -> str:
    """Request a run of ``spec`` as ``who`` (signed with ``key`` when given); its run id."""
    run_id = run_id_for(spec, who, uuid.uuid4().hex)  # the submission id, made at the edge
    event = RunSubmitted(
        header=Header(f"{run_id}/submitted", run_id, 0, now_ms(), f"cli/{who}"),
        spec_digest=spec.digest(), spec_json=spec.canonical_json(), principal=who,
        world_size=spec.world_size, dataset_id=spec.dataset)
    send_request(address, event, key)
    return run_id


def cancel(address: str, run_id: str, generation: int, who: str, key: SigningKey | None,
           reason: str) -> str:
    """Ask the controller to cancel ``run_id``; the request's event id."""
    event_id = f"{run_id}/cancel/{uuid.uuid4().hex[:12]}"
    event = CancelRequested(header=Header(event_id, run_id, generation, now_ms(), f"cli/{who}"),
                            principal=who, reason=reason)
    send_request(address, event, key)
    return event_id


def of_type(events: Sequence[Event], name: str) -> list[Event]:
    return [e for e in events if e.event_type == name]


def ended(events: Sequence[Event]) -> bool:
    """The run reached a terminal fact (its post-run manifest is in the same transaction)."""
    return any(e.event_type in TERMINAL for e in events)


def generation(events: Sequence[Event]) -> int:
    """The run's newest generation in ``events`` (0 before its first)."""
    return max((e.generation for e in events), default=0)


class RunWatch:
    """One run's facts and reports, read as they arrive; ``events`` in arrival order."""

    def __init__(self, address: str, run_id: str) -> None:
        self.run_id = run_id
        self.events: list[Event] = []
        # The same events by the topic they came from (a StepCommitted is both a
        # worker's report and, once accepted, a fact): the drill judges them apart.
        self.facts: list[Event] = []
        self.reports: list[Event] = []
        self._reader = LogReader(address, [RUNS, REPORTS], key=run_id, key_partition=True,
                                 retry_s=config.retry_s(), name="runledger-trial")

    def poll(self, timeout_s: float = POLL_S) -> list[Event]:
        """What arrived since the last poll (waiting up to ``timeout_s`` for something)."""
        mine = [r for r in self._reader.read_records(500, timeout_s)
                if r.event.run_id == self.run_id]
        for r in mine:
            (self.facts if r.topic == RUNS else self.reports).append(r.event)
        new = [r.event for r in mine]
        self.events.extend(new)
        return new

    def wait(self, until: Until, timeout_s: float, what: str) -> list[Event]:
        """Every event so far, once ``until`` holds of them; :class:`TrialTimeout` after
        ``timeout_s`` seconds, naming ``what`` and the run's last facts."""
        deadline = time.monotonic() + timeout_s
        while not until(self.events):
            if time.monotonic() >= deadline:
                raise TrialTimeout(
                    f"run {self.run_id}: no {what} after {timeout_s:g} s; last facts:"
                    f" {self.summary()}; see `runledger status {self.run_id}` and"
                    f" `runledger logs {self.run_id}`")
            self.poll()
        return list(self.events)

    def summary(self, last: int = 8) -> str:
        facts = [f"{e.event_type}(g{e.generation})" for e in self.events
                 if e.TOPIC == RUNS][-last:]
        return ", ".join(facts) or "none"

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> RunWatch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def read_run(address: str, run_id: str) -> list[Event]:
    """The run's facts and reports as far as the log has them now (a dump, not a tail)."""
    reader = LogReader(address, [RUNS, REPORTS], key=run_id, key_partition=True, bounded=True,
                       strict=True, retry_s=config.retry_s(), name="runledger-trial")
    try:
        return [r.event for r in reader.records() if r.event.run_id == run_id]
    finally:
        reader.close()


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def worker_pids(run_id: str | None, generation: int | None = None,
                logical_id: str | None = None) -> list[int]:
    """Live worker processes on this machine (of ``run_id``, its ``generation``, the
    worker ``logical_id`` when given), found by the environment the agent gave them."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        env = _environ(int(entry.name))
        if LOGICAL_ID not in env:
            continue
        if run_id is not None and env.get(RUN_ID) != run_id:
            continue
        if generation is not None and env.get(GENERATION) != str(generation):
            continue
        if logical_id is not None and env.get(LOGICAL_ID) != logical_id:
            continue
        found.append(int(entry.name))
    return sorted(found)


__all__ = ["TERMINAL", "RunWatch", "TrialTimeout", "cancel", "ended", "generation", "now_ms",
           "of_type", "read_run", "submit", "worker_pids"]
