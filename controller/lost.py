"""A lost node, and when a generation's failure is its. Pure.

A host lost with its agent (power, kernel panic, the machine SIGKILLed) takes
its workers down without a word: no exit is reported, for the agent that would
report it is gone too. The members elsewhere then fail on their own: their
collective sees the peer vanish and they exit non-zero some seconds later, so
the first failure the controller sees is a survivor's exit, and judged alone it
would blame the survivor's node. ``controller.run_decide`` (rule 4) asks
:func:`judge` about every failure it finds before classifying it.

A node of the live generation is **lost** when none of its members has exited
(an exit is its agent's report, so the agent lived) and both its agent and
each of those members have been silent for more than ``LOST_AFTER_MS`` (no
agent heartbeat, no worker heartbeat; silences count from when this controller
began listening, as heartbeat timeouts do). The failure is then the lost
node's, whatever member's exit or silence revealed it: a ``NodeLost`` fact
naming the node, when it was last heard from and its members comes first, then
a failure of class ``infrastructure``, signature ``infrastructure:node_lost``,
attributed to that node (its quarantine count, not the survivors'), whose
detail names the survivors' exits as consequences.

A node is **undecided** for a failure shown by an exit when it is not lost and
nothing of it has reported since the exit: neither its agent nor any of its
members (at least ``REPORTED_AFTER_MS`` later: a dead node's last report, read
from another partition, may arrive with the exit). Not lost means not yet
``LOST_AFTER_MS`` silent, counted from the newest of those reports, the same
clock that makes it lost: an agent past its silence whose member beat later is
undecided until that member is silent too (judged by the agent alone, it was
neither, and a tick in between blamed the survivor's exit on the survivor).
The exit's classification waits for it (:data:`WAIT`): a live agent reports
within its interval (2 s), a dead one falls past ``LOST_AFTER_MS``. The wait
is bounded: at most ``LOST_AFTER_MS + REPORTED_AFTER_MS`` after the exit
(``LOST_GRACE_MS``), and in a healthy cluster one agent heartbeat interval,
so a single rank's crash is still classified within seconds and blamed on its
own node. A member's heartbeat silence waits the same way while its own node
went quiet with it (a heartbeat timeout may be shorter than ``LOST_AFTER_MS``: the
harness's 3 s against 6 s, where a loaded machine's survivors exit later than
the timeout); a stall or a start timeout waits for nothing.

What it cannot tell: a controller that reads the reports topic more than
``LOST_AFTER_MS`` behind (a node's agent and workers all unheard because the
controller lags, not because they died) would call that node lost; the same
limit already decides where an elastic run restarts (``elastic.FRESH_MS``).

``LOST_AFTER_MS`` (6 s: three of an agent's default 2 s heartbeats) is the
default of the controller's ``NodePolicy.silence_ms`` (``runledger controller
--node-silence-s``), which :func:`judge` takes as ``after_ms``: a fleet too large
for every agent to report every 2 s sets its agents' ``--heartbeat-interval``
longer and this window to three of them (docs/performance.md, "Scale").

Tested in tests/controller/test_lost.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from controller import elastic, policy
from controller.exits import Evidence
from controller.inventory import Inventory
from events.base import by_node
from events.model import Member

# An agent and its workers this long silent have lost the node: three agent
# heartbeats, as an elastic run's placement counts a node gone (elastic.FRESH_MS).
# The default of the controller's NodePolicy.silence_ms, which a fleet whose agents
# heartbeat less often raises (judge's ``after_ms``).
LOST_AFTER_MS = elastic.FRESH_MS
REPORTED_AFTER_MS = elastic.REPORTED_AFTER_MS
# The longest an exit's classification waits for an undecided node.
LOST_GRACE_MS = LOST_AFTER_MS + REPORTED_AFTER_MS
SIGNATURE = "infrastructure:node_lost"


@dataclass(frozen=True, slots=True)
class Lost:
    """A node of the generation that disappeared: what ``NodeLost`` records."""

    node: str
    last_seen_at: int  # its agent's or its members' last report, whichever is later (ms)
    members: tuple[str, ...]  # the run's members on it (logical ids)
    consequences: tuple[str, ...]  # the failures elsewhere that followed, as people read them


class _Wait:
    def __repr__(self) -> str:
        return "WAIT"


WAIT: Final = _Wait()


@dataclass(frozen=True, slots=True)
class Found:
    lost: Lost
    failure: policy.Failure


def judge(members: Sequence[Member], exits: Mapping[str, int | None],
          heartbeats: Mapping[str, int], evidence: Evidence, inventory: Inventory,
          failure: policy.Failure, now: int, since: int,
          after_ms: int = LOST_AFTER_MS) -> Found | _Wait | None:
    """Whose ``failure`` is: a lost node's (:class:`Found`), its own (None), or not yet
    known (:data:`WAIT`, only for a failure shown by an exit). ``after_ms``: how long a
    node's silence makes it lost (the controller's ``NodePolicy.silence_ms``)."""
    placed = by_node(members)
    exited_nodes = {m.node for m in members if m.logical_id in exits}
    lost, undecided = [], []
    for node in sorted(placed.keys() - exited_nodes):
        agent = inventory.nodes.get(node)
        if agent is None:
            continue  # never registered here: nothing to judge its silence by
        on = [m.logical_id for m in placed[node]]
        seen = max([agent.last_seen, *(heartbeats.get(lid, 0) for lid in on)])
        if now - max(seen, since) > after_ms:
            lost.append(Lost(node, seen, tuple(on), _consequences(members, exits)))
        else:
            undecided.append((node, seen))
    if lost:
        return Found(lost[0], _failure(lost[0], now))
    note = evidence.exits.get(failure.logical_id or "")
    if note is None or failure.logical_id not in exits:
        return _silence(failure, heartbeats, undecided)
    if any(seen < note.at + REPORTED_AFTER_MS for _, seen in undecided):
        return WAIT
    return None


def _silence(failure: policy.Failure, heartbeats: Mapping[str, int],
             undecided: Sequence[tuple[str, int]]) -> _Wait | None:
    """A member's heartbeat silence waits while its own node went quiet with it: nothing
    of the node (its agent, its other members) heard since the member's last heartbeat
    (and ``REPORTED_AFTER_MS``), and the node not yet ``LOST_AFTER_MS`` silent. A spec's
    heartbeat timeout may be shorter than ``LOST_AFTER_MS`` (3 s against 6 s), and on a
    loaded machine the survivors' exits may come later than it: without the wait the
    dead node's member would be called hung.
    A live agent reports within its interval, so a hang on a live node waits at most
    that long; any other silence (a stall, a start timeout) waits for nothing."""
    if not failure.signature.startswith(policy.NO_HEARTBEAT) or failure.node is None:
        return None
    quiet_since = heartbeats.get(failure.logical_id or "", 0)
    if any(node == failure.node and seen < quiet_since + REPORTED_AFTER_MS
           for node, seen in undecided):
        return WAIT
    return None


def _consequences(members: Sequence[Member], exits: Mapping[str, int | None]) -> tuple[str, ...]:
    out = []
    for m in members:
        code = exits.get(m.logical_id, 0)
        if code:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
            out.append(f"{m.logical_id} on {m.node} {how}")
    return tuple(out)


def _failure(lost: Lost, now: int) -> policy.Failure:
    after = "; ".join(lost.consequences)
    detail = (f"node {lost.node} lost: its agent and members {', '.join(lost.members)} silent"
              f" for {now - lost.last_seen_at} ms (last heard at {lost.last_seen_at})")
    if after:
        detail += f"; consequences, not causes: {after}"
    return policy.Failure("infrastructure", SIGNATURE, detail, lost.members[0], lost.node)
