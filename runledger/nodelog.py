"""The node records on the log, as ``runledger nodes``, ``preflight``, ``pilot`` and the
live view read them: the agents' reports about nodes and the node facts of the runs.

A shell over two bounded :class:`~events.kafka.reader.LogReader` reads; what they
mean is folded by ``runledger.views.nodeview`` (and ``rehearse.preflightio``).
It lives beside the command line, not in it, so the live view reads the same
records without importing a command.

Tested in tests/runledger/commands/test_nodes.py.
"""

from __future__ import annotations

from controller.inventory import NODE_RECORDS
from events.kafka.clients import event_type_of
from events.kafka.keys import read_ring_or_empty
from events.kafka.reader import LogReader
from events.kafka.reportdoor import ReportDoor
from events.model import Event, FailureClassified, node_key
from events.record import Quarantined
from events.topics import REPORTS, RUNS
from runledger import config

_FACT_TYPES = frozenset({t.__name__ for t in NODE_RECORDS} | {FailureClassified.__name__})


def _passed_over(_: Quarantined) -> None:
    return None


def node_events(bootstrap: str) -> list[Event]:
    """Node records of the reports and node facts (and failures) of runs, merged by time.

    The reports pass the controller's own door (``events.kafka.reportdoor``): a node record
    not signed by its node's key, or one no agent may send (a ``NodeQuarantined`` on
    reports), is passed over, as the controller refuses it."""
    prefix = node_key("").encode()
    patience = config.retry_s()
    door = ReportDoor(lambda: read_ring_or_empty(bootstrap, name="runledger-nodes",
                                                 retry_s=patience))
    # An undecodable record belongs to some run, and the controller has already
    # quarantined and reported it; a view of the nodes passes over it quietly.
    reader = LogReader(bootstrap, [REPORTS], on_quarantine=_passed_over, strict=True,
                       bounded=True, retry_s=patience, raw=True, name="runledger-nodes",
                       select=lambda m: (m.key() or b"").startswith(prefix))
    try:
        reports = [r.event for r in reader.records() if door.admit(r, len(r.value)) is None]
    finally:
        reader.close()
    # Of the runs' facts only the node facts and failures count here: the others (most
    # of a long log) are passed over by their event_type header, never decoded.
    reader = LogReader(bootstrap, [RUNS], on_quarantine=_passed_over, strict=True,
                       bounded=True, retry_s=patience, name="runledger-nodes-facts",
                       select=lambda m: event_type_of(m) in _FACT_TYPES)
    try:
        facts = [r.event for r in reader.records()]
    finally:
        reader.close()
    # Facts keep their log order; an agent's records go by when they happened.
    return sorted([*reports, *facts], key=lambda e: e.header.occurred_at)
