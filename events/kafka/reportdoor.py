"""One door for the agents' reports: a report about node N is believed only from N's key.

Every agent holds its own Ed25519 **node key**, registered on ``runledger.keys``
by an admin to the principal ``node.<name>`` (:func:`node_principal`) with the
role ``agent`` (``runledger node enroll``), and signs every report it sends
(:data:`AGENT_REPORTS`) over the exact value bytes
(``events.signed.signing.report_message``). The broker only says that some holder of
the agent role's credentials wrote a record; which node it speaks for is what
this door decides.

:func:`judge_report` (pure) asks, of an agent's report, which node it is about
(:func:`about`): the event's ``node`` for ``AgentRegistered`` and
``AgentHeartbeatRecorded`` and ``MembersHeartbeatRecorded`` (whose members the
run's fold then requires to be placed on that node); for a ``WorkerExited`` of the run's current
generation, the node its membership places that member on (``placed``), so an
exit reported for another node's rank must carry that other node's signature,
whatever node it names (an exit of another generation, or of a run the reader
does not know, is about the node it names, and needs that node's key). It
answers ``None`` (believe it) or ``(reason, detail)``: a reason of
``events.signed.keyring.check`` (:data:`~events.signed.keyring.UNSIGNED`,
``unknown_key``, ``bad_signature``, ``revoked_key``, ``wrong_principal``: a
live key of another node, or of someone who is no node; ``wrong_role``), or
:data:`NODE_MISMATCH` (a ``WorkerExited`` signed by the member's node but naming
another). A worker's report (every other kind on ``reports``) is believed only
under its run's own key, certified by a node hosting the run
(``events.kafka.runkeys.judge_worker_report``), and then by the run's own checks in
``controller.inputs`` (generation fencing).

An unsigned agent report is refused when ``require`` is true, which the
readers set whenever the keys log has a trust anchor (every secure stack:
:func:`required`); a cluster with no keys log (a plaintext stack) takes them on
the broker's word, as before node keys existed. A badly signed one is refused
either way.

:class:`ReportDoor` is the shell every reader of reports uses (the controller's
input door, ``controller.follow``'s node reader, ``runledger nodes``): it
keeps the ring, read again from the keys log when a report names a key it does
not know or thinks revoked, and adds this judgment to
``events.authority.admit_input``, so each reader refuses exactly the same
records (the controller quarantines them; the views pass over them).

Tested in tests/events/kafka/test_reportdoor.py and tests/e2e/test_node_identity.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from events.authority import SENDERS, Role, admit_input
from events.errors import DecodeError
from events.kafka.keys import read_ring_or_empty
from events.kafka.runkeys import Hosts, judge_worker_report
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    Event,
    MembersHeartbeatRecorded,
    WorkerExited,
)
from events.record import Record
from events.signed.keyring import (
    BAD_SIGNATURE,
    REVOKED_KEY,
    UNKNOWN_KEY,
    UNSIGNED,
    WRONG_PRINCIPAL,
    WRONG_ROLE,
    KeyRing,
    check_headers,
)
from events.signed.signing import report_message

NODE_PRINCIPAL_PREFIX = "node."
AGENT_ROLE = "agent"
# What an agent reports: the node's life and the exits of the processes it ran.
AGENT_REPORTS = (AgentRegistered, AgentHeartbeatRecorded, WorkerExited, MembersHeartbeatRecorded)
# Reads of the keys log for a key the ring lacks: up to REREAD_BURST at once (nodes
# enrolled together), then one per REREAD_S, so a flood of forged keys costs no flood
# of reads.
REREAD_BURST = 8
REREAD_S = 1.0
# A WorkerExited signed by the node its member is placed on, naming another node.
NODE_MISMATCH = "node_mismatch"

# An exit -> the node the run's current membership places its member on, when the
# exit is of that generation and the reader knows the run; else None (its own node).
Placed = Callable[[WorkerExited], str | None]


def node_principal(node: str) -> str:
    """The principal a node's key is registered to: ``node.<name>``."""
    return f"{NODE_PRINCIPAL_PREFIX}{node}"


def _nowhere(event: WorkerExited) -> None:
    return None


def about(event: Event, placed: Placed = _nowhere) -> str | None:
    """The node an agent's report speaks for; None for a report that is no agent's."""
    if isinstance(event, WorkerExited):
        return placed(event) or event.node
    if isinstance(event, AgentRegistered | AgentHeartbeatRecorded | MembersHeartbeatRecorded):
        return event.node  # a member listed must be on it: the run's fold refuses it otherwise
    return None


def required(ring: KeyRing) -> bool:
    """Whether unsigned agent reports are refused: when the keys log has an anchor."""
    return ring.anchor is not None


def _unhosted(run_id: str, generation: int) -> None:
    return None


def judge_report(ring: KeyRing, record: Record, *, require: bool, placed: Placed = _nowhere,
                 hosts: Hosts = _unhosted, at: int | None = None) -> tuple[str, str] | None:
    """None when the report may be believed, else (reason, detail). Pure.

    ``at``: judge the keys as they were at that time (a reader of history, whose
    ring holds revocations made since); None: as they are now (the controller)."""
    event = record.event
    node = about(event, placed)
    if node is None:
        sender = SENDERS.get(type(event))
        if sender is not None and sender.role == Role.WORKER and sender.topic == record.topic:
            return judge_worker_report(ring, record, require=require, hosts=hosts, at=at)
        return None
    principal = node_principal(node)
    problem = check_headers(ring, record.headers, report_message(record.value),
                            principal=principal, role=AGENT_ROLE, at=at)
    if problem == UNSIGNED and not require:
        return None
    if problem is None and isinstance(event, WorkerExited) and event.node != node:
        problem = NODE_MISMATCH
    if problem is None:
        return None
    where = f"{record.topic}[{record.partition}]@{record.offset}"
    return problem, (f"{event.event_type} about node {node!r}{_member(event, node)} at "
                     f"{where}: {_meaning(problem, principal)}; nothing of it is believed")


def _member(event: Event, node: str) -> str:
    if isinstance(event, WorkerExited):
        return f" (member {event.logical_id} of run {event.run_id}, placed on {node})"
    return ""


def _meaning(problem: str, principal: str) -> str:
    enroll = (f"it must be signed by the live agent key of {principal} "
              f"(`runledger node enroll {principal[len(NODE_PRINCIPAL_PREFIX):]}` registers one)")
    return {
        UNSIGNED: f"not signed; {enroll}",
        UNKNOWN_KEY: f"signed by a key the keys log does not register; {enroll}",
        BAD_SIGNATURE: f"its signature does not verify; {enroll}",
        REVOKED_KEY: f"signed by a revoked key; {enroll}",
        WRONG_PRINCIPAL: f"signed by another principal's key; {enroll}",
        WRONG_ROLE: f"signed by a key that is not an agent key; {enroll}",
        NODE_MISMATCH: "signed by the member's node, but it names another node",
    }.get(problem, enroll)


class ReportDoor:
    """``admit_input`` and :func:`judge_report`, with a key ring kept fresh.

    ``read_ring`` reads the keys log to its end (``events.kafka.keys.read_ring``);
    ``placed`` and ``hosts`` say where a run's members run, when the reader knows
    (the controller's model). ``historic``: judge each record's keys as of its log
    time (a projection rebuilt later must believe what was believed then).
    """

    def __init__(self, read_ring: Callable[[], KeyRing], placed: Placed = _nowhere,
                 hosts: Hosts = _unhosted, *, historic: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read_ring = read_ring
        self.placed = placed
        self.hosts = hosts
        self.historic = historic
        self._clock = clock
        self.ring = read_ring()
        self._rereads, self._filled_at = float(REREAD_BURST), clock()

    def judge(self, record: Record) -> tuple[str, str] | None:
        at = record.timestamp_ms if self.historic else None
        refusal = judge_report(self.ring, record, require=required(self.ring),
                               placed=self.placed, hosts=self.hosts, at=at)
        if refusal is not None and refusal[0] in (UNKNOWN_KEY, REVOKED_KEY) and self._reread():
            # A node enrolled (or a key revoked) since the ring was read: read it again.
            self.ring = self._read_ring()
            refusal = judge_report(self.ring, record, require=required(self.ring),
                                   placed=self.placed, hosts=self.hosts, at=at)
        return refusal

    def _reread(self) -> bool:
        """Whether the keys log may be read again now (a token bucket)."""
        now = self._clock()
        self._rereads = min(float(REREAD_BURST),
                            self._rereads + (now - self._filled_at) / REREAD_S)
        self._filled_at = now
        if self._rereads < 1.0:
            return False
        self._rereads -= 1.0
        return True

    def admit(self, record: Record, size: int) -> DecodeError | None:
        """The controller's door (``clients.Admit``): ``admit_input``, then the node's key."""
        refused = admit_input(record, size)
        if refused is not None:
            return refused
        refusal = self.judge(record)
        return DecodeError(*refusal) if refusal is not None else None


def view_door(bootstrap: str, name: str, retry_s: float) -> ReportDoor:
    """The door a view of past reports uses (``runledger status``, ``logs``): the ring read
    now, each record judged as the keys were when it was appended."""
    return ReportDoor(lambda: read_ring_or_empty(bootstrap, name=name, retry_s=retry_s),
                      historic=True)
