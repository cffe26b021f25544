"""A run's log written by hand with exact times, projected into DuckDB without Kafka.

The projection goes through the projector's own pure mapping (``rows_for``), so
the queries see the tables a real projector writes; only the broker is left out.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TypeVar

import duckdb

from events.model import (
    CheckpointRestored,
    CorruptionClassified,
    CorruptionSuspected,
    Event,
    HeartbeatRecorded,
    StepTimesRecorded,
)
from events.record import Record
from events.state import Checkpoint
from events.topics import REPORTS, RUNS
from projectors.tables import DDL, TABLE_OF, rows_for
from tests.events.builders import Ev, members

E = TypeVar("E", bound=Event)

MEMBERS = members("r0", "r1", node="node-a")
_REPORT_ONLY = (HeartbeatRecorded, StepTimesRecorded, CheckpointRestored)
SPEC = {"code_version": "3f1c2a9b7d4e5f60718293a4b5c6d7e8f9012345",
        "budget": {"price_per_gpu_hour": 2.5}}


@dataclass
class Timeline:
    """One run's log, event by event; every event happens now, until the clock advances."""

    run_id: str = "run-a"
    start_ms: int = 1_000_000  # the clock when the log begins
    events: list[Event] = field(default_factory=list)
    batch: int = 8  # global batch size: positions per step
    device: str | None = "cpu"  # what the ranks say they step on (None: a v1 writer)
    ev: Ev = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # The builder's clock is the timeline's: it moves only when the timeline says so.
        self.ev = Ev(self.run_id, start=self.start_ms, tick=0, ids="{run}/e{n}")

    def add(self, event: E) -> E:
        self.events.append(event)
        return event

    def advance(self, ms: int) -> None:
        self.ev.now += ms

    # -- facts -------------------------------------------------------------------------

    def submit(self, world_size: int = 2) -> None:
        self.add(self.ev.submitted(spec_digest="sha256:s", spec_json=json.dumps(SPEC),
                                   world_size=world_size, dataset_id="sha256:d"))

    def admit(self) -> None:
        self.add(self.ev.admitted(members=MEMBERS))

    def start(self, gen: int, resume: int | None = None, reason: str | None = None) -> None:
        manifest = None if resume is None else f"ck/s{resume}/manifest.json"
        self.add(self.ev.generation_started(
            gen, resume, MEMBERS,
            reason=reason or ("admitted" if resume is None else "restart"),
            resume_manifest=manifest))

    def confirm(self, gen: int) -> None:
        """Every member of ``gen`` joined (MembershipConfirmed)."""
        self.add(self.ev.confirmed(gen))

    def lose(self, gen: int, node: str = "node-b", last_seen_at: int | None = None) -> None:
        """``node`` was lost, last heard from at ``last_seen_at`` (NodeLost)."""
        seen = self.ev.now if last_seen_at is None else last_seen_at
        self.add(self.ev.node_lost(gen, node, last_seen_at=seen))

    def step(self, gen: int, step: int, ms: int = 100, wait: int = 10,
             loss: float | None = None, rank_ms: tuple[float, float] | None = None) -> None:
        """A step of ``ms`` starting now; the clock moves to its end. ``loss`` by default
        falls with the step, as a training loss does: 4 / (1 + step / 10)."""
        loss = 4.0 / (1 + step / 10) if loss is None else loss
        self.advance(ms)
        self.add(self.ev.step(gen, step, tokens=4096, loss_tokens=4000, step_time_ms=float(ms),
                              input_wait_ms=float(wait), loss=loss))
        times = rank_ms or (float(ms), float(ms))
        for m, t in zip(MEMBERS, times, strict=True):
            self.add(self.ev.step_times(gen, step, m.logical_id, times=(t,), node=m.node,
                                        input_wait_ms=(float(wait),), device=self.device))

    def checkpoint(self, gen: int, step: int, stall: int = 50,
                   counts: dict[str, int] | None = None) -> None:
        """A sync checkpoint: the loop blocks ``stall`` ms, then it is committed."""
        self.advance(stall)
        self.add(self.ev.staged(gen, step, mode="sync", stall_ms=float(stall), bytes=1 << 20,
                                backlog=0, durable_step=step))
        self.add(self.ev.committed(gen, step, manifest_path=f"ck/s{step}/manifest.json",
                                   manifest_digest=f"sha256:g{gen}s{step}"))
        position = step * self.batch
        counts = counts or {"web": position * 5 // 8, "code": position - position * 5 // 8}
        self.add(self.ev.cursor(gen, step, position, dataset_id="sha256:d", source_counts=counts,
                                mixture_targets={"web": 0.625, "code": 0.375}))

    def exit(self, gen: int, lid: str = "r1", signal: int | None = 9) -> None:
        self.add(self.ev.exited(gen, lid, exit_code=None if signal else 0, signal=signal,
                                node="node-a"))

    def fail(self, gen: int, action: str = "restart") -> None:
        self.add(self.ev.failure(gen, action, "crash:r1:signal 9", detail="r1 killed",
                                 logical_id="r1", node="node-a", backoff_ms=0,
                                 log_path="/agent/run/g1/r1.log",
                                 stderr_tail="Fatal Python error: Segmentation fault\n"))

    def fail_lost(self, gen: int, node: str = "node-b") -> None:
        """The failure the controller attributes to a lost node (after its NodeLost)."""
        self.add(self.ev.failure(gen, "restart", "infrastructure:node_lost",
                                 failure_class="infrastructure", logical_id="r1", node=node,
                                 detail=f"node {node} lost; consequences, not causes: r0 on"
                                        " node-a exited with 1", backoff_ms=0))

    def restore(self, gen: int, step: int, tier: str, lids: tuple[str, ...] = ("r0", "r1")
                ) -> None:
        """Every rank of ``gen`` loaded ``step`` from ``tier`` (a report)."""
        ckpt = Checkpoint(step, f"ck/s{step}/manifest.json", f"sha256:s{step}", gen - 1, 0)
        for lid in lids:
            self.add(self.ev.restored(gen, ckpt, lid, tier=tier))

    def suspect(self, gen: int, step: int, ranks: tuple[int, ...] = (1,),
                detector: str = "agreement") -> None:
        """A detector distrusts ``step``: ``ranks`` deviate (r0 and r1 on node-a)."""
        self.add(self.ev.event(CorruptionSuspected, gen, dict(
            step=step, detector=detector, ranks=ranks, fingerprints=("aa" * 8, "ab" * 8),
            nodes=("node-a", "node-a"), part="param:w", detail=f"{detector} at step {step}"),
            {}))

    def sdc_exit(self, gen: int) -> None:
        """Every rank exits 87 after a suspicion; the controller classifies it."""
        for m in MEMBERS:
            self.add(self.ev.exited(gen, m.logical_id, exit_code=87, signal=None,
                                    node="node-a"))
        self.add(self.ev.failure(gen, "restart", "silent_corruption:exit=87",
                                 failure_class="silent_corruption", logical_id="r0",
                                 node="node-a", detail="exit 87"))

    def classify(self, gen: int, suspected: int, step: int, verdict: str,
                 ranks: tuple[int, ...] = (1,), detector: str = "agreement") -> None:
        self.add(self.ev.event(CorruptionClassified, gen, dict(
            step=step, suspected_generation=suspected, detector=detector, verdict=verdict,
            ranks=ranks, nodes=tuple("node-a" for _ in ranks), detail=f"{verdict} by replay"),
            {}))

    def finish(self, gen: int, outcome: str = "succeeded") -> None:
        self.add(self.ev.finished(gen, outcome))

    # -- projection ------------------------------------------------------------------

    def records(self) -> list[Record]:
        out, offsets = [], {RUNS: 0, REPORTS: 0}
        for e in self.events:
            topic = REPORTS if isinstance(e, _REPORT_ONLY) else RUNS
            out.append(Record(topic, 0, offsets[topic], e.header.occurred_at, e,
                              e.header.schema_version))
            offsets[topic] += 1
        return out


def project(con: duckdb.DuckDBPyConnection, *timelines: Timeline) -> None:
    for table, columns in DDL.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")
    offsets = {RUNS: 0, REPORTS: 0}
    for tl in timelines:
        for rec in tl.records():
            # One log for all timelines: offsets run on across them.
            at = dataclasses.replace(rec, offset=offsets[rec.topic])
            offsets[rec.topic] += 1
            for row in rows_for(at):
                marks = ", ".join("?" * len(row))
                con.execute(f"INSERT INTO {TABLE_OF[type(row)].name} VALUES ({marks})", row)


def crash_and_recover(tl: Timeline) -> dict[str, int]:
    """Steps 1-25 (checkpoints at 10 and 20), r1 killed, restart from 20, steps 21-30.

    Returns the expected ETTR parts in ms, worked out by hand from the times below.
    """
    tl.submit()
    tl.advance(500)
    tl.admit()
    tl.start(1)
    tl.advance(1000)  # launch: idle
    for s in range(1, 26):
        tl.step(1, s)
        if s in (10, 20):
            tl.checkpoint(1, s)
    tl.advance(20)  # loop overhead until the kill: other
    tl.exit(1)
    tl.advance(30)  # detection
    tl.fail(1)
    tl.advance(100)
    tl.start(2, resume=20)
    tl.advance(400)  # relaunch and restore: recovery
    for s in range(21, 31):
        tl.step(2, s)
    tl.checkpoint(2, 30)
    tl.advance(100)  # teardown: idle
    tl.finish(2)
    return {"productive": 30 * 90, "input_stall": 30 * 10, "lost_work": 5 * 100,
            "checkpoint": 3 * 50, "detection": 30, "recovery": 500, "idle": 1100,
            "other": 20}


def sdc_run(tl: Timeline, verdict: str | None = "node_fault") -> None:
    """Checkpoints at 10, 15 and 20, then 20 revoked for a bad shard; agreement fails at
    step 22 (never committed); generation 2 resumes from 15 and the replay classifies
    the suspicion (unless ``verdict`` is None)."""
    tl.submit()
    tl.admit()
    tl.start(1)
    for s in range(1, 22):
        tl.step(1, s)
        if s in (10, 15, 20):
            tl.checkpoint(1, s)
    tl.add(tl.ev.revoked(1, 20, reason="shard_checksum"))
    tl.advance(100)
    tl.suspect(1, 22)
    tl.advance(10)
    tl.sdc_exit(1)
    tl.start(2, resume=15)
    tl.step(2, 16)
    if verdict is not None:
        tl.classify(2, 1, 22, verdict)
