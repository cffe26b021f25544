"""The agent's half of node-aggregated liveness: its members' beat files, one record per run.

A worker this agent launched writes its heartbeats to a beat file
(``events.beatfile``; the agent named it in ``RUNLEDGER_BEAT_FILE``). Every
interval the agent reads the files of its live workers and sends, per run and
generation, one ``MembersHeartbeatRecorded`` listing the members whose beat
moved since its last look, each with its step and whether its session closed.
A member whose file did not move is left out, so its silence reaches the
controller as it is; nothing is said for it that it did not say.

A restarted agent adopts the workers its last incarnation launched and left
running (:func:`adopted`, from its applied-commands file; :func:`orphans`): it
reads their beat files too, and reports one only once it moves, so a worker
outlives its agent's restart as it did when workers heartbeated on their own,
and a dead one's file left behind says nothing.

The interval is the shortest heartbeat interval of the workers it watches
(each run's ``heartbeat.interval_s``, passed in its start command), so a member
is forwarded at most one interval after it beat: the controller's heartbeat
timeout (which a spec keeps above its interval) holds as before, with one
interval more of delay at worst. With no worker to watch the thread waits
``IDLE_S``.

:func:`collect` (pure) decides what to send from what was read;
:class:`BeatForwarder` (the shell, a thread of the agent) reads, sends and
counts. A record is signed by the node's key like every agent report; the
controller's door believes it only from this node, and the run's fold only
for members placed on this node.

Tested in tests/agent/test_beats.py and, through real agents and workers, in
tests/e2e/test_heartbeats.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path

from agent.decide import AgentState, WorkerKey
from events import beatfile
from events.beatfile import Beat
from events.model import Event, Header, MemberBeat, MembersHeartbeatRecorded

log = logging.getLogger("runledger.agent")

IDLE_S = 1.0  # how long the thread waits when no worker beats through this agent
ORPHAN_INTERVAL_S = 0.25  # how often a restarted agent reads the files of workers it adopted
MIN_INTERVAL_S = 0.05  # a floor under a spec's interval: the files are read this often at most


@dataclass(frozen=True, slots=True)
class Collected:
    """What one look found: the members to report per (run, generation), and each
    watched worker's last seen beat count (the next look's ``last``)."""

    beats: Mapping[tuple[str, int], tuple[MemberBeat, ...]]
    seen: Mapping[WorkerKey, int]


def collect(read: Iterable[tuple[WorkerKey, Beat | None]],
            last: Mapping[WorkerKey, int], prime: Set[WorkerKey] = frozenset()) -> Collected:
    """The members whose beat moved since ``last``, grouped by run and generation, in
    logical id order. A worker no longer watched drops out of ``seen``. A key in
    ``prime`` seen for the first time is only counted: a beat file left by a worker
    this agent did not launch says nothing until it moves."""
    groups: dict[tuple[str, int], list[MemberBeat]] = {}
    seen: dict[WorkerKey, int] = {}
    for key, beat in read:
        if beat is None:  # no file yet (still starting) or not a beat: its silence
            if key in last:
                seen[key] = last[key]
            continue
        seen[key] = beat.seq
        if key in prime and key not in last:
            continue
        if last.get(key) != beat.seq:
            groups.setdefault((key.run_id, key.generation), []).append(
                MemberBeat(key.logical_id, beat.step, beat.closing))
    return Collected({k: tuple(sorted(v, key=lambda b: b.logical_id))
                      for k, v in sorted(groups.items())}, seen)


def adopted(state: AgentState) -> list[tuple[str, int]]:
    """The generations whose workers a restarted agent still speaks for: started on this
    node (its applied-commands file says so, ``agent.applied``), still the run's newest
    and never stopped. Their workers outlive a ``kill -9`` of the agent (their own
    sessions) and go on writing their beat files."""
    return sorted((run, gen) for run, gen in state.started
                  if gen == state.newest.get(run) and gen > state.revoked.get(run, -1))


def orphans(base_dir: str, generations: Iterable[tuple[str, int]],
            launched: Set[WorkerKey]) -> list[tuple[WorkerKey, str, float]]:
    """The beat files of ``generations`` under ``base_dir`` whose workers this agent did
    not launch, as watched entries (read every ``ORPHAN_INTERVAL_S``: their interval is
    the command's, which a restarted agent no longer holds)."""
    out = []
    for run, gen in generations:
        where = Path(beatfile.path_for(base_dir, run, gen, "_")).parent
        try:
            names = sorted(p.name for p in where.iterdir() if not p.name.startswith("."))
        except OSError:
            continue
        for name in names:
            key = WorkerKey(run, gen, name)
            if key not in launched:
                out.append((key, str(where / name), ORPHAN_INTERVAL_S))
    return out


def interval_of(watched: Sequence[tuple[WorkerKey, str, float]]) -> float:
    """How long to wait before the next look: the shortest interval watched."""
    if not watched:
        return IDLE_S
    return max(MIN_INTERVAL_S, min(interval for _, _, interval in watched))


class BeatForwarder:
    """Reads the beat files of ``watched()`` every interval and ``send``s their records."""

    def __init__(self, node: str, incarnation: str, send: Callable[[Event], None],
                 watched: Callable[[], list[tuple[WorkerKey, str, float]]],
                 clock: Callable[[], int],
                 adopted: Callable[[], Set[WorkerKey]] = frozenset) -> None:
        self.node = node
        self.incarnation = incarnation  # distinguishes this start's event ids
        self._send = send
        self._watched = watched
        self._clock = clock
        self._adopted = adopted  # keys of workers it did not launch (collect's prime)
        self._last: Mapping[WorkerKey, int] = {}
        self._sent = 0
        self.records = 0  # records sent (agent.metrics reads it)
        self.members = 0  # member beats they carried

    def run(self, stopping: threading.Event) -> None:
        """Look, send, wait an interval; until ``stopping`` is set."""
        while True:
            watched = self._watched()
            try:
                self.look(watched)
            except Exception:
                # A missed look is a late heartbeat, and the next one catches up.
                log.exception("member heartbeats not sent")
            if stopping.wait(interval_of(watched)):
                return

    def look(self, watched: list[tuple[WorkerKey, str, float]]) -> int:
        """One look at every watched file; the records sent."""
        found = collect(((key, beatfile.read(path)) for key, path, _ in watched), self._last,
                        self._adopted())
        self._last = found.seen
        for (run_id, generation), beats in found.beats.items():
            self._sent += 1
            eid = f"{run_id}/g{generation}/beats/{self.node}/{self.incarnation}/{self._sent}"
            self._send(MembersHeartbeatRecorded(
                header=Header(eid, run_id, generation, self._clock(), f"agent/{self.node}"),
                node=self.node, beats=beats))
            self.records += 1
            self.members += len(beats)
        return len(found.beats)
