"""No replay of an operator's request: each one is taken once, in every window. Pure.

Operators can read ``runledger.requests``, so any operator (or anyone who
captured a record) can write a signed request of someone else's again, byte
for byte: its signature still verifies. A replayed uncordon, sent after a
newer cordon, made the node ready again; a replayed resume would lift a
later pause. What makes a request unique is its event id (the CLI makes it
random: ``<run or node key>/<verb>/<12 hex>``); the controller remembers
every id it has taken, applied or refused, in its model (``Model.requests``),
folded from the facts that record it on ``runledger.runs``:

- a ``RunSubmitted`` fact is the request itself (the operator's bytes);
- ``RunCancelled``, ``RunResumed``, ``NodeCordoned`` and ``NodeUncordoned``
  name the request as their ``causation_id``;
- a ``WriteRejected`` of an operator's request names it as ``rejected_event_id``.

So the memory is as durable as the log, and a restarted controller rebuilds
it with the rest of its model (``controller.model.replay``). :func:`judge`
refuses a request whose id is in it as :data:`REPLAYED` before any other rule
looks at it, whatever the run's state (running, recovering, queued, finished)
or the node's. A refusal the rejection aggregation (``controller.rejections``)
only counted leaves no record, so its id is not remembered; such a request,
replayed, is judged again by the rules that refused it.

Node operations apply in log order only: :func:`node_epoch` counts the
operations applied to a node (its ``NodeCordoned`` and ``NodeUncordoned``
facts), ``runledger node`` sends the count it saw as ``epoch``, and
:func:`judge_epoch` refuses a request that saw an older epoch as
:data:`SUPERSEDED`, so an operation decided on a view another one has
changed since is not applied over it.

Tested in tests/controller/test_replays.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set

from events.model import (
    CancelRequested,
    Event,
    NodeCordoned,
    NodeOperationRequested,
    NodeUncordoned,
    ResumeRequested,
    RunCancelled,
    RunResumed,
    RunSubmitted,
    WriteRejected,
)

REPLAYED = "replayed"
SUPERSEDED = "superseded"

# The requests an operator signs, and which are remembered by id.
OPERATOR_REQUESTS = (RunSubmitted, CancelRequested, ResumeRequested, NodeOperationRequested)
_NAMES = frozenset(t.__name__ for t in OPERATOR_REQUESTS)
# Facts the controller appends for an operator's request, naming it as their cause.
_CAUSED = (RunCancelled, RunResumed, NodeCordoned, NodeUncordoned)
NODE_OPERATIONS = (NodeCordoned, NodeUncordoned)


def request_of(record: Event) -> str | None:
    """The id of the operator's request a record on ``runledger.runs`` took, if any."""
    if isinstance(record, RunSubmitted):
        return record.header.event_id
    if isinstance(record, _CAUSED):
        return record.header.causation_id
    if isinstance(record, WriteRejected) and record.rejected_event_type in _NAMES:
        return record.rejected_event_id
    return None


def judge(taken: Set[str], request: Event) -> tuple[str, str] | None:
    """(:data:`REPLAYED`, detail) for an operator's request already taken, else None."""
    if not isinstance(request, OPERATOR_REQUESTS) or request.header.event_id not in taken:
        return None
    return REPLAYED, (
        f"{request.event_type} {request.header.event_id} of {request.run_id} was already "
        "taken (applied or refused): a request is taken once, so this copy does nothing; "
        "to ask again, send a new request (a new event id)")


def judge_epoch(current: int, request: NodeOperationRequested) -> tuple[str, str] | None:
    """(:data:`SUPERSEDED`, detail) for a node operation that saw an older epoch, else None.

    ``current`` is the node's epoch now; a request without an epoch (an older client)
    is judged by its id alone.
    """
    seen = request.epoch
    if seen is None or seen >= current:
        return None
    return SUPERSEDED, (
        f"{request.operation} of node {request.node} was decided on operation epoch {seen}, "
        f"but {current - seen} operation(s) were applied to it since (epoch {current}); "
        f"check `runledger nodes` and send `runledger node {request.operation} "
        f"{request.node}` again if it still applies")


def node_epoch(epochs: Mapping[str, int], record: Event) -> dict[str, int] | None:
    """The epochs after ``record``: a node operation's fact adds one to its node's; None
    when the record is no node operation (the mapping is unchanged)."""
    if not isinstance(record, NODE_OPERATIONS):
        return None
    return {**epochs, record.node: epochs.get(record.node, 0) + 1}


def epoch_of(node: str, records: Iterable[Event]) -> int:
    """A node's operation epoch after ``records`` (its facts, in log order): what a client
    puts in ``NodeOperationRequested.epoch``."""
    return sum(1 for r in records if isinstance(r, NODE_OPERATIONS) and r.node == node)
