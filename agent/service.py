"""The node agent: registers a node's slots, obeys commands for it, reports worker exits.

One agent per node. It writes to ``runledger.reports``, each report signed
with the node's own key (``agent.node``; the controller believes a report about
this node only under it, ``events.kafka.reportdoor``):

- ``AgentRegistered`` once at start (with the node's Python and torch versions,
  read from package metadata so the agent never imports torch) and
  ``AgentHeartbeatRecorded`` every
  interval (from a background thread, so a slow command never looks like a
  dead node), both under the pseudo run id ``events.model.node_key(node)``,
  generation 0, producer ``agent/<node>``;
- ``MembersHeartbeatRecorded``: its workers' heartbeats, read from the beat
  files it named for them, one record per run and generation every interval
  (``agent.beats``; node-aggregated liveness);
- ``WorkerExited`` for every worker it launched or refused, under the run id
  and generation of the start command, with event id
  ``<run>/g<gen>/<logical id>/exited`` (one exit per worker and generation, so
  a retried write is recognisably the same report).

After a stop command, once this node's workers of the stopped generations have
exited, it removes their staging residue on the run's first checkpoint tier in
the background (``agent.sweep``; the root comes from the start command).

At start, once registered, it logs its node's state as the controller's facts
on ``runledger.runs`` leave it (``agent.nodestate``): ready, or cordoned or
quarantined since when and why, with the ``runledger node uncordon`` that
frees it. The facts are read in a thread of their own, for at most
``agent.node.NODE_STATE_READ_S``, so the agent's start never waits for them; a log that
cannot be read in time is logged as a state unknown, with the reason.

It reads ``runledger.commands`` in the consumer group ``agent-<node>`` and
commits offsets only after a batch of commands was acted on. What to do about
a command is decided by the pure ``agent.decide.decide``; this
module only performs it. SIGTERM or SIGINT stops every worker (SIGTERM, then
SIGKILL after the grace period), reports their exits, flushes and returns 0.
Each command applied is written to the node's applied-commands file
(``agent.applied``) before it is acted on; a restarted agent loads it first.

Each worker's output goes through a log relay process of its own
(``agent.logrelay``) into its log file, rotated at ``log_cap`` bytes with
``log_keep`` older files (``--log-cap``, ``--log-keep``), so a chatty worker's
output stays bounded on disk.

What it does is counted in ``stats`` (``agent.stats``), for ``--metrics`` (``agent.metrics``).

Known limits, all after the agent itself dies: a worker survives a ``kill -9``
of its agent (it runs in its own session, its log relay in another, so its
output stays bounded) and its exit is never reported, so
the controller learns of its end only from its heartbeats stopping (which a
restarted agent forwards from its beat file, ``agent.beats``); and a start
deferred for busy slots (its offset already committed) is lost if the agent
dies while it waits, which the controller sees as members that never heartbeat.
"""

from __future__ import annotations

import logging
import os
import platform
import signal
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from agent import sweep
from agent.allow import allowed_real_paths
from agent.applied import AppliedLog
from agent.beats import BeatForwarder, adopted, orphans
from agent.confine import root_option_problem, workdir_option_problem
from agent.decide import (
    REJECTED_EXIT_CODE,
    Action,
    AgentConfig,
    Defer,
    Ignore,
    Launch,
    Reject,
    Terminate,
    WorkerKey,
    decide,
    lookahead,
    shutdown,
    worker_exited,
)
from agent.errors import AgentError
from agent.logrelay import DEFAULT_CAP, DEFAULT_KEEP, limits_problem
from agent.node import node_state_line, send_report, torch_version
from agent.procs import Exit, ProcessTable
from agent.stats import UNVERIFIED, AgentStats, decided
from agent.verify import CommandVerifier
from events.kafka.clients import EventProducer
from events.kafka.consume import EventConsumer
from events.model import (
    AgentHeartbeatRecorded,
    AgentRegistered,
    Event,
    GroupStartCommanded,
    GroupStopCommanded,
    Header,
    WorkerExited,
    node_key,
)
from events.names import host_problem
from events.record import Record
from events.signed.signing import SigningKey
from events.topics import COMMANDS

log = logging.getLogger("runledger.agent")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class AgentOptions:
    domain: str = "default"
    # Where this node's workers are reachable; the controller makes rank 0's the master.
    address: str = "127.0.0.1"
    work_dir: Path = Path(".")
    grace_s: float = 5.0
    # How long one consumer poll may block: bounds the delay of exit reports and stops.
    poll_s: float = 0.2
    # Act on unsigned commands too (a controller run with --unsigned); a badly
    # signed one is still refused (agent.verify).
    trust_unsigned: bool = False
    # The node's key (agent.node): every report is signed with it; None: unsigned.
    node_key: SigningKey | None = None
    # The environment workers start from (the worker's credentials); None: the agent's.
    worker_env: Mapping[str, str] | None = None
    # Each worker's log on disk (agent.logrelay): rotated at log_cap bytes, log_keep
    # older files kept, so at most (log_keep + 1) * log_cap bytes per worker.
    log_cap: int = DEFAULT_CAP
    log_keep: int = DEFAULT_KEEP


class Agent:
    def __init__(self, config: AgentConfig, options: AgentOptions) -> None:
        if config.slots < 1:
            raise AgentError(f"--slots must be >= 1, got {config.slots}")
        problems = [host_problem(config.node, "--node"),
                    host_problem(options.domain, "--domain"),
                    *(root_option_problem(r) for r in config.allowed_roots),
                    *(workdir_option_problem(r) for r in config.allowed_workdirs),
                    limits_problem(options.log_cap, options.log_keep)]
        if any(problems):
            raise AgentError("; ".join(p for p in problems if p))
        # What --allow names, as real files (agent.allow): the agent refuses to start on
        # an entry that names none, rather than run with a list that allows nothing.
        allowed = allowed_real_paths(config.allowed_executables,
                                     os.environ.get("PATH", os.defpath), os.getcwd())
        # Workers run in the work dir: that is where a relative path lands.
        self.config = replace(config, base_dir=str(options.work_dir.resolve()),
                              allowed_executables=allowed)
        self.options = options
        self.applied, self.state = AppliedLog.at(options.work_dir, self.config)  # agent.applied
        self.procs = ProcessTable(options.work_dir, options.grace_s, options.worker_env,
                                  allowed=allowed, node=config.node,
                                  node_key=lambda: self.options.node_key,
                                  log_cap=options.log_cap, log_keep=options.log_keep)
        if allowed:
            log.info("--allow: workers may run only %s", " ".join(allowed))
        self.producer_id = f"agent/{config.node}"
        # Distinguishes this start's heartbeat ids from those of an earlier start.
        self.incarnation = uuid.uuid4().hex[:12]
        self._stopping = threading.Event()
        self._busy = 0
        # Deferred start commands by id, in arrival order; decided again every loop.
        self._pending: dict[str, Event] = {}
        self._producer: EventProducer | None = None
        self._verifier: CommandVerifier | None = None
        # agent.sweep: each run's checkpoint root, and the stops whose residue is due
        self._roots: dict[str, str] = {}
        self._sweeps: dict[str, int] = {}
        self.stats = AgentStats()  # read by a scrape thread (agent.metrics)
        # The beat files its last incarnation's workers left running, found once: no
        # worker this agent did not launch can appear later (agent.beats).
        self._left = orphans(self.config.base_dir, adopted(self.state), frozenset())
        self._orphans: frozenset[WorkerKey] = frozenset()  # those still adopted
        self.beats = BeatForwarder(config.node, self.incarnation, self._send_beats,
                                   self._beating, now_ms, lambda: self._orphans)

    # --- lifecycle -----------------------------------------------------------

    def request_stop(self, signum: int = 0, frame: FrameType | None = None) -> None:
        if signum:
            log.info("signal %d: stopping workers and exiting", signum)
        self._stopping.set()

    def run(self) -> int:
        self.options.work_dir.mkdir(parents=True, exist_ok=True)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.request_stop)
            signal.signal(signal.SIGINT, self.request_stop)
        cfg = self.config
        self._producer = EventProducer(cfg.bootstrap, client_id=self.producer_id)
        # Commands are written only by the controller, so an undecodable one is
        # logged, not copied to the quarantine once per agent.
        consumer = EventConsumer(cfg.bootstrap, f"agent-{cfg.node}", [COMMANDS], raw=True)
        self._verifier = CommandVerifier(cfg.bootstrap, name=f"agent-{cfg.node}",
                                         trust_unsigned=self.options.trust_unsigned)
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="agent-heartbeat",
                                     daemon=True)
        # Its workers' heartbeats, read from their beat files: one record per run (agent.beats).
        beats = threading.Thread(target=self.beats.run, args=(self._stopping,),
                                 name="agent-beats", daemon=True)
        try:
            self._send(AgentRegistered(header=self._node_header("registered"), node=cfg.node,
                                       slots=cfg.slots, domain=self.options.domain,
                                       address=self.options.address,
                                       # As ProcessTable makes its log paths absolute.
                                       work_dir=str(self.options.work_dir.absolute()),
                                       python_version=platform.python_version(),
                                       torch_version=torch_version()))
            self._producer.flush()
            log.info("agent %s registered: %d slots in domain %s, work dir %s", cfg.node,
                     cfg.slots, self.options.domain, self.options.work_dir)
            heartbeat.start()
            beats.start()
            threading.Thread(target=self._log_node_state, name="agent-node-state",
                             daemon=True).start()
            self._loop(consumer)
        finally:
            self._shutdown()
            self._stopping.set()
            for thread in (heartbeat, beats):
                if thread.is_alive():
                    thread.join(timeout=5)
            consumer.close()
            self._producer.flush()
        return 0

    def _log_node_state(self) -> None:
        said = node_state_line(self.config.bootstrap, self.config.node)
        # A node that takes no work is what an operator must notice in this log.
        (log.info if said.endswith(": ready") else log.warning)("%s", said)

    def _loop(self, consumer: EventConsumer) -> None:
        seen_bad = 0
        while not self._stopping.is_set():
            records = consumer.poll(self.options.poll_s)
            for q in consumer.quarantined[seen_bad:]:
                log.error("skipping an undecodable command: %s", q)
            commands = [r.event for r in records
                        if isinstance(r.event, GroupStartCommanded | GroupStopCommanded)
                        and r.event.node == self.config.node and self._trusted(r)]
            if commands:
                self.state = lookahead(self.config, self.state, commands)
                for command in commands:
                    self._handle(command)
                # Everything this node must do about these commands is done (or deferred).
                self._producer_or_fail().flush()
            if records or len(consumer.quarantined) > seen_bad:
                consumer.commit()
            seen_bad = len(consumer.quarantined)
            if self._report_exits() or self._pending:
                self._retry_pending()
            self._sweep_due()

    def _trusted(self, record: Record) -> bool:
        """Whether the command passes agent.verify; a refused start is reported (125)."""
        if self._verifier is None:
            raise AgentError("the agent is not running")
        problem = self._verifier.judge(record)
        if problem is None:
            return True
        command = record.event
        log.error("refused %s %s[%d]@%d (%s g%d): %s; nothing done", command.event_type,
                  record.topic, record.partition, record.offset, command.run_id,
                  command.generation, problem)
        self.stats.command(command, UNVERIFIED)
        if isinstance(command, GroupStartCommanded):
            for member in command.members:
                if member.node == self.config.node:
                    key = WorkerKey(command.run_id, command.generation, member.logical_id)
                    self._send_exit(key, command.header.event_id, REJECTED_EXIT_CODE, None)
        return False

    def _handle(self, command: Event, retry: bool = False) -> None:
        decision = decide(self.config, self.state, command, now_ms())
        self.applied.record(self.state, decision.state, command)  # before acting on it
        if not retry:  # what a deferred start became shows in its exits
            self.stats.command(command, decided(decision.actions))
        self.state = decision.state
        for action in decision.actions:
            if isinstance(action, Defer):
                if not retry:  # said once, not on every retry
                    log.info("deferred %s (%s g%d): %s", action.command_id, command.run_id,
                             command.generation, action.reason)
                self._pending[action.command_id] = command
            else:
                self._perform(action, command)
        acted = not any(isinstance(a, Ignore) for a in decision.actions)
        if isinstance(command, GroupStopCommanded) and acted \
                and command.run_id in self._roots:
            run = command.run_id
            self._sweeps[run] = max(command.generation, self._sweeps.get(run, 0))

    def _sweep_due(self) -> None:
        """Remove the residue of stopped generations whose workers here are gone, in the
        background (storage may be slow; the loop must not wait)."""
        for run, gen in sweep.due(self._sweeps, self.state.running):
            del self._sweeps[run]
            sweep.in_background(self._roots[run], run, gen)

    def _retry_pending(self) -> None:
        waiting, self._pending = self._pending, {}
        for command in waiting.values():
            self._handle(command, retry=True)
        if len(self._pending) < len(waiting):
            self._producer_or_fail().flush()  # a rejection was reported

    def _shutdown(self) -> None:
        for cid in self._pending:
            log.warning("dropping deferred start %s: the agent is exiting", cid)
        for action in shutdown(self.state):
            self.procs.terminate(action.key, action.reason)
        # Belt and braces: the process table, not the state, is what actually runs.
        self.procs.terminate_all("agent shutting down")
        # SIGKILL comes after grace_s, so every worker is gone shortly after.
        deadline = time.monotonic() + self.options.grace_s + 5
        while len(self.procs) and time.monotonic() < deadline:
            self._report_exits()
            time.sleep(0.05)
        self._report_exits()
        if len(self.procs):
            log.error("workers still alive at exit: %s", self.procs.pids())

    # --- actions ---------------------------------------------------------------

    def _perform(self, action: Action, command: Event) -> None:
        match action:
            case Launch():
                self.procs.launch(action)
                root = sweep.root_of(action.command_env,
                                     action.workdir or str(self.options.work_dir.absolute()))
                if root is not None:
                    self._roots[action.key.run_id] = root
            case Terminate():
                self.procs.terminate(action.key, action.reason)
            case Reject():
                log.error("%s: not launched: %s", action.key, action.reason)
                said = Exit(action.key, action.exit_code, action.causation_id, None,
                            stderr_tail=f"runledger agent: not launched: {action.reason}",
                            launch_error=action.launch_error)
                self._send_exit(action.key, action.causation_id, action.exit_code, None, said)
                self.state = worker_exited(self.state, action.key)
            case Defer():
                self._pending[action.command_id] = command
            case Ignore():  # a refusal (a replay, say) is logged as a warning: Ignore.level
                log.log(action.level, "%s %s %s (%s g%d): %s", action.verb, command.event_type,
                        action.command_id, command.run_id, command.generation, action.said)
        self._busy = self.state.busy_slots

    def _report_exits(self) -> int:
        """Report ended workers; how many there were."""
        exits: list[Exit] = self.procs.reap()
        for e in exits:
            how = f"exit code {e.exit_code}" if e.signal is None else f"signal {e.signal}"
            log.info("%s: pid %s ended with %s", e.key, e.pid, how)
            self._send_exit(e.key, e.causation_id, e.exit_code, e.signal, e)
            self.state = worker_exited(self.state, e.key)
        if exits:
            self._busy = self.state.busy_slots
            self._producer_or_fail().flush()
        return len(exits)

    # --- writing ---------------------------------------------------------------

    def _producer_or_fail(self) -> EventProducer:
        if self._producer is None:
            raise AgentError("the agent is not running")
        return self._producer

    def _send(self, event: Event) -> None:
        send_report(self._producer_or_fail(), event, self.options.node_key)

    def _send_exit(self, key: WorkerKey, causation_id: str, exit_code: int | None,
                   sig: int | None, evidence: Exit | None = None) -> None:
        header = Header(f"{key}/exited", key.run_id, key.generation, now_ms(), self.producer_id,
                        causation_id=causation_id or None)
        ev = evidence or Exit(key, 0, causation_id, None)
        self._send(WorkerExited(header=header, logical_id=key.logical_id,
                                node=self.config.node, exit_code=exit_code, signal=sig,
                                log_path=ev.log_path, stderr_tail=ev.stderr_tail,
                                launch_error=ev.launch_error))
        self.stats.exited(exit_code, sig, ev.pid is not None, ev.log_path)

    def _beating(self) -> list[tuple[WorkerKey, str, float]]:
        """The beat files to read: its own workers', and those a restart left running
        while their generation is still adopted (not stopped, not superseded)."""
        still = set(adopted(self.state))
        found = [w for w in self._left if (w[0].run_id, w[0].generation) in still]
        self._orphans = frozenset(k for k, _, _ in found)
        return self.procs.beating() + found

    def _send_beats(self, event: Event) -> None:
        self._send(event)
        self._producer_or_fail().poll(0)

    def _node_header(self, what: str) -> Header:
        event_id = f"{node_key(self.config.node)}/{self.incarnation}/{what}"
        return Header(event_id, node_key(self.config.node), 0, now_ms(), self.producer_id)

    def _heartbeat_loop(self) -> None:
        beat = 0
        while not self._stopping.wait(self.config.heartbeat_interval_s):
            beat += 1
            try:
                header = self._node_header(f"hb/{beat}")
                self._send(AgentHeartbeatRecorded(
                    header=header, node=self.config.node, slots=self.config.slots,
                    domain=self.options.domain, address=self.options.address,
                    busy_slots=self._busy))
                self._producer_or_fail().poll(0)
                self.stats.heartbeat(header.occurred_at)
            except Exception:
                # A missed heartbeat is reported by its absence; never kill the agent.
                self.stats.heartbeat_failed()
                log.exception("heartbeat %d not sent", beat)
