"""The node agent's decisions, as a pure function of its memory and one command.

``decide(config, state, command, now_ms) -> Decision(state, actions)``: no I/O,
no clock (``now_ms`` is passed in), so every rule about duplicates, revoked
generations and slots is tested without a broker or a process. The shell in
``agent.service`` performs the actions and tells the state about exits
with :func:`worker_exited`.

Rules for ``GroupStartCommanded`` of run R, generation G, id C, in this order:

1. another node's command: ignored; C already applied: refused as
   :data:`REPLAYED`;
2. a start for (R, G) already handled (launched or rejected): refused as
   :data:`REPLAYED`, so a re-issued command with a new id still launches
   nothing twice;
3. G revoked (a stop for G or newer was seen): refused as :data:`SUPERSEDED`;
4. G older than the newest generation any command named for R: refused as
   :data:`SUPERSEDED`;
5. issued more than ``max_start_age_ms`` ago: ignored, so an agent that
   replays old commands (a new consumer group, a reused node name) does not
   resurrect finished runs;
6. no member on this node: ignored. A run id or logical id that breaks the
   naming rule, a checkpoint root or resume manifest with a ``..`` segment or
   outside the agent's allowed roots (``events.names``), a ``code.workdir``
   outside them and the allowed workdirs, an invalid rank contract
   (``events.workerenv``), or, with a non-empty ``--allow`` list, an ``env``
   that sets a loader variable: every member is rejected
   (``WorkerExited`` with exit code 125) and nothing is launched. (Whether
   ``argv[0]`` is allowed depends on the file it resolves to: the shell judges
   that at launch, ``agent.allow``.) A path or
   program the agent may not use is the spec's error, not the node's: its
   rejection carries a ``launch_error`` that names the field, its value and
   the fix (``agent.confine``), which the controller classifies as ``job``;
7. more members than free slots: the command is deferred (``Defer``: the
   shell decides it again shortly) until it is ``slot_wait_ms`` old, then
   every member is rejected with 125; at once if it exceeds the node's slots.
   Stopped workers free their slots only when they exit (SIGKILL comes after
   the grace period), and a stop for another run may sit on another partition
   not yet read, so a controller that stops one run and starts another on the
   same slots must not see a spurious failure. A gang is all or nothing: half
   a group only burns slots;
8. otherwise older generations of R still running here are terminated (a new
   generation fences the old one; their slots count as free) and each member
   is launched.

``GroupStopCommanded`` for generation G marks G revoked for R and terminates
every worker of R with generation <= G on this node; a stop whose id was
already applied is refused as :data:`REPLAYED`.

What rules 1-4 judge by (the ids applied, the newest generation started and
stopped per run) outlives the agent's process: the shell appends each applied
command to ``agent.applied``'s file before acting on it and a restarted agent
starts from that memory, so a signed start replayed byte for byte to it starts
no second group beside the workers that survived it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from os.path import isabs

from agent.confine import Options, refusal
from events import beatfile
from events.model import Event, GroupStartCommanded, GroupStopCommanded, Member
from events.workerenv import (
    HEARTBEAT_INTERVAL_S,
    RANKS,
    WorkerEnv,
    WorkerEnvError,
    parse_interval,
    parse_ranks,
)
from events.workerlog import worker_log_path

# The exit code reported for a member the agent refused to launch; 125 is what
# shells and container runtimes use for "the launcher failed", never the worker.
REJECTED_EXIT_CODE = 125

# Named refusals (``Ignore.refused``): the command is genuine but already applied
# (its id, or its run's generation, was acted on), or a newer one overtook it.
REPLAYED = "replayed"
SUPERSEDED = "superseded"


@dataclass(frozen=True, slots=True)
class WorkerKey:
    run_id: str
    generation: int
    logical_id: str

    def __str__(self) -> str:
        return f"{self.run_id}/g{self.generation}/{self.logical_id}"


@dataclass(frozen=True, slots=True)
class AgentConfig:
    node: str
    slots: int
    bootstrap: str
    heartbeat_interval_s: float = 2.0
    max_start_age_ms: int = 300_000
    # How long a start that does not fit waits for slots; longer than the stop grace.
    slot_wait_ms: int = 15_000
    # How many command ids to remember; rules 2-4 cover anything older.
    seen_limit: int = 4096
    # Where a start command may point its workers' checkpoints and resume manifests
    # (local paths or fsspec URLs); a relative path is resolved against base_dir,
    # the workers' working directory, which is always allowed.
    allowed_roots: tuple[str, ...] = ()
    base_dir: str = "."
    # The real paths of the programs a start command may run (``agent.allow``, resolved
    # when the agent starts); empty: any.
    allowed_executables: tuple[str, ...] = ()
    # Where code.workdir may lie besides base_dir and allowed_roots (--allow-workdir).
    allowed_workdirs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AgentState:
    """What the agent remembers. Every change is a copy."""

    seen: tuple[str, ...] = ()  # recent command ids, oldest first, bounded
    newest: Mapping[str, int] = field(default_factory=dict)  # run -> newest generation
    revoked: Mapping[str, int] = field(default_factory=dict)  # run -> newest stopped gen
    started: frozenset[tuple[str, int]] = frozenset()  # (run, generation) starts handled
    running: frozenset[WorkerKey] = frozenset()  # launched, exit not yet seen

    @property
    def busy_slots(self) -> int:
        return len(self.running)


@dataclass(frozen=True, slots=True)
class Launch:
    key: WorkerKey
    argv: tuple[str, ...]
    command_env: Mapping[str, str]
    worker_env: WorkerEnv
    log_path: str  # relative to the agent's work dir (events.workerlog)
    causation_id: str
    workdir: str = ""  # where the worker runs; empty: the agent's work dir


@dataclass(frozen=True, slots=True)
class Reject:
    """Report the member as exited with ``exit_code`` without launching it."""

    key: WorkerKey
    reason: str
    causation_id: str
    exit_code: int = REJECTED_EXIT_CODE
    # Set when the spec is at fault (agent.confine): the job's error, never the node's.
    launch_error: str = ""


@dataclass(frozen=True, slots=True)
class Terminate:
    """SIGTERM the worker's process group; SIGKILL after the grace period."""

    key: WorkerKey
    reason: str


@dataclass(frozen=True, slots=True)
class Ignore:
    command_id: str
    reason: str
    # REPLAYED or SUPERSEDED when the command is refused as a replay or an older
    # generation's (logged as a refusal); empty when it is simply not for this node.
    refused: str = ""

    @property
    def level(self) -> int:
        """A refusal is worth a warning in the agent's log; an ignored command is not."""
        return logging.WARNING if self.refused else logging.INFO

    @property
    def verb(self) -> str:
        return "refused" if self.refused else "ignored"

    @property
    def said(self) -> str:
        """Why, as logged: a refusal names its reason and that nothing was done."""
        return f"{self.refused}: {self.reason}; nothing done" if self.refused else self.reason


@dataclass(frozen=True, slots=True)
class Defer:
    """Decide this command again soon: slots it needs may be freed meanwhile."""

    command_id: str
    reason: str


Action = Launch | Reject | Terminate | Ignore | Defer


@dataclass(frozen=True, slots=True)
class Decision:
    state: AgentState
    actions: tuple[Action, ...]


def decide(config: AgentConfig, state: AgentState, command: Event, now_ms: int) -> Decision:
    """The agent's new memory and what to do about ``command``."""
    match command:
        case GroupStartCommanded():
            return _start(config, state, command, now_ms)
        case GroupStopCommanded():
            return _stop(config, state, command)
    return Decision(state, (Ignore("", f"not a command: {command.event_type}"),))


def worker_exited(state: AgentState, key: WorkerKey) -> AgentState:
    return replace(state, running=state.running - {key})


def shutdown(state: AgentState) -> tuple[Terminate, ...]:
    """Terminate everything: the agent is going away and cannot watch its workers."""
    return tuple(Terminate(k, "agent shutting down") for k in sorted(state.running, key=str))


def lookahead(config: AgentConfig, state: AgentState, commands: Sequence[Event]) -> AgentState:
    """Raise newest and revoked generations from a whole batch before deciding any of it.

    A batch that holds start g1, stop g1 and start g2 (an agent catching up
    after a restart) then launches only g2, instead of launching g1 to stop it
    a moment later. Command ids are not marked seen here: ``decide`` does that.
    """
    newest, revoked = dict(state.newest), dict(state.revoked)
    for cmd in commands:
        if not isinstance(cmd, GroupStartCommanded | GroupStopCommanded):
            continue
        if cmd.node != config.node or cmd.command_id in state.seen:
            continue
        run, gen = cmd.run_id, cmd.generation
        newest[run] = max(gen, newest.get(run, gen))
        if isinstance(cmd, GroupStopCommanded):
            revoked[run] = max(gen, revoked.get(run, gen))
    return replace(state, newest=newest, revoked=revoked)


def _remember(config: AgentConfig, state: AgentState, cmd_id: str, run: str,
              gen: int) -> AgentState:
    seen = (*state.seen, cmd_id)[-config.seen_limit:]
    newest = {**state.newest, run: max(gen, state.newest.get(run, gen))}
    return replace(state, seen=seen, newest=newest)


def _ignore(state: AgentState, cmd_id: str, reason: str, refused: str = "") -> Decision:
    return Decision(state, (Ignore(cmd_id, reason, refused),))


def _start(config: AgentConfig, state: AgentState, cmd: GroupStartCommanded,
           now_ms: int) -> Decision:
    run, gen, cid = cmd.run_id, cmd.generation, cmd.command_id
    if cmd.node != config.node:
        return _ignore(state, cid, f"for node {cmd.node!r}, this is {config.node!r}")
    if cid in state.seen:
        return _ignore(state, cid, "duplicate command id", REPLAYED)
    prior_newest = state.newest.get(run, -1)
    new = _remember(config, state, cid, run, gen)
    if (run, gen) in state.started:
        return _ignore(new, cid, f"start of {run} g{gen} was already handled", REPLAYED)
    if gen <= state.revoked.get(run, -1):
        return _ignore(new, cid, f"generation {gen} of {run} is revoked "
                                 f"(stopped up to g{state.revoked[run]})", SUPERSEDED)
    if gen < prior_newest:
        return _ignore(new, cid, f"generation {gen} is older than g{prior_newest} "
                                 f"already commanded for {run}", SUPERSEDED)
    age_ms = now_ms - cmd.header.occurred_at
    if age_ms > config.max_start_age_ms:
        return _ignore(new, cid, f"stale: issued {age_ms / 1000:.0f}s ago "
                                 f"(limit {config.max_start_age_ms / 1000:.0f}s)")
    mine = tuple(m for m in cmd.members if m.node == config.node)
    if not mine:
        return _ignore(new, cid, "no members on this node")
    new = replace(new, started=new.started | {(run, gen)})
    keys = [WorkerKey(run, gen, m.logical_id) for m in mine]

    def reject_all(reason: str, launch_error: str = "") -> Decision:
        return Decision(new, tuple(Reject(k, reason, cmd.header.event_id,
                                          launch_error=launch_error) for k in keys))

    try:
        refused = refusal(Options(config.node, config.allowed_roots, config.base_dir,
                                  config.allowed_executables, config.allowed_workdirs),
                          cmd, mine)
        if refused is not None:
            return reject_all(f"invalid start command: {refused.problem}", refused.launch_error)
        envs = _worker_envs(config, cmd, mine)
    except WorkerEnvError as exc:
        return reject_all(f"invalid start command: {exc}")
    # A newer generation fences older ones: stop them, and their slots are free.
    fenced = sorted((k for k in new.running if k.run_id == run and k.generation < gen), key=str)
    free = config.slots - (len(new.running) - len(fenced))
    actions: list[Action] = [Terminate(k, f"fenced by generation {gen}") for k in fenced]
    if len(mine) > free:
        if len(mine) > config.slots:
            return reject_all(f"needs {len(mine)} slots, the node has {config.slots}")
        need = f"needs {len(mine)} slots, {free} of {config.slots} free"
        if age_ms >= config.slot_wait_ms:
            return reject_all(need)
        # Not marked seen or started: the retry must pass every rule again.
        return Decision(replace(state, newest=new.newest),
                        (*actions, Defer(cid, f"{need}; waiting for slots")))
    for key, env in zip(keys, envs, strict=True):
        actions.append(Launch(key, cmd.argv, dict(cmd.env), env,
                              worker_log_path(run, gen, key.logical_id),
                              cmd.header.event_id, cmd.workdir))
    return Decision(replace(new, running=new.running | set(keys)), tuple(actions))


def _stop(config: AgentConfig, state: AgentState, cmd: GroupStopCommanded) -> Decision:
    run, gen, cid = cmd.run_id, cmd.generation, cmd.command_id
    if cmd.node != config.node:
        return _ignore(state, cid, f"for node {cmd.node!r}, this is {config.node!r}")
    if cid in state.seen:
        return _ignore(state, cid, "duplicate command id", REPLAYED)
    new = _remember(config, state, cid, run, gen)
    new = replace(new, revoked={**new.revoked, run: max(gen, new.revoked.get(run, gen))})
    doomed = sorted((k for k in new.running if k.run_id == run and k.generation <= gen), key=str)
    reason = f"stop g{gen}: {cmd.reason}"
    return Decision(new, tuple(Terminate(k, reason) for k in doomed))


def _worker_envs(config: AgentConfig, cmd: GroupStartCommanded,
                 mine: tuple[Member, ...]) -> list[WorkerEnv]:
    """Each member's contract; ``WorkerEnvError`` when the command cannot give one."""
    ids = [m.logical_id for m in mine]
    if len(set(ids)) != len(ids):
        raise WorkerEnvError(f"members name a logical id twice: {', '.join(sorted(ids))}")
    if RANKS in cmd.env:
        order = parse_ranks(cmd.env[RANKS])
    elif len(cmd.members) == cmd.world_size:
        order = tuple(m.logical_id for m in cmd.members)
    else:
        raise WorkerEnvError(
            f"{RANKS} is missing and the command names {len(cmd.members)} of "
            f"{cmd.world_size} members, so ranks are unknown"
        )
    if len(order) != cmd.world_size:
        raise WorkerEnvError(f"{RANKS} names {len(order)} ids, world_size is {cmd.world_size}")
    rank = {lid: i for i, lid in enumerate(order)}
    missing = [m.logical_id for m in mine if m.logical_id not in rank]
    if missing:
        raise WorkerEnvError(f"{RANKS} does not name {', '.join(missing)}")
    interval = config.heartbeat_interval_s
    if HEARTBEAT_INTERVAL_S in cmd.env:
        interval = parse_interval(cmd.env[HEARTBEAT_INTERVAL_S])
    local = {lid: i for i, lid in enumerate(sorted((m.logical_id for m in mine),
                                                   key=rank.__getitem__))}
    return [
        WorkerEnv(
            run_id=cmd.run_id, generation=cmd.generation, logical_id=m.logical_id,
            node=config.node, world_size=cmd.world_size, rank=rank[m.logical_id],
            local_rank=local[m.logical_id], master_addr=cmd.master_addr,
            master_port=cmd.master_port, bootstrap=config.bootstrap,
            heartbeat_interval_s=interval, resume_step=cmd.resume_step,
            resume_manifest=cmd.resume_manifest,
            # Its heartbeats go through this agent (agent.beats): the running agent's work
            # dir is absolute (a relative one would be read from the worker's own cwd).
            beat_file=(beatfile.path_for(config.base_dir, cmd.run_id, cmd.generation,
                                         m.logical_id) if isabs(config.base_dir) else None),
        )
        for m in mine
    ]
