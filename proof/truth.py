"""The simulator's second reading of the log: a fresh fold, and what the world knows.

``proof.props`` checks the model's rules (P1-P6). :class:`Truth` checks what
the run's log must show against what the simulated world knows happened,
after every controller transaction, in the order the records were appended:

- F  every fact appended is accepted by a fold of its own (``events.fold``
  over the appended facts alone, from the run's submission): a fact the
  fold refuses is in the log yet changes nothing, which no reader can tell;
- C  when a checkpoint commits from a proposal that carries a data cursor,
  the cursor moves to that step in the same transaction (and, P3, never to
  a step that is not committed);
- G  admission and every restart start a whole gang: as many members as the
  plan's world size, distinct logical ids, at most the plan's slots on a
  node, and only nodes whose agents the world has and that no fact has
  quarantined (and none released since);
- S  a checkpoint commits only with a shard report of its own generation
  accepted, for that step, from every member of that generation;
- P8 a generation starts only after a stop of the one before it was
  appended for every node it ran on (one live generation at a time: the old
  one is told to stop before the next is launched);
- V  a refusal is true: the coordinator's report of a step the world trained
  under the live generation, past every step of it read before, is accepted
  (a stale, repeated or overtaken report may be refused, a true one never);
- H  a hang is true: a member called hung (``hang:no_heartbeat``) was not heard
  from for its timeout (the heartbeat timeout, or the start timeout before
  its first beat), counted from its generation's start and when the
  controller last read a heartbeat of it (a beat counts when it arrives: a
  late one is no older evidence), and its exit was not read before; once
  another member's exit was read, not before the exit grace has passed since
  the later of that exit and the timeout; and a generation called stalled
  (``hang:no_progress``) had no exit read and no progress (its start, its
  confirmation, a step) for longer than the stall timeout, counted from the
  controller's own start too;
- Q  a node is quarantined for failures exactly at the failure counted
  against it (as ``controller.inventory.count_failures`` counts) that makes
  ``NODE_QUARANTINE_AFTER``, in the transaction that classifies it, and
  such a quarantine names that count;
- M  a generation is confirmed Running only once the controller has read a
  heartbeat or an exit of every member, with every member counted;
- O  a run succeeds only when the controller has read exit 0 of every member
  of its last generation and every rank of it the world has is done;
- D  a hang is found: a member of the live generation that the controller has
  neither heard from nor read an exit of, past its timeout, the exit grace
  and ``DETECT_SLACK_MS``, counted from the newest of its heartbeats, its
  generation's start and the controller's own start, has had its generation
  failed (or the run ended); and a Running generation with no exit and no
  step past the plan's stall timeout and ``DETECT_SLACK_MS``, counted from
  its last progress and the controller's own start, has been failed too;
- K  a stop is obeyed: once a node's agent has read a stop of a generation,
  no worker of it (or of an older one) that this incarnation of the agent
  launched on the node is still running; and once it has launched a newer
  generation there, none of an older one (:func:`stop_obeyed`, the world's
  own account);
- B  a restart waits out its backoff: the next generation starts no earlier
  than the failure's classification plus the ``backoff_ms`` it recorded;
- U  the fold's bookkeeping: ``updated_at`` is the time of the newest fact
  it accepted, and a generation started by an admission with nothing to
  resume is Starting, any other (a restart, a resize, a requeued run
  admitted again with a checkpoint) Recovering; generations are numbered
  one after another; and a run already queued is queued again only for
  another reason (a fact that repeats the state says nothing);
- Z  silent data corruption is judged as the world knows it: a verdict on a
  suspicion whose replay miscomputed nothing is ``transient`` on exactly the
  ranks and nodes that miscomputed the suspect step; one where every wrong
  state, before and in the replay, was computed on one faulty node is
  ``node_fault`` on that node (the replay moved the suspect rank, so the
  node's fault shows on another rank), and the node is quarantined in the
  same transaction; a node quarantined for corruption miscomputed the suspect
  step both in the suspicion and in its replay (faulty, or wrong twice, which
  no verdict can tell apart); a checkpoint revoked for a suspicion is at or
  after its step; no checkpoint commits with a shard written from
  corrupted state; and an exit 87 is not classified while the group's
  suspicion, sent, is still on its way, fewer than every member's exit
  read and less than ``START_EXIT_WAIT_MS`` after the first (the wait that
  keeps the restart from fencing the suspicion out);
- J  a failure is the job's own (class ``job``) exactly when the world's job
  failed: an agent refused to launch it (``job:launch``, with the launch
  error the controller read), or a worker of the generation was launched
  after the job's code broke (``job:start_exit``); a node lost under a
  generation, which takes every rank down with one exit code, never is. And
  when every worker of a generation raised at import, the controller read
  each member's exit 1 and no step, it read no registration of a member's
  agent since the generation started (an agent's restart, perhaps its
  node's), and it has not restarted since, the failure is the job's;
- I  the checkpoint interval is the log's: a staging changes the automatic
  interval exactly when and as ``proof.cadence.expected`` says (Young's T
  from the stall, the failures so far and the step time between two
  stagings of one generation), and every start command carries the
  interval the log holds;
- N, X an operator's node operation is judged as the log stood (refused
  when decided on an older epoch, else the fact it asks for), and a request
  is taken once (``proof.nodes``); G keeps admission off cordoned and
  drained nodes, and restarts off drained ones and cordoned ones they were
  not on;
- W  the run makes progress: a fact appended at least every ``QUIET_STEPS``
  simulated steps until it ends (or waits, queued, for an operator to free
  a node that quarantines took from its gang), and it ends within the
  simulator's step bound (a seed that would hang is a violation that names
  it).

Tested in tests/proof/test_sim.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.emitter import Out
from controller.inventory import count_failures
from controller.liveness import EXIT_GRACE_MS
from controller.run_decide import NODE_QUARANTINE_AFTER
from controller.runplan import RunPlan
from controller.sdc_verdict import NODE_FAULT, TRANSIENT
from events.fold import apply
from events.fold_info import INFORMATIONAL
from events.fold_sdc import CORRUPTION_SUSPECTED
from events.model import (
    AgentRegistered,
    CheckpointRevoked,
    CheckpointStaged,
    CorruptionClassified,
    CorruptionSuspected,
    Event,
    FailureClassified,
    GenerationStarted,
    GroupStartCommanded,
    GroupStopCommanded,
    HeartbeatRecorded,
    ManifestCommitted,
    ManifestProposed,
    Member,
    MembershipConfirmed,
    NodeQuarantined,
    NodeQuarantineExpired,
    NodeUncordoned,
    RunCancelled,
    RunFinished,
    RunQueued,
    ShardWritten,
    StepCommitted,
    StepReplayed,
    WorkerExited,
    WriteRejected,
)
from events.state import RunState, Status
from events.topics import COMMANDS, RUNS
from proof import cadence, verdicts
from proof.nodes import Operations
from proof.props import Violation
from proof.world import ONCE, Agent, World

# A run that appends no fact but rejections for this many steps is stuck (the longest
# quiet stretch of 10,000 unplanted seeds is far below it: docs/verification.md).
QUIET_STEPS = 1_500
# How long past a member's timeout and the exit grace its hang may take to be found: the
# controller's tick, a lost node's wait (controller.lost) and the stop commands' delivery.
DETECT_SLACK_MS = 20_000


@dataclass
class Truth:
    plan: RunPlan
    nodes: frozenset[str]
    run_id: str
    world: World = field(default_factory=World)  # what happened, as Z reads it
    state: RunState | None = None
    members: dict[int, tuple[Member, ...]] = field(default_factory=dict)  # by generation
    shards: dict[tuple[int, int], set[str]] = field(default_factory=dict)  # (gen, step)
    stopped: dict[int, set[str]] = field(default_factory=dict)  # gen -> nodes told to stop
    proposals: dict[str, ManifestProposed] = field(default_factory=dict)  # by event id
    staged: dict[int, CheckpointStaged] = field(default_factory=dict)  # gen -> newest fact
    read_steps: dict[int, int] = field(default_factory=dict)  # gen -> highest step read
    heard: dict[tuple[int, str], int] = field(default_factory=dict)  # newest beat read
    codes: dict[tuple[int, str], int | None] = field(default_factory=dict)  # exits read
    first_exit: dict[int, int] = field(default_factory=dict)  # gen -> its first exit's time
    refused: set[int] = field(default_factory=set)  # generations with a launch error read
    progress: dict[int, int] = field(default_factory=dict)  # gen -> its newest progress fact
    # node -> failures counted against it, as the inventory counts them (Q)
    failures: Mapping[str, int] = field(default_factory=dict)
    ops: Operations = field(default_factory=Operations)  # cordons and requests (N, X)
    registered: dict[str, int] = field(default_factory=dict)  # node -> its agent's, read at
    started: dict[int, int] = field(default_factory=dict)  # gen -> GenerationStarted at
    failed: set[int] = field(default_factory=set)  # generations with a FailureClassified
    ended: bool = False
    quarantined: set[str] = field(default_factory=set)  # nodes the facts hold quarantined
    sdc: dict[str, CorruptionSuspected | StepReplayed] = field(default_factory=dict)  # read
    since: int = 0  # when the controller last began listening (a restart)
    not_before: int = 0  # the newest failure's backoff ends (B)
    quiet: int = 0  # steps since the last fact that was not a rejection
    longest: int = 0  # the longest such stretch so far

    def reading(self, e: Event) -> None:
        """A report the controller is about to read: a proposal, what its commit must
        carry (C); a suspicion or a replay, what the facts it causes answer (Z)."""
        self.ops.reading(e, self.since)
        if isinstance(e, ManifestProposed):
            self.proposals[e.header.event_id] = e
        elif isinstance(e, CorruptionSuspected | StepReplayed):
            self.sdc[e.header.event_id] = e

    def read(self, e: Event, live: bool, outs: list[Out], now: int) -> None:
        """The controller read report ``e`` at ``now``, of a live generation or not, and
        appended ``outs`` (V; and what H and D count from)."""
        self.ops.judged(e, outs, now)
        key = (e.generation, getattr(e, "logical_id", ""))
        if isinstance(e, AgentRegistered):
            self.registered[e.node] = now
        if isinstance(e, HeartbeatRecorded):
            self.heard[key] = max(self.heard.get(key, 0), now)
        elif isinstance(e, WorkerExited):
            self.codes[key] = e.exit_code if e.signal is None else -e.signal
            # As the controller dates it: the sender's time, unless later than its receipt.
            at = min(e.header.occurred_at, now)
            self.first_exit[e.generation] = min(self.first_exit.get(e.generation, at), at)
            if e.launch_error:
                self.refused.add(e.generation)
        if not isinstance(e, StepCommitted):
            return
        before = self.read_steps.get(e.generation, 0)
        self.read_steps[e.generation] = max(before, e.step)
        if not live or e.step <= before:
            return
        for _, x in outs:
            if isinstance(x, WriteRejected) and x.rejected_event_id == e.header.event_id:
                raise Violation("V", f"step {e.step} of live generation {e.generation}, past "
                                     f"step {before}, refused: {x.reason} ({x.detail})")

    def appended(self, outs: list[Out]) -> None:
        """Check one transaction's records, in the order they were appended."""
        commits: list[ManifestCommitted] = []
        blamed: list[str] = []  # nodes a node_fault verdict names
        for topic, e in outs:
            if topic == COMMANDS and isinstance(e, GroupStopCommanded):
                self.stopped.setdefault(e.generation, set()).add(e.node)
            if topic == COMMANDS and isinstance(e, GroupStartCommanded):
                cadence.judge_start(self.plan, self.state, e)
            if topic == RUNS:
                self._node_fact(e)
            if topic != RUNS or e.run_id != self.run_id:
                continue
            if not isinstance(e, WriteRejected):
                self.quiet = 0
            match e:
                case GenerationStarted():
                    if e.header.occurred_at < self.not_before:
                        raise Violation("B", f"generation {e.generation} starts at "
                                             f"{e.header.occurred_at}, inside the backoff that "
                                             f"ends at {self.not_before}")
                    self._gang(e)
                    self._predecessor_stopped(e)
                    self.started[e.generation] = e.header.occurred_at
                case FailureClassified():
                    verdicts.classified(self, e)
                    self.failed.add(e.generation)
                    self.not_before = e.header.occurred_at + (e.backoff_ms or 0)
                case RunFinished() | RunCancelled():
                    if isinstance(e, RunFinished) and e.outcome == "succeeded":
                        verdicts.success_is_true(self)
                    self.ended = True
                case MembershipConfirmed():
                    verdicts.joined(self, e)
                case CheckpointStaged():
                    cadence.judge_staging(self.plan, self.state,
                                          self.staged.get(e.generation), e, outs)
                    self.staged[e.generation] = e
                case ManifestCommitted():
                    self._own_shards(e)
                    self._clean(e)
                    commits.append(e)
                case CorruptionClassified():
                    self._verdict_true(e)
                    if e.verdict == NODE_FAULT:
                        blamed += e.nodes
                case CheckpointRevoked() if e.reason == CORRUPTION_SUSPECTED:
                    cause = self.sdc.get(e.header.causation_id or "")
                    if cause is None or e.step < cause.step:
                        raise Violation("Z", f"checkpoint step {e.step} revoked for a suspicion "
                                             f"at step {cause.step if cause else 'unknown'}")
            self._fold(e)
            if isinstance(e, GenerationStarted | MembershipConfirmed | StepCommitted):
                at = self.progress.get(e.generation, 0)
                self.progress[e.generation] = max(at, e.header.occurred_at)
            if isinstance(e, ShardWritten):
                self.shards.setdefault((e.generation, e.step), set()).add(e.logical_id)
        self._settled(commits, blamed)

    def _settled(self, commits: list[ManifestCommitted], blamed: list[str]) -> None:
        """What a whole transaction owes: each commit's cursor (C), the quarantine of a node
        at its Nth counted failure (Q) and of every node a node_fault verdict names (Z)."""
        for c in commits:
            self._cursor_follows(c)
        spared = [n for n, k in self.failures.items()
                  if k >= NODE_QUARANTINE_AFTER and n not in self.quarantined]
        if spared:
            raise Violation("Q", f"{', '.join(sorted(spared))} reached "
                                 f"{NODE_QUARANTINE_AFTER} failures and is not quarantined")
        free = sorted(set(blamed) - self.quarantined)
        if free:
            raise Violation("Z", f"a node_fault verdict names {', '.join(free)}, which the "
                                 "same transaction does not quarantine")

    def stepped(self, over: bool, step: int, bound: int) -> None:
        """One simulated step went by (W)."""
        self.quiet += 1
        self.longest = max(self.longest, self.quiet)
        if not over and self.quiet >= QUIET_STEPS:
            status = self.state.status.value if self.state else "unknown"
            raise Violation("W", f"no fact but rejections for {self.quiet} steps at step {step}; "
                                 f"the run is {status}")
        if not over and step >= bound:
            raise Violation("W", f"the run has not ended after {bound} steps")

    def watch(self, now: int) -> None:
        """A silent member of the live generation must have been found by now (D)."""
        gen = max(self.started, default=0)
        if not gen or gen in self.failed or self.ended:
            return
        st = self.state
        if st is not None and st.status == Status.RUNNING and not st.exits:
            since = max(st.last_progress_at, self.since)
            if now - since > self.plan.stall_timeout_ms + DETECT_SLACK_MS:
                raise Violation("D", f"generation {gen} Running with no step since {since}, "
                                     f"{now - since} ms, and no failure is classified")
        for m in self.members.get(gen, ()):
            if (gen, m.logical_id) in self.codes:
                continue
            since, limit = verdicts.timeout(self, gen, m.logical_id)
            since = max(since, self.since)
            if now - since > limit + EXIT_GRACE_MS + DETECT_SLACK_MS:
                raise Violation("D", f"{m.logical_id} of generation {gen} unheard since {since}, "
                                     f"{now - since} ms, and no failure is classified")

    def _fold(self, e: Event) -> None:
        if self.state is None and isinstance(e, INFORMATIONAL):
            return  # a rejection of a request for a run not yet submitted: no run to fold
        t = apply(self.state, e)
        if not t.verdict.accepted:
            raise Violation("F", f"{e.event_type} {e.header.event_id} was appended, and a fold "
                                 f"of the log refuses it: {t.verdict.reason} "
                                 f"({t.verdict.detail})")
        newest = max(self.state.updated_at if self.state else 0, e.header.occurred_at)
        if t.state is not None and t.state.updated_at != newest:
            raise Violation("U", f"after {e.event_type} {e.header.event_id} the run's updated_at "
                                 f"is {t.state.updated_at}, its newest fact is at {newest}")
        if isinstance(e, RunQueued) and self.state is not None and \
                self.state.status == Status.QUEUED and self.state.queue_reason == e.reason:
            raise Violation("U", f"RunQueued {e.header.event_id} repeats the reason the run is "
                                 f"already queued for: {e.reason}")
        if isinstance(e, GenerationStarted):
            last = max((g for g in self.started if g != e.generation), default=0)
            if e.generation != last + 1:
                raise Violation("U", f"generation {e.generation} starts after generation {last}")
        if isinstance(e, GenerationStarted) and t.state is not None:
            fresh = e.reason == "admitted" and not e.resume_step
            want = Status.STARTING if fresh else Status.RECOVERING
            if t.state.status != want:
                raise Violation("U", f"generation {e.generation}, started by {e.reason!r} "
                                     f"from step {e.resume_step or 0}, leaves the run "
                                     f"{t.state.status.value}, not {want.value}")
        self.state = t.state

    def _gang(self, e: GenerationStarted) -> None:
        ids = [m.logical_id for m in e.members]
        per_node = Counter(m.node for m in e.members)
        crowded = sorted(n for n, k in per_node.items() if k > self.plan.slots_per_node)
        strangers = sorted(set(per_node) - (self.nodes - self.quarantined)) + \
            self.ops.unplaceable(e, self.members.get(e.generation - 1, ()))
        if len(ids) != self.plan.world_size or len(set(ids)) != len(ids) or crowded \
                or strangers:
            raise Violation("G", f"generation {e.generation} starts {len(ids)} members "
                                 f"({', '.join(f'{m.logical_id}@{m.node}' for m in e.members)}) "
                                 f"for a gang of {self.plan.world_size}, "
                                 f"{self.plan.slots_per_node} slot(s) a node"
                                 + (f"; over its slots: {', '.join(crowded)}" if crowded else "")
                                 + (f"; no such node, quarantined or cordoned: "
                                    f"{', '.join(strangers)}"
                                    if strangers else ""))
        self.members[e.generation] = e.members

    def _predecessor_stopped(self, e: GenerationStarted) -> None:
        before = self.members.get(e.generation - 1)
        if before is None:
            return
        nodes = {m.node for m in before}
        missing = sorted(nodes - self.stopped.get(e.generation - 1, set()))
        if missing:
            raise Violation("P8", f"generation {e.generation} starts while generation "
                                  f"{e.generation - 1} was never told to stop on "
                                  f"{', '.join(missing)}")

    def _node_fact(self, e: Event) -> None:
        self.ops.fact(e)
        self.failures = count_failures(self.failures, e)
        match e:
            case NodeQuarantined():
                if e.reason.startswith("silent data corruption"):
                    self._blame_true(e)
                elif e.reason != f"{self.failures.get(e.node, 0)} failures on the node" or \
                        self.failures.get(e.node, 0) < NODE_QUARANTINE_AFTER:
                    raise Violation("Q", f"{e.node} quarantined ({e.reason}) after "
                                         f"{self.failures.get(e.node, 0)} failures counted")
                self.quarantined.add(e.node)
            case NodeUncordoned() | NodeQuarantineExpired():
                self.quarantined.discard(e.node)

    def _blame_true(self, e: NodeQuarantined) -> None:
        """A node quarantined for corruption miscomputed the suspect step both in the
        suspicion and in its replay: faulty, or (no verdict can tell) wrong twice."""
        replay = self.sdc.get(e.header.causation_id or "")
        wrong = [] if not isinstance(replay, StepReplayed) else [
            {n for n, _ in self.world.miscomputed.get((g, replay.step), {}).values()}
            for g in (replay.suspected_generation, replay.generation)]
        if not wrong or not all(e.node in nodes for nodes in wrong):
            raise Violation("Z", f"{e.node} quarantined ({e.reason}); the world's faulty nodes: "
                                 f"{sorted(self.world.faulty) or 'none'}, and it did not "
                                 "miscompute the step in both the suspicion and its replay")

    def _verdict_true(self, e: CorruptionClassified) -> None:
        """The verdict against who miscomputed the step, before and in the replay."""
        replay = self.sdc.get(e.header.causation_id or "")
        if not isinstance(replay, StepReplayed):
            raise Violation("Z", f"verdict {e.verdict} on step {e.step} not caused by a replay")
        miss = self.world.miscomputed
        before = miss.get((e.suspected_generation, e.step), {})
        again = miss.get((replay.generation, e.step), {})
        if len(before) >= len(replay.fingerprints):
            return  # every rank miscomputed it: no rank holds the reference to judge by
        if not again:
            ranks = tuple(sorted(before))
            want = (TRANSIENT, ranks, tuple(sorted({n for n, _ in before.values()})))
            got = (e.verdict, e.ranks, e.nodes)
        elif any(k == ONCE for _, k in again.values()) \
                or len({n for n, _ in [*before.values(), *again.values()]}) != 1:
            return  # a one-off in the replay too, or faults on two nodes: no single truth
        else:
            want = (NODE_FAULT, (), (next(iter(again.values()))[0],))
            got = (e.verdict, (), e.nodes)
        if got != want:
            raise Violation("Z", f"step {e.step} of generation {e.suspected_generation} judged "
                                 f"{e.verdict} (ranks {list(e.ranks)}, nodes {list(e.nodes)}); "
                                 f"miscomputed: {before} before, {again} in the replay; the "
                                 f"world says {want[0]} on {list(want[2])}")

    def _clean(self, e: ManifestCommitted) -> None:
        corrupt = sorted(set(self.world.storage.manifests.get(e.manifest_path, ()))
                         & self.world.storage.corrupt)
        if corrupt:
            raise Violation("Z", f"step {e.step} committed with shards written from corrupted "
                                 f"state: {', '.join(corrupt)}")

    def _own_shards(self, e: ManifestCommitted) -> None:
        members = self.members.get(e.generation, ())
        have = self.shards.get((e.generation, e.step), set())
        missing = sorted(m.logical_id for m in members if m.logical_id not in have)
        if not members or missing:
            raise Violation("S", f"step {e.step} of generation {e.generation} committed without "
                                 f"a shard of that generation from "
                                 f"{', '.join(missing) or 'any member'}")

    def _cursor_follows(self, c: ManifestCommitted) -> None:
        cause = self.proposals.get(c.header.causation_id or "")
        if cause is None or cause.position is None:
            return
        cursor = self.state.cursor if self.state else None
        if cursor is None or cursor.step != c.step:
            raise Violation("C", f"step {c.step} committed from a proposal with a data cursor; "
                                 f"the cursor is at "
                                 f"{cursor.step if cursor else 'no step'}")


def stop_obeyed(world: World, agent: Agent) -> None:
    """After ``agent`` read a command: if it was a stop, nothing it stops still runs; if a
    start it launched, no older generation of the run it launched still runs (K)."""
    cmd = world.commands[agent.read - 1] if agent.read else None
    if not isinstance(cmd, GroupStopCommanded | GroupStartCommanded) or cmd.node != agent.node:
        return
    mine = [w for w in world.live() if w.node == agent.node and w.epoch == agent.epoch
            and w.key.run_id == cmd.run_id]
    if isinstance(cmd, GroupStartCommanded):
        if not any(w.gen == cmd.generation for w in mine):
            return  # not launched here: ignored, rejected or deferred
        left = [str(w.key) for w in mine if w.gen < cmd.generation]
    else:
        left = [str(w.key) for w in mine if w.gen <= cmd.generation]
    if left:
        raise Violation("K", f"agent {agent.node} read {cmd.command_id}; still running: "
                             f"{', '.join(left)}")
