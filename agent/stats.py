"""What a node agent counts as it works, for ``agent.metrics`` (``runledger agent --metrics``).

:class:`AgentStats` is written by the agent's threads (the heartbeat thread its
heartbeat fields, the command loop the rest) and read by scrape threads; a
lock keeps every read consistent. What it counts:

- heartbeats handed to the producer, those that failed, and when the last one
  was made (its ``occurred_at``, the agent's clock);
- commands for this node by kind (``start``, ``stop``) and by what the agent
  first made of them (:func:`decided`): ``applied`` (workers launched or
  stopped), ``rejected`` (its members reported as not launched, exit 125),
  ``deferred`` (waiting for slots; how it ends shows in the exits),
  ``ignored`` (a replay, a superseded or stale command, refused or ignored:
  nothing done) or ``unverified`` (refused by ``agent.verify``: unsigned, or
  not signed by a registered controller key);
- worker exits it reported, by outcome (:func:`exit_outcome`): ``success``
  (exit code 0), ``failure`` (another code), ``signal``, ``not_launched``
  (refused or failed to start);
- bytes the log cap dropped of its workers' logs (:class:`LogDrops`).

Tested in tests/agent/test_metrics.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.decide import Action, Defer, Ignore, Reject
from agent.logfiles import dropped
from events.model import Event, GroupStartCommanded

KINDS = ("start", "stop")
APPLIED, REJECTED, DEFERRED, IGNORED, UNVERIFIED = (
    "applied", "rejected", "deferred", "ignored", "unverified")
DECISIONS = (APPLIED, REJECTED, DEFERRED, IGNORED, UNVERIFIED)
SUCCESS, FAILURE, SIGNAL, NOT_LAUNCHED = "success", "failure", "signal", "not_launched"
OUTCOMES = (SUCCESS, FAILURE, SIGNAL, NOT_LAUNCHED)


def kind_of(command: Event) -> str:
    return "start" if isinstance(command, GroupStartCommanded) else "stop"


def decided(actions: Sequence[Action]) -> str:
    """What a decision did with its command, as the ``decision`` label says it (a stop
    that finds no worker to stop still revokes its generation: applied)."""
    for kind, said in ((Defer, DEFERRED), (Reject, REJECTED), (Ignore, IGNORED)):
        if any(isinstance(a, kind) for a in actions):
            return said
    return APPLIED


def exit_outcome(exit_code: int | None, sig: int | None, launched: bool) -> str:
    if not launched:
        return NOT_LAUNCHED
    if sig is not None:
        return SIGNAL
    return SUCCESS if exit_code == 0 else FAILURE


class LogDrops:
    """Bytes the log cap dropped of the workers' logs, as a total that never goes back.

    Each worker's count (its ``<log>.dropped``, ``agent.logrelay``) only grows; a
    running worker's is read at each scrape (:meth:`seen`), an ended one's once at
    its exit (:meth:`ended`), which moves it into the ended total. A log seen after
    its exit (a scrape racing the reap) is not counted twice.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, int] = {}
        self._ended: set[str] = set()
        self._done = 0

    def seen(self, counts: Iterable[tuple[str, int]]) -> None:
        with self._lock:
            for path, dropped in counts:
                if path not in self._ended:
                    self._live[path] = max(dropped, self._live.get(path, 0))

    def ended(self, path: str, dropped: int) -> None:
        with self._lock:
            if path in self._ended:
                return
            self._ended.add(path)
            self._done += max(dropped, self._live.pop(path, 0))

    def total(self) -> int:
        with self._lock:
            return self._done + sum(self._live.values())


@dataclass(frozen=True, slots=True)
class Counted:
    """The counters as one scrape reads them."""

    heartbeats: int
    heartbeat_errors: int
    last_heartbeat_ms: int | None
    commands: dict[tuple[str, str], int]  # (kind, decision) -> n, every pair present
    exits: dict[str, int]  # outcome -> n, every outcome present


class AgentStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heartbeats = 0
        self._heartbeat_errors = 0
        self._last_heartbeat_ms: int | None = None
        self._commands = {(k, d): 0 for k in KINDS for d in DECISIONS}
        self._exits = dict.fromkeys(OUTCOMES, 0)
        self.logs = LogDrops()

    def heartbeat(self, occurred_at: int) -> None:
        with self._lock:
            self._heartbeats += 1
            self._last_heartbeat_ms = occurred_at

    def heartbeat_failed(self) -> None:
        with self._lock:
            self._heartbeat_errors += 1

    def command(self, command: Event, decision: str) -> None:
        with self._lock:
            self._commands[kind_of(command), decision] += 1

    def exited(self, exit_code: int | None, sig: int | None, launched: bool,
               log_path: str = "") -> None:
        """A worker's exit reported; its log (if any) no longer grows: what the cap
        dropped of it is read once more and moves into the ended total."""
        with self._lock:
            self._exits[exit_outcome(exit_code, sig, launched)] += 1
        if log_path:
            cut = dropped(Path(log_path))
            self.logs.ended(log_path, cut.bytes if cut is not None else 0)

    def read(self) -> Counted:
        with self._lock:
            return Counted(self._heartbeats, self._heartbeat_errors, self._last_heartbeat_ms,
                           dict(self._commands), dict(self._exits))
