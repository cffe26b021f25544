"""What a controller reads beyond its own partitions: the whole of ``runs`` and every node.

:class:`Follower` is a shell: a ``read_committed`` reader over every partition
of ``runledger.runs`` that first replays it (the model a controller starts
from) and then tails it, and a reader over every partition of
``runledger.reports`` that hands out only agents' node records (keyed
``node/<name>``; every other report is passed over undecoded), each through
the door of reports (``events.kafka.reportdoor``: a node record is believed only
when its node's key signed it, so a ``NodeQuarantined`` sent on ``reports``, or
a heartbeat for another node, is passed over here as the owning controller's
input door quarantines it). What is done with them is
``controller.ownership.follow``'s, which is pure. ``runs`` is read
raw (value bytes and headers), so a replay also recovers the head of each
run's hash chain (``controller.chains``).

:func:`partition_count` refuses a cluster whose ``requests``, ``reports`` and
``runs`` are not co-partitioned: one run's inputs would reach two controllers.

Tested in tests/e2e/test_multi.py and tests/e2e/test_controller.py.
"""

from __future__ import annotations

from controller.chains import Chains
from controller.errors import ControllerError
from controller.model import Draft, Model, PlanOf
from events.kafka.reader import END, LogReader, Watermarks
from events.kafka.reportdoor import ReportDoor
from events.model import Event, node_key
from events.record import Record
from events.topics import CO_PARTITIONED, REPORTS, RUNS

_NODE_PREFIX = node_key("").encode()
# One cycle reads at most this many records of each tail, so a burst of facts
# written by other controllers delays this one's own decisions by a bounded time.
_TAIL_BATCH = 5_000
_TAIL_BATCHES = 4


class NotCoPartitioned(ControllerError):
    """``requests``, ``reports`` and ``runs`` have different partition counts."""


def partition_count(bootstrap: str) -> int:
    """The partition count the co-partitioned topics share; ``NotCoPartitioned`` if none."""
    marks = Watermarks(bootstrap, CO_PARTITIONED, name="runledger-controller-topics")
    try:
        found = marks.get()
    finally:
        marks.close()
    counts = {topic: sum(1 for t, _ in found if t == topic) for topic in CO_PARTITIONED}
    if len(set(counts.values())) != 1:
        listed = ", ".join(f"{t}: {n}" for t, n in counts.items())
        raise NotCoPartitioned(
            f"topics are not co-partitioned ({listed}): a run's requests, reports and "
            f"facts must share one partition number, so every one of these topics needs "
            f"the same count (6 as created by `runledger stack up`); see docs/operating.md "
            f"'Running N controllers' for how to change a live cluster")
    return next(iter(counts.values()))


class Follower:
    """Replays then tails ``runs``; tails the node records of ``reports``."""

    def __init__(self, bootstrap: str, name: str, plan_of: PlanOf,
                 door: ReportDoor | None = None) -> None:
        self.bootstrap = bootstrap
        self.name = name
        self.plan_of = plan_of
        self.door = door
        self._runs: LogReader | None = None
        self._nodes = LogReader(
            bootstrap, [REPORTS], start=END, name=f"{name}-nodes", raw=True,
            select=lambda m: (m.key() or b"").startswith(_NODE_PREFIX))
        # The end of each partition of runs as a transactional writer sees it: past
        # open transactions, which a read_committed reader reaches once they settle.
        self._ends = Watermarks(bootstrap, [RUNS], name=f"{name}-ends",
                                config={"isolation.level": "read_uncommitted"})

    def replay(self, since: int, chains: Chains | None = None) -> Model:
        """The model of every fact on ``runs``, read from the beginning; the tail
        goes on from there. ``chains`` is rebuilt from the same records."""
        if self._runs is not None:
            self._runs.close()
        self._runs = LogReader(self.bootstrap, [RUNS], name=f"{self.name}-runs", raw=True)
        draft = Draft(Model(since=since), self.plan_of)
        if chains is not None:
            chains.reset()
        while not self._runs.caught_up:
            records = self._runs.read_records(_TAIL_BATCH, 0.5, batch=True)
            for record in records:
                draft.absorb(record.event)
            if chains is not None:
                chains.observe(records)
        return draft.freeze()

    def read(self) -> tuple[list[Record], list[Event]]:
        """Without waiting: what ``runs`` and the node records gained since the last read."""
        assert self._runs is not None, "replay first"
        facts: list[Record] = []
        for _ in range(_TAIL_BATCHES):
            got = self._runs.read_records(_TAIL_BATCH, 0.0)
            facts += got
            if not got:
                break
        # A record the door refuses is passed over: the controller that owns its
        # partition quarantines it and says why (its input door is the same).
        nodes = [r.event for r in self._nodes.read_records(_TAIL_BATCH, 0.0)
                 if self.door is None or self.door.admit(r, len(r.value)) is None]
        return facts, nodes

    def ends(self, partitions: set[int] | frozenset[int]) -> dict[int, int]:
        """The uncommitted end of each named partition of ``runs``, asked now."""
        marks = self._ends.get()
        return {p: high for (_, p), (_, high) in marks.items() if p in partitions}

    def positions(self) -> dict[int, int]:
        """How far the tail has read each partition of ``runs``, past transaction markers."""
        assert self._runs is not None, "replay first"
        out = {p: o for (_, p), o in self._runs.positions.items()}
        for (_, p), o in self._runs.reached.items():
            out[p] = max(out.get(p, 0), o)
        return out

    def close(self) -> None:
        if self._runs is not None:
            self._runs.close()
        self._nodes.close()
        self._ends.close()


def held(topics: tuple[str, ...], partitions: frozenset[int]) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of ``partitions`` in each of ``topics``."""
    return [(t, p) for t in topics for p in sorted(partitions)]

