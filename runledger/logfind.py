"""Where a worker's log is, found on the log: the run's facts and its node's registration.

The run's own partition of ``runledger.runs`` says who the members of each
generation were and which exited (``runledger.views.logview.pick``); a running
worker's file lies under the work dir its agent registered, read from the
node's partition of ``runledger.reports`` and taken only when the node's own
key signed it (a forged registration would point elsewhere). ``runledger logs``
and the live view's log page both find a log this way.

Tested in tests/e2e/test_jobs.py and tests/runledger/ui/test_server.py.
"""

from __future__ import annotations

from pathlib import Path

from events.kafka.reader import LogReader
from events.kafka.reportdoor import view_door
from events.model import Event, node_key
from events.topics import REPORTS, RUNS
from runledger.errors import RunledgerError
from runledger.views.logview import LogNotFound, Picked, log_file, pick, work_dir_of


def run_reader(address: str, run: str, *, bounded: bool, retry_s: float,
               name: str = "runledger-logs") -> LogReader:
    """A reader of ``run``'s partition of ``runledger.runs``."""
    return LogReader(address, [RUNS], key=run, key_partition=True, bounded=bounded,
                     strict=True, retry_s=retry_s, name=name)


def run_facts(reader: LogReader, run: str) -> list[Event]:
    """``run``'s facts on its partition; an error naming the run when there are none."""
    facts = [r.event for r in reader.records() if r.event.run_id == run]
    if not facts:
        raise RunledgerError(f"unknown run {run!r}: not on {RUNS}"
                             " (`runledger runs` lists the runs)")
    return facts


def node_work_dir(address: str, node: str, retry_s: float,
                  name: str = "runledger-logs") -> str | None:
    """The work dir ``node``'s agent registered, from its partition of the reports."""
    door = view_door(address, name, retry_s)
    reader = LogReader(address, [REPORTS], key=node_key(node), key_partition=True,
                       bounded=True, strict=True, retry_s=retry_s, name=name, raw=True)
    try:
        return work_dir_of(node, (r.event for r in reader.records() if door.judge(r) is None))
    finally:
        reader.close()


def locate(address: str, run: str, facts: list[Event], rank: str | None,
           generation: int | None, retry_s: float,
           name: str = "runledger-logs") -> tuple[Picked, Path, str | None]:
    """The member asked for, the path of its log and its node's work dir (None once it
    exited); a ``RunledgerError`` listing what exists when there is no such member."""
    try:
        picked = pick(run, facts, rank, generation)
        work_dir = (None if picked.exited is not None
                    else node_work_dir(address, picked.node, retry_s, name))
        return picked, Path(log_file(run, picked, work_dir)), work_dir
    except LogNotFound as exc:
        raise RunledgerError(str(exc)) from None


__all__ = ["locate", "node_work_dir", "run_facts", "run_reader"]
