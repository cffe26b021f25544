"""What the simulated workers and agents do, one step at a time (the world is ``proof.world``).

Each function performs one step of one actor and returns a line for the
trace. Workers report through the world's in-flight list; agents decide with
the real ``agent.decide`` and perform its actions here, as ``agent.service``
does: a ``Launch`` becomes a :class:`~proof.world.Worker` with the checkpoint
candidates the start command carries (parsed by ``events.workerenv``), a
``Terminate`` ends one and reports its exit, a ``Reject`` reports exit 125.

A worker's step is the real session's in outline: once the last rank of
the group has taken it, the coordinator reports the replay it was started
for (``StepReplayed``), then either a disagreement among the ranks' states
(``CorruptionSuspected``, after which every rank exits 87) or the step
(``StepCommitted``), as ``worker.sdcstep`` orders them.

Known limits of the real agent are modelled as they are: a worker outlives
its agent's crash and its exit is then never reported, and an agent that
crashes after acting on a command but before committing its offset reads it
again when it restarts. Its applied-commands file (``agent.applied``, the real
``entry`` and ``restore``) keeps it from launching that start twice, unless
the node came back with a new disk: then it launches it again.

Tested in tests/proof/test_sim.py.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.applied import entry, restore
from agent.decide import (
    REJECTED_EXIT_CODE,
    Defer,
    Launch,
    Reject,
    Terminate,
    decide,
    lookahead,
    worker_exited,
)
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    CheckpointRestored,
    CheckpointStaged,
    CheckpointVerificationFailed,
    CheckpointWriteFailed,
    HeartbeatRecorded,
    ManifestProposed,
    ShardWritten,
    StepCommitted,
    WorkerExited,
    node_key,
)
from events.sdc import CorruptionSuspected, StepReplayed, deviating
from events.sdcenv import SdcReplay
from events.workerenv import RANKS, CheckpointEnv, parse_ranks
from proof.world import (
    FAULTY,
    OK,
    ONCE,
    STEPS,
    TORN,
    Agent,
    Worker,
    World,
    manifest_digest,
    manifest_path,
    shard_path,
)

# How long a rank waits on its group (a rendezvous, a barrier, a collective) before its
# process gives up: the simulated counterpart of torch.distributed's timeout, longer than
# the plan's stall timeout, so a deadlock is the controller's to find first.
COLLECTIVE_TIMEOUT_MS = 60_000
# The exit code of a rank whose group found corrupted state (worker.errors.CorruptionDetected).
CORRUPTION_EXIT = 87
# The exit code of a rank whose checkpoint write failed (worker.errors.EXIT_STORAGE, EX_IOERR).
STORAGE_EXIT = 74
# Called with a digest and the storage's verdict on it just before a coordinator
# loads a checkpoint: the simulator checks P4 there (proof.props.restored).
OnRestore = Callable[[str, str | None], None]


def work(world: World, w: Worker, on_restore: OnRestore) -> str:
    """One step of a worker: restore, write a shard, propose, train a step, or exit; and its
    heartbeat, when one is due (a thread of its own in the real session)."""
    if w.broken:
        return exit_worker(world, w, 1, None, "the job raises at import")
    if world.now - w.beat_at >= 500:
        w.beat_at = world.now
        world.send(HeartbeatRecorded(header=world.header(w.gen, str(w.key)), logical_id=w.lid,
                                     node=w.node, step=w.step), w.node)
    if w.stuck:
        return _wait(world, w, "a collective that never returns")
    if w.suspected:
        return exit_worker(world, w, CORRUPTION_EXIT, None, "its group found corrupted state")
    if w.phase == "restoring":
        return _restore(world, w, on_restore)
    peers = [world.peer(w.gen, lid) for lid in w.group]
    if any(p is not None and p.phase == "exited" and not p.clean for p in peers):
        return exit_worker(world, w, 1, None, "a peer is gone: the collective failed")
    ready = [p for p in peers if p is not None]
    if len(ready) < len(peers):
        return _wait(world, w, "its peers to join")
    if any(p.step > w.step + 1 for p in ready):
        # In lockstep no rank is more than a step ahead: this is a rank launched again
        # beside its orphan, whose group went on without it. It cannot join a collective
        # already under way, so it waits until its timeout, as a real rendezvous would.
        return _wait(world, w, "a group that has gone on without it")
    interval, since = world.cadence[w.gen]
    if w.step > w.written and w.step - since >= interval:
        return _write(world, w)
    if w.rank == 0 and w.written == w.step > w.proposed:
        if all(p.written >= w.step for p in ready):
            return _propose(world, w)
        return _wait(world, w, f"the shards of step {w.step}")
    if w.written == w.step > since:
        return _wait(world, w, f"the coordinator's proposal of step {w.step}")
    if w.step >= STEPS:
        return exit_worker(world, w, 0, None, "done")
    if any(p.step < w.step or p.phase == "restoring" for p in ready):
        return _wait(world, w, f"its peers at step {w.step}")
    return _step(world, w)


def _wait(world: World, w: Worker, what: str) -> str:
    """A rank blocked on its group: a collective's timeout ends the wait (the process exits
    non-zero, as torch.distributed's does), so a rank whose peer is gone never waits forever."""
    if world.now - w.stepped_at > COLLECTIVE_TIMEOUT_MS:
        return exit_worker(world, w, 1, None, f"timed out waiting for {what}")
    return f"{w.key} waits for {what}"


def _restore(world: World, w: Worker, on_restore: OnRestore) -> str:
    if w.rank != 0:
        start = world.resumed.get(w.gen)
        if start is None:
            return _wait(world, w, "the coordinator's restore")
        return _resume(world, w, start, "follows the coordinator")
    if w.tried < len(w.candidates):
        step, path, digest = w.candidates[w.tried]
        problem = world.storage.problem(path)
        if problem is not None:
            world.send(CheckpointVerificationFailed(
                header=world.header(w.gen, str(w.key)), step=step, manifest_path=path,
                manifest_digest=digest, logical_id=w.lid, reason=problem,
                detail="verified before loading"), w.node)
            w.tried += 1
            return f"{w.key} finds {digest} fails: {problem}"
        on_restore(digest, problem)
        world.send(CheckpointRestored(
            header=world.header(w.gen, str(w.key)), step=step, manifest_path=path,
            manifest_digest=digest, logical_id=w.lid, verify_ms=1.0, load_ms=1.0,
            fell_back=w.tried), w.node)
        return _resume(world, w, step, f"loads {digest}")
    if w.candidates:
        return exit_worker(world, w, 1, None, "no usable checkpoint")
    return _resume(world, w, 0, "starts from scratch")


def _resume(world: World, w: Worker, step: int, how: str) -> str:
    if w.rank == 0:  # where the group's steps and checkpoint cadence begin
        world.resumed[w.gen] = step
        world.cadence.setdefault(w.gen, (w.interval, step))
    w.phase, w.step, w.written, w.proposed = "training", step, step, step
    return f"{w.key} {how} at step {step}"


def _write(world: World, w: Worker) -> str:
    path = shard_path(w.gen, w.step, w.lid)
    if world.faults.pop("fail", 0):
        world.send(CheckpointWriteFailed(header=world.header(w.gen, str(w.key)), step=w.step,
                                         logical_id=w.lid, stage="shards",
                                         detail="OSError: simulated"), w.node)
        return exit_worker(world, w, STORAGE_EXIT, None, f"the write of {path} failed")
    if w.rank == 0:  # the coordinator staged the state: the stall Young's C is made of
        world.send(CheckpointStaged(header=world.header(w.gen, str(w.key)), step=w.step,
                                    mode="sync", stall_ms=float(50 + (w.gen * 131 + w.step * 71)
                                                                % 400),
                                    waited_ms=0.0, bytes=1 << 20, backlog=0), w.node)
    torn, lost = bool(world.faults.pop("tear", 0)), bool(world.faults.pop("lose", 0))
    if not lost:  # the last write of a path is what it holds
        world.storage.shards[path] = TORN if torn else OK
        # Whether its state is corrupt, as far as the group can know: an orphan beside its
        # rank's relaunch (a modelled limit of the agent) is outside the group's agreement
        # check, and what its state holds is not the group's.
        if world.peer(w.gen, w.lid) is w:
            if w.corrupt:
                world.storage.corrupt.add(path)
            else:
                world.storage.corrupt.discard(path)
    world.storage.acked.add(path)
    w.written = w.step
    world.send(ShardWritten(header=world.header(w.gen, str(w.key)), step=w.step,
                            logical_id=w.lid, path=path, bytes=1 << 20, crc32c=w.step),
               w.node, world.faults.pop("slow", 0))
    return f"{w.key} writes {path}{' (torn)' if torn else ' (lost)' if lost else ''}"


def _propose(world: World, w: Worker) -> str:
    path = manifest_path(w.gen, w.step)
    world.storage.manifests[path] = tuple(shard_path(w.gen, w.step, lid) for lid in w.group)
    w.proposed = w.step
    # The group takes the interval the log set last, from this checkpoint on (the real
    # coordinator broadcasts its watcher's with the verdict; here, with the proposal).
    world.cadence[w.gen] = (world.interval or world.cadence[w.gen][0], w.step)
    if world.faults.pop("rot", 0):  # a shard decays at rest: only a restore finds it
        world.storage.shards[shard_path(w.gen, w.step, w.group[-1])] = TORN
    world.send(ManifestProposed(
        header=world.header(w.gen, str(w.key)), step=w.step, manifest_path=path,
        manifest_digest=manifest_digest(w.gen, w.step), dataset_id="ds", epoch=0,
        position=w.step * 64, source_counts={"web": w.step * 40, "code": w.step * 24}),
        w.node)
    return f"{w.key} proposes {path}"


def _step(world: World, w: Worker) -> str:
    w.step += 1
    w.stepped_at = world.now
    kind = (ONCE if w.glitch == w.step
            else FAULTY if world.faulty.get(w.node) == w.step else None)
    if kind is not None:
        w.corrupt = True
        world.miscomputed.setdefault((w.gen, w.step), {})[w.rank] = (w.node, kind)
    line = f"{w.key} trains step {w.step}{' (miscomputed)' if kind else ''}"
    # The group is each rank's newest incarnation (an orphan that an agent's restart
    # launched again trains beside it, its own reports fenced like any): checked once
    # every rank has taken the step, once a step.
    group = [world.peer(w.gen, lid) for lid in w.group]
    ranks = [p for p in group if p is not None]
    if (world.peer(w.gen, w.lid) is not w or len(ranks) < len(group)
            or any(p.step != w.step for p in ranks) or world.checked.get(w.gen, 0) >= w.step):
        return line
    world.checked[w.gen] = w.step
    return f"{line}; {_check(world, ranks, w.step)}"


def fingerprint(w: Worker) -> str:
    """What the rank holds after its step: one value on every right rank; a wrong one
    names the step, rank and node, so a node that miscomputes the same rank's step twice
    computes the same wrong value (a deterministic fault)."""
    return f"x{w.step}r{w.rank}@{w.node}" if w.corrupt else f"s{w.step}"


def _check(world: World, ranks: list[Worker], step: int) -> str:
    """The last rank has taken ``step``: the coordinator reports a replay it was asked
    for, compares every rank's state (agreement, every step) and, on a finding, reports
    it and every rank exits 87; else it reports the step (``worker.sdcstep``)."""
    head, gen = ranks[0], ranks[0].gen
    prints = tuple(fingerprint(p) for p in ranks)
    nodes = tuple(p.node for p in ranks)
    said = []
    if head.replay is not None and head.replay.step == step:
        world.send(StepReplayed(header=world.header(gen, str(head.key)), step=step,
                                suspected_generation=head.replay.generation,
                                fingerprints=prints, nodes=nodes), head.node)
        said.append(f"replays step {step} of generation {head.replay.generation}")
    if len(set(prints)) > 1:
        world.send(CorruptionSuspected(
            header=world.header(gen, str(head.key)), step=step, detector="agreement",
            ranks=deviating(prints), fingerprints=prints, nodes=nodes, part="params",
            detail=f"the replicas disagree at step {step}"), head.node)
        for p in ranks:
            p.suspected = True
        world.suspicions.setdefault(gen, world.now)
        return "; ".join([*said, f"suspects step {step}: {', '.join(prints)}"])
    took = max(1, min(100, world.now - world.emitted.get(gen, 0)))
    world.emitted[gen] = world.now
    world.send(StepCommitted(header=world.header(gen, str(head.key)), step=step,
                             tokens=64, loss_tokens=60, step_time_ms=float(took),
                             input_wait_ms=float(took // 10), loss=2.0), head.node)
    return "; ".join([*said, f"step {step} agrees"])


def exit_worker(world: World, w: Worker, code: int | None, sig: int | None, why: str) -> str:
    """A worker ends; its agent reports the exit if it is the incarnation that launched it."""
    w.phase, w.clean = "exited", code == 0
    a = world.agents[w.node]
    if a.up and a.epoch == w.epoch:
        a.state = worker_exited(a.state, w.key)
        world.send(WorkerExited(header=world.header(w.gen, f"agent/{a.node}"), logical_id=w.lid,
                                node=w.node, exit_code=code, signal=sig), a.node)
    return f"{w.key} exits {code if sig is None else -sig}: {why}"


def agent_step(world: World, a: Agent) -> str:
    """The agent decides the next command it has not read, and performs the decision."""
    cmd = world.commands[a.read]
    d = decide(a.config, a.state, cmd, world.now)
    if any(isinstance(x, Defer) for x in d.actions):
        a.state = d.state
        return f"agent {a.node} defers {cmd.header.event_id}"
    line = entry(a.state, d.state, cmd)
    if line is not None:
        a.applied.append(line)  # written before acting on it, as agent.service does
    a.state, a.read = d.state, a.read + 1
    done = []
    for act in d.actions:
        match act:
            case Launch(key=key):
                env = CheckpointEnv.from_environ(act.command_env)
                world.workers.append(Worker(
                    key, a.node, act.worker_env.rank, parse_ranks(act.command_env[RANKS]),
                    env.candidates, replay=SdcReplay.from_environ(act.command_env),
                    interval=env.interval_steps, broken=world.broken, epoch=a.epoch,
                    beat_at=world.now,
                    stepped_at=world.now))
                world.emitted.setdefault(key.generation, world.now)  # its steps begin after
                done.append(f"launch {key}")
            case Terminate(key=key):
                for w in world.live():
                    if w.key == key and w.node == a.node and w.epoch == a.epoch:
                        done.append(exit_worker(world, w, None, 15, act.reason))
                a.state = worker_exited(a.state, key)
            case Reject(key=key):
                world.send(WorkerExited(header=world.header(key.generation, f"agent/{a.node}"),
                                        logical_id=key.logical_id, node=a.node,
                                        exit_code=REJECTED_EXIT_CODE,
                                        launch_error=act.launch_error), a.node)
                done.append(f"reject {key}")
    return f"agent {a.node} reads {cmd.header.event_id}: {'; '.join(done) or 'nothing to do'}"


def agent_beat(world: World, a: Agent, register: bool = False) -> str:
    h = world.header(0, f"agent/{a.node}", node_key(a.node))
    busy = len(a.state.running)
    if register:
        world.send(AgentRegistered(header=h, node=a.node, slots=1, domain=a.node), a.node)
    else:
        world.send(AgentHeartbeatRecorded(header=h, node=a.node, slots=1, domain=a.node,
                                          busy_slots=busy), a.node)
    return f"agent {a.node} {'registers' if register else 'beats'}"


def agent_restart(world: World, a: Agent, replays_last: bool) -> str:
    """The agent restarts from its committed offset and its applied-commands file, its
    workers orphaned (still running)."""
    a.epoch += 1
    a.state = restore(a.config, a.applied, f"{a.node}'s applied-commands file")
    a.read = max(0, a.read - 1) if replays_last else a.read
    a.state = lookahead(a.config, a.state, world.commands[a.read:])
    a.up = True
    return agent_beat(world, a, register=True) + f" again, from command {a.read}"


def deadlock(world: World) -> str:
    """Every running rank of the newest generation blocks in a collective that never
    returns (a deadlock): their heartbeat threads go on, their steps stop."""
    gen = max((w.gen for w in world.live()), default=0)
    stuck = [w for w in world.live() if w.gen == gen and w.phase == "training"]
    for w in stuck:
        w.stuck = True
    return f"generation {gen} deadlocks: {', '.join(str(w.key) for w in stuck) or 'nobody'}"


def corrupt(world: World, w: Worker, node_fault: bool) -> str:
    """Silent data corruption at the rank's next step: a one-off, or its node miscomputes
    that step for good (whichever rank computes it there; one faulty node a world)."""
    if node_fault and not world.faulty:
        world.faulty[w.node] = w.step + 1
        return f"node {w.node} will miscompute step {w.step + 1} whenever it computes it"
    w.glitch = w.step + 1
    return f"{w.key} will miscompute step {w.step + 1} once"


def lose_node(world: World, a: Agent, wiped: bool) -> str:
    """The node is gone: its agent and its workers, with no word to anyone. ``wiped``:
    it comes back with a new disk, so its agent remembers no command it applied."""
    a.up = False
    if wiped:
        a.applied.clear()
    for w in world.live():
        if w.node == a.node:
            w.phase = "exited"
    return f"node {a.node} is lost{', its disk with it' if wiped else ''}"
