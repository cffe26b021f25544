"""The world the simulator (``proof.sim``) runs the real core in: storage, workers, agents.

Everything here is a model and plain data: the shell's parts that the real
system has as Kafka, files and OS processes. The decisions stay the real
code's: a worker is launched only because ``agent.decide`` said so, with the
checkpoint candidates the controller's start command carries, parsed by
``events.workerenv``; what a worker reports is judged by the controller
(``controller.reconcile``) and its fold (``events.fold``).

- :class:`Storage`: shard files and manifests, by path. A write can be torn
  (acknowledged, its bytes wrong), lost (acknowledged, then gone): only a
  restore's verification finds either; or fail (nothing written, the worker
  reports ``CheckpointWriteFailed``). A shard written from corrupted state
  verifies (its bytes are what was written): only the world knows it is wrong.
- :class:`Worker`: one member of one generation. The coordinator (rank 0)
  restores: the committed candidates newest first, each verified against the
  storage before it loads, as ``worker.restore.choose`` does; the other ranks
  resume where it did. Ranks step in lockstep (a collective) and write a shard
  every interval (the start command's; :attr:`World.cadence`); once every
  rank's write is over the coordinator writes the manifest and proposes it
  with the data cursor, and the group takes the interval the log set last
  for the next one (every rank at the same boundary, as the real session's
  broadcast does; the other ranks wait for it). A run with the automatic
  interval (:func:`plan`, ``auto``) has the coordinator report each staging
  (``CheckpointStaged``, a stall drawn from its generation and step). A paused worker is
  a zombie in waiting: woken, it goes on as if nothing happened and never
  checks its fence.
  Silent data corruption: a rank miscomputes a step once (a transient), or a
  faulty node miscomputes one step whenever any rank computes it there. The
  ranks' fingerprints of every step are compared once the last rank has taken
  it (the agreement detector, every step): the coordinator reports
  ``CorruptionSuspected`` and every rank exits 87, as ``worker.sdcstep`` does;
  a generation started with ``RUNLEDGER_SDC_REPLAY`` reports ``StepReplayed``
  at the step it names. The job's own code can break (:attr:`World.broken`):
  every worker launched from then on exits 1 before its first heartbeat, as
  an exception at import does. The world records who miscomputed what
  (:attr:`World.miscomputed`), which ``proof.truth`` holds the verdicts to.
- :class:`Agent`: one node's agent: its memory (``agent.decide.AgentState``),
  its applied-commands file (``agent.applied``'s lines, which a restart
  restores and a node's new disk loses) and how far it has read the
  commands. A partitioned node's agent reads nothing and its workers'
  reports wait until the partition heals.
- :class:`Flight`: a report on its way to the controller, from when the
  broker has it.
- :class:`World`: all of it, the commands the controller appended, the
  simulated clock, and the ids every report gets.

Tested in tests/proof/test_sim.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.decide import AgentConfig, AgentState, WorkerKey
from controller.checkpoints import AutoInterval
from controller.policy import RETRY_CLASSES
from controller.runplan import RunPlan
from controller.spec.parts import RetryPolicy
from events.model import Event, Header
from events.sdcenv import SdcReplay
from events.workerenv import CheckpointEnv

RUN = "sim-run"
NODES = ("n1", "n2", "n3")
STEPS = 12  # the run's last step
INTERVAL = 3  # a checkpoint every INTERVAL steps (at first, where the interval is automatic)
MTBF_PRIOR_S = 20.0  # the automatic interval's prior: Young's T of 1-4 simulated steps
ROOT = "sim://ckpt"
OK, TORN = "ok", "torn"
ONCE, FAULTY = "once", "faulty"  # how a rank came to miscompute a step


def plan(auto: bool = False) -> RunPlan:
    """The simulated run's plan: two ranks, one per node, retries for every class; with
    ``auto``, the checkpoint interval is the controller's (from ``INTERVAL`` steps)."""
    retry = {c: RetryPolicy(attempts=5, backoff_base_s=0.5, backoff_cap_s=1.0,
                            escalate_after=5) for c in RETRY_CLASSES}
    return RunPlan(world_size=2, argv=("train",), slots_per_node=1, heartbeat_timeout_ms=4_000,
                   stall_timeout_ms=30_000, start_timeout_ms=8_000,
                   cancel_authority=frozenset({"oncall"}), retry=retry,
                   checkpoint=CheckpointEnv(root=ROOT, interval_steps=INTERVAL,
                                            rollback_window=3, dataset_id="ds"),
                   auto_interval=AutoInterval(mtbf_prior_s=MTBF_PRIOR_S, measured_cost_s=None,
                                              initial_interval_steps=INTERVAL) if auto else None)


def agent_config(node: str) -> AgentConfig:
    return AgentConfig(node=node, slots=1, bootstrap="sim:9092", allowed_roots=(ROOT,))


def shard_path(gen: int, step: int, logical_id: str) -> str:
    return f"{ROOT}/g{gen}/s{step}/{logical_id}.distcp"


def manifest_path(gen: int, step: int) -> str:
    return f"{ROOT}/g{gen}/s{step}/manifest.json"


def manifest_digest(gen: int, step: int) -> str:
    return f"sha256:g{gen}s{step}"


@dataclass
class Storage:
    shards: dict[str, str] = field(default_factory=dict)  # path -> OK or TORN
    manifests: dict[str, tuple[str, ...]] = field(default_factory=dict)  # -> its shards
    acked: set[str] = field(default_factory=set)  # shard writes the store acknowledged
    corrupt: set[str] = field(default_factory=set)  # shards written from corrupted state

    def problem(self, manifest: str) -> str | None:
        """Why a checkpoint does not verify (a reason of ``VERIFY_REASONS``), or None."""
        files = self.manifests.get(manifest)
        if files is None:
            return "manifest_missing"
        for path in files:
            if path not in self.shards:
                return "shard_missing"
            if self.shards[path] != OK:
                return "shard_checksum"
        return None


@dataclass
class Worker:
    key: WorkerKey
    node: str
    rank: int
    group: tuple[str, ...]  # every member's logical id, rank order
    candidates: tuple[tuple[int, str, str], ...]  # newest first: (step, manifest, digest)
    phase: str = "restoring"  # restoring, training, exited
    step: int = 0
    tried: int = 0  # candidates the coordinator has tried
    written: int = 0  # the last step whose shard this worker's write is over
    interval: int = INTERVAL  # the checkpoint interval its start command gave
    proposed: int = 0  # the coordinator's last proposed step
    paused: bool = False
    stuck: bool = False  # blocked in a collective that never returns: it beats, never steps
    replay: SdcReplay | None = None  # the suspicion this generation recomputes, if any
    glitch: int = 0  # a step this rank miscomputes once (a transient fault), 0: none
    corrupt: bool = False  # its state is wrong: it miscomputed a step it still builds on
    suspected: bool = False  # its group found corruption: it exits 87 at its next move
    clean: bool = False  # exited 0: done, not gone
    broken: bool = False  # launched after the job's code broke: it raises before any step
    epoch: int = 0  # the incarnation of its agent that launched it
    beat_at: int = 0  # its last heartbeat
    stepped_at: int = 0  # when its last step ended

    @property
    def gen(self) -> int:
        return self.key.generation

    @property
    def lid(self) -> str:
        return self.key.logical_id


@dataclass
class Agent:
    node: str
    config: AgentConfig
    state: AgentState = field(default_factory=AgentState)
    read: int = 0  # commands read and committed (an index into the commands log)
    up: bool = True  # False: the node is lost (its agent and workers are gone)
    partitioned: bool = False  # cut off from the broker until it heals
    cut_until: int = 0  # a long partition heals no earlier than this
    epoch: int = 0  # incarnations so far: a restart forgets the workers it launched
    # Its applied-commands file (agent.applied): a restart begins from it, so a start it
    # re-reads is not launched twice; a node that comes back with a new disk has none.
    applied: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Flight:
    event: Event
    node: str  # where it was sent from ("" for an operator's request)
    at: int = 0  # the broker has it from this time on (a slow send holds it back)


@dataclass
class World:
    storage: Storage = field(default_factory=Storage)
    workers: list[Worker] = field(default_factory=list)  # every one launched, in order
    agents: dict[str, Agent] = field(
        default_factory=lambda: {n: Agent(n, agent_config(n)) for n in NODES})
    flight: list[Flight] = field(default_factory=list)
    commands: list[Event] = field(default_factory=list)
    resumed: dict[int, int] = field(default_factory=dict)  # generation -> restored step
    now: int = 1_000_000
    faults: dict[str, int] = field(default_factory=dict)  # armed storage faults: tear, fail
    faulty: dict[str, int] = field(default_factory=dict)  # node -> the step it miscomputes
    # (generation, step) -> rank -> (node, ONCE or FAULTY): every miscomputed step
    miscomputed: dict[tuple[int, int], dict[int, tuple[str, str]]] = field(default_factory=dict)
    emitted: dict[int, int] = field(default_factory=dict)  # gen -> its last step report at
    checked: dict[int, int] = field(default_factory=dict)  # gen -> the last step compared
    # gen -> (interval, the step it counts from): the group's checkpoint cadence, set where
    # the coordinator resumed and again at each of its proposals
    cadence: dict[int, tuple[int, int]] = field(default_factory=dict)
    interval: int = 0  # the interval the newest CheckpointIntervalChanged set (0: none yet)
    broken: bool = False  # the job's own code is broken: every worker launched now fails
    suspicions: dict[int, int] = field(default_factory=dict)  # gen -> its first suspicion sent
    _ids: int = 0

    def header(self, gen: int, producer: str, run_id: str = RUN) -> Header:
        self._ids += 1
        return Header(f"{producer}/{self._ids}", run_id, gen, self.now, producer)

    def send(self, event: Event, node: str, hold: int = 0) -> None:
        self.flight.append(Flight(event, node, self.now + hold))

    def deliverable(self) -> list[int]:
        """Indexes of the reports the broker has: a partitioned node's wait, and so does
        a report held back by a slow send."""
        cut = {a.node for a in self.agents.values() if a.partitioned}
        return [i for i, f in enumerate(self.flight) if f.node not in cut and f.at <= self.now]

    def live(self) -> list[Worker]:
        """Running workers, in launch order."""
        return [w for w in self.workers if w.phase != "exited"]

    def peer(self, gen: int, logical_id: str) -> Worker | None:
        """The newest incarnation of a member (an agent restarted before it committed a
        start launches that start again, beside the orphan of the first launch)."""
        found = [w for w in self.workers if w.gen == gen and w.lid == logical_id]
        return found[-1] if found else None
