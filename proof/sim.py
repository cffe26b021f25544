"""Deterministic simulation of the real core: one seed decides every fault and every ordering.

A :class:`Simulation` runs the controller's pure core (``controller.reconcile``
``handle`` and ``tick`` over ``controller.model``, which judge with
``events.fold``) and the agents' (``agent.decide``) against the modelled log,
storage and workers of ``proof.world`` (``proof.actors``). One
``random.Random(seed)`` picks every step: which report the controller reads
next, when it ticks, which worker or agent moves, and the faults, up to a
budget the seed also picks (an even seed weighs each kind of fault its own way:
swarm testing): controller crashes (the transaction in progress is
lost and the model is rebuilt from the log), agent crashes (workers orphaned,
the last command read again), worker crashes, pauses and wake-ups (zombies),
duplicated and delayed reports, a shard report that reaches the broker late, a
deadlock (every rank blocked in a collective, its
heartbeats alive), torn, lost and failed writes, a checkpoint's shard decaying
at rest, partitioned nodes (a long cut outlasts the heartbeat timeout), lost
nodes, silent data corruption (a rank miscomputes a step once, or a faulty node
whenever it computes that step), the job's own code breaking (every worker
launched after it raises at import), operators' node operations (cordon,
drain, uncordon, some on an older view), and a cancel. Half the seeds ask
for the automatic checkpoint interval. After every step ``proof.props``
checks P1-P6 and ETTR closure, and ``proof.truth`` checks the log against what
the world knows (F: a fresh fold accepts every appended fact; C: the cursor
moves with each commit; G: whole gangs within the nodes' slots; S: a commit
holds its own generation's shards; P8: the old generation is told to stop
before the next starts; Z: corruption judged as the world knows it; I: the
checkpoint interval as its rule says; J: the job's own error exactly when
its code broke; M, O, Q: confirmations, successes and failure quarantines
as the reads say; N, X: node operations by epoch, a request taken once; W:
progress, or a violation that names the seed, never a hang); at every
controller restart and at the end, a replay of the log must equal the live
model; a seed that met no fault must end succeeded, trained to its last
step, with the last checkpoint it took committed; and every
``ETTR_EVERY``-th seed's ETTR, by the real query, must equal part by part
the labels the documented rules give (``proof.ettr``).

Nothing else varies: no wall clock, no set or hash order, so a seed's run is
the same run everywhere. The trace digest (SHA-256 of every step's line and
the ids of the records it appended) says so; ``--seed N --trace`` prints it.

``python -m proof.sim --seeds 10000`` runs seeds 0..9999 and prints a summary;
``--plant NAME`` first plants a known bug in the real core (``proof.plant``).

Tested in tests/proof/test_sim.py.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial

from controller.emitter import Out
from controller.model import Model, replay
from controller.reconcile import handle, tick
from controller.replays import epoch_of
from controller.runplan import RunPlan
from events.model import (
    CancelRequested,
    CheckpointIntervalChanged,
    CheckpointRevoked,
    CorruptionClassified,
    CorruptionSuspected,
    Event,
    FailureClassified,
    ManifestCommitted,
    NodeCordoned,
    NodeOperationRequested,
    NodeUncordoned,
    RunSubmitted,
    WriteRejected,
    node_key,
)
from events.requests import NODE_OPERATIONS
from events.state import Status
from events.topics import COMMANDS, RUNS
from proof import actors, props
from proof.ettr import closes
from proof.plant import PLANTS
from proof.truth import Truth, stop_obeyed
from proof.world import NODES, RUN, STEPS, Agent, Worker, World, plan

MAX_STEPS = 4_000
MAX_FAULTS = 12  # a swarm seed's fault budget at most
UNIFORM_FAULTS = 8  # a uniform seed's
# The real ETTR query costs ~0.15 s a seed, seven times a whole simulated run: it closes
# every 50th seed's log (200 of 10,000), while the step-by-step check runs on every one.
ETTR_EVERY = 50
Choice = tuple[float, Callable[[], str]]
# Every kind of fault, and the weights a seed may give each (swarm testing).
FAULTS = ("controller_crash", "tear", "lose_write", "fail_write", "cancel", "agent_crash",
          "partition", "lose_node", "deadlock", "worker_crash", "pause", "duplicate", "delay",
          "corrupt", "rot", "long_partition", "slow_shard", "break_job", "operate")
SWARM = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)
# A fault's weight beside the world's own moves (about 15 a step). Low enough that a
# budget lasts most of a run: faults after the first checkpoints (a revocation, a
# suspicion after a commit) are as likely as faults at the start.
BASE_WEIGHT = 0.04
# A fault's weight, where it is not BASE_WEIGHT: the two that end a run are rarer.
WEIGHT = {"cancel": 0.007, "break_job": 0.007}


@dataclass(frozen=True, slots=True)
class Outcome:
    """One seed's run: how it ended, what it exercised, and the property it broke, if any."""

    seed: int
    steps: int
    digest: str  # SHA-256 of the trace: equal digests, equal runs
    status: str  # the run's status at the end
    faults: int
    commits: int
    revocations: int
    stale: int  # reports refused as stale_generation
    generations: int
    prop: str | None = None  # the property a violation broke
    detail: str = ""
    trace: tuple[str, ...] = ()
    ettr: bool = False  # ETTR closure was checked by the real query
    quiet: int = 0  # the longest stretch of steps with no fact but rejections (W)
    suspicions: int = 0  # CorruptionSuspected facts
    verdicts: tuple[str, ...] = ()  # each CorruptionClassified's verdict, in order
    retuned: int = 0  # CheckpointIntervalChanged facts
    classes: tuple[str, ...] = ()  # each FailureClassified's class, in order
    operations: int = 0  # operators' node operations applied (NodeCordoned, NodeUncordoned)

    @property
    def line(self) -> str:
        verdict = "ok" if self.prop is None else f"{self.prop} broken: {self.detail}"
        return (f"seed {self.seed}: {verdict} after {self.steps} steps, digest "
                f"{self.digest[:16]}")


class Simulation:
    """One seed: the real core, its modelled world, and the properties checked as it runs."""

    def __init__(self, seed: int, *, keep_trace: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.world = World()
        # Every other pair of seeds has the automatic checkpoint interval.
        self.plan = plan(auto=seed % 4 >= 2)
        self.model = Model(since=self.world.now)
        self.facts: list[Event] = []
        self.ghost = props.Ghost()
        self.truth = Truth(self.plan, frozenset(NODES), RUN, self.world)
        # Swarm testing: an even seed weighs each kind of fault its own way (some never,
        # some eight times as often) with a larger budget, so some seeds are all partitions
        # and delays, others all crashes: combinations a uniform mix almost never deals.
        # An odd seed keeps the uniform mix, which finds others.
        swarm = seed % 2 == 0
        self.budget = self.rng.randint(0, MAX_FAULTS if swarm else UNIFORM_FAULTS)
        self.mix = {name: self.rng.choice(SWARM) if swarm else 1.0 for name in FAULTS}
        self.faults = 0
        self.keep_trace = keep_trace
        self.trace: list[str] = []
        self._hash = hashlib.sha256()
        self._outs: list[Out] = []  # what the step's transaction appended

    def plan_of(self, _: RunSubmitted) -> RunPlan:
        return self.plan

    def run(self, *, ettr: bool = False) -> Outcome:
        """Run the seed to its end; with ``ettr``, then check ETTR closure by the real query."""
        w = self.world
        prop, detail, steps = None, "", 0
        try:
            for a in w.agents.values():
                self._note(actors.agent_beat(w, a, register=True), [])
            w.send(RunSubmitted(header=w.header(0, "operator/alice"), spec_digest="sha256:sim",
                                spec_json="{}", principal="alice", world_size=2,
                                dataset_id="ds"), "")
            while steps < MAX_STEPS and not self._over():
                steps += 1
                w.now += self.rng.randint(1, 120)
                line = self._step()
                self._note(line, self._outs)
                self._outs = []
                self._holds()
                self.truth.stepped(self._over(), steps, MAX_STEPS)
                self.truth.watch(w.now)
            props.replayed(self.model, self.facts, w.now, self.plan_of, RUN)
            if self.faults == 0:
                props.finished(self.model.runs.get(RUN), STEPS, w.cadence[1][1])
            if ettr:
                ratio = closes(self.facts, RUN).ratio
                self._note(f"ETTR {ratio} closes", [])
        except props.Violation as v:
            prop, detail = v.prop, v.detail
            self._note(f"VIOLATION {v}", [])
        state = self.model.runs.get(RUN)
        return Outcome(
            self.seed, steps, self._hash.hexdigest(), state.status.value if state else "none",
            self.faults, sum(isinstance(e, ManifestCommitted) for e in self.facts),
            sum(isinstance(e, CheckpointRevoked) for e in self.facts),
            sum(isinstance(e, WriteRejected) and e.reason == "stale_generation"
                for e in self.facts),
            self.ghost.gen, prop, detail, tuple(self.trace), ettr, self.truth.longest,
            sum(isinstance(e, CorruptionSuspected) for e in self.facts),
            tuple(e.verdict for e in self.facts if isinstance(e, CorruptionClassified)),
            sum(isinstance(e, CheckpointIntervalChanged) for e in self.facts),
            tuple(e.failure_class for e in self.facts if isinstance(e, FailureClassified)),
            sum(isinstance(e, NodeCordoned | NodeUncordoned) for e in self.facts))

    # -- the shell around the real core ------------------------------------------------

    def _note(self, line: str, outs: list[Out]) -> None:
        text = f"{self.world.now} {line} -> {' '.join(e.header.event_id for _, e in outs)}"
        self._hash.update(text.encode() + b"\n")
        if self.keep_trace:
            self.trace.append(text)

    def _holds(self) -> None:
        state = self.model.runs.get(RUN)
        if state is not None:
            props.state_holds(self.ghost, state, self.world.storage)

    def _over(self) -> bool:
        """The run ended, or waits for an operator: queued while quarantines and cordons
        leave fewer nodes than its gang (nothing else in the world frees one); and nothing
        is left moving."""
        state = self.model.runs.get(RUN)
        held = self.truth.quarantined | set(self.truth.ops.cordons)
        stranded = (state is not None and state.status == Status.QUEUED
                    and len(NODES) - len(held) < self.plan.world_size)
        return (state is not None and (state.status.terminal or stranded)
                and not self.world.live() and not self.world.flight)

    def _commit(self, model: Model, outs: list[Out]) -> None:
        """The transaction commits: its records are appended, the model moves on."""
        props.appended(self.ghost, outs, self.world.now)
        self.truth.appended(outs)
        self.model = model
        for topic, e in outs:
            if topic == RUNS:
                self.facts.append(e)
                if isinstance(e, CheckpointIntervalChanged) and e.run_id == RUN:
                    self.world.interval = e.interval_steps  # what every watcher reads
            elif topic == COMMANDS:
                self.world.commands.append(e)
        self._outs = outs

    def _restart_controller(self) -> str:
        """A crash loses the transaction in progress; the new controller reads the log."""
        props.replayed(self.model, self.facts, self.world.now, self.plan_of, RUN)
        self.model = replay(self.facts, self.world.now, self.plan_of)
        self.truth.since = self.world.now
        return "the controller crashes mid-transaction and rebuilds its model from the log"

    def _deliver(self, crash: bool = False) -> str:
        w = self.world
        idx = w.deliverable()[0]
        flight = w.flight.pop(idx)
        event = flight.event
        self.truth.reading(event)
        live = self.ghost.live(event.generation)
        model, outs = handle(self.model, event, w.now, self.plan_of)
        if crash:  # the read is not committed: the report is read again
            w.flight.insert(idx, flight)
            return self._restart_controller()
        self._commit(model, outs)
        self.truth.read(event, live, outs, w.now)
        return f"controller reads {event.event_type} {event.header.event_id}"

    def _tick(self, crash: bool = False) -> str:
        model, outs = tick(self.model, self.world.now, self.plan_of)
        if crash:
            return self._restart_controller()
        self._commit(model, outs)
        return "controller ticks"

    # -- choosing the next step ----------------------------------------------------------

    def _step(self) -> str:
        choices = self._choices()
        if self.budget > 0:
            # A cancel or a broken job ends the run: rarer than the faults a run recovers
            # from.
            choices += [(WEIGHT.get(name, BASE_WEIGHT) * self.mix[name], self._spend(name, act))
                        for name, act in self._faults()]
        pick = self.rng.choices(range(len(choices)), [c[0] for c in choices])[0]
        return choices[pick][1]()

    def _choices(self) -> list[Choice]:
        w = self.world
        out: list[Choice] = [(2.0, self._tick)]
        if w.deliverable():
            out.append((8.0, self._deliver))
        for worker in w.live():
            if worker.paused:
                out.append((0.6, partial(_paused, worker, False)))
            else:
                out.append((3.0, partial(actors.work, w, worker, self._restoring)))
        for a in w.agents.values():
            if not a.up:
                out.append((0.3, partial(actors.agent_restart, w, a, False)))
            elif a.partitioned:
                if w.now >= a.cut_until:
                    out.append((0.6, partial(_cut, a, False)))
            else:
                out.append((0.8, partial(actors.agent_beat, w, a)))
                if a.read < len(w.commands):
                    out.append((3.0, partial(self._agent_step, a)))
        return out

    def _agent_step(self, a: Agent) -> str:
        line = actors.agent_step(self.world, a)
        stop_obeyed(self.world, a)
        return line

    def _restoring(self, digest: str, problem: str | None) -> None:
        props.restored(self.ghost, digest, problem)

    def _faults(self) -> list[tuple[str, Callable[[], str]]]:
        """The faults that can happen now, each as a step; the victim is drawn when it runs."""
        w, rng = self.world, self.rng
        running = [x for x in w.live() if not x.paused]
        up = [a for a in w.agents.values() if a.up and not a.partitioned]
        out: list[tuple[str, Callable[[], str]]] = [
            ("controller_crash", partial(self._deliver if w.deliverable() else self._tick,
                                         crash=True)),
            ("tear", partial(_arm, w, "tear")),
            ("lose_write", partial(_arm, w, "lose")),
            ("fail_write", partial(_arm, w, "fail")),
            ("cancel", partial(_cancel, w)),
            ("break_job", partial(_break, w)),
            ("operate", self._operate),
            ("rot", partial(_arm, w, "rot")),
            ("slow_shard", lambda: _arm(w, "slow", rng.randint(1_000, 8_000))),
        ]
        if up:
            out += [
                ("agent_crash", lambda: actors.agent_restart(w, rng.choice(up),
                                                             rng.random() < 0.5)),
                ("partition", lambda: _cut(rng.choice(up), True)),
                ("long_partition", lambda: _cut(rng.choice(up), True,
                                                w.now + rng.randint(4_000, 15_000))),
                ("lose_node", lambda: actors.lose_node(w, rng.choice(up), rng.random() < 0.5)),
            ]
        training = [x for x in running if x.phase == "training" and not x.suspected
                    and x.step < STEPS and w.peer(x.gen, x.lid) is x]
        if training:
            out.append(("corrupt", lambda: actors.corrupt(w, rng.choice(training),
                                                          rng.random() < 0.5)))
        if running:
            out += [
                ("deadlock", partial(actors.deadlock, w)),
                ("worker_crash", lambda: actors.exit_worker(w, rng.choice(running), None, 9,
                                                            "killed")),
                ("pause", lambda: _paused(rng.choice(running), True)),
            ]
        if w.deliverable():
            out += [("duplicate", partial(_reorder, w, rng, True)),
                    ("delay", partial(_reorder, w, rng, False))]
        return out

    def _operate(self) -> str:
        """An operator cordons, drains or uncordons a node, with the operation epoch
        `runledger nodes` showed (a quarter of the time an older one: another operator's
        change landed in between)."""
        w, rng = self.world, self.rng
        node, op = rng.choice(NODES), rng.choice(NODE_OPERATIONS)
        epoch = epoch_of(node, self.facts)
        stale = epoch > 0 and rng.random() < 0.25
        w.send(NodeOperationRequested(
            header=w.header(0, "operator/oncall", node_key(node)), node=node, operation=op,
            principal="oncall", reason="simulated", epoch=epoch - stale), "")
        return f"an operator asks to {op} {node}{' on an older view' if stale else ''}"

    def _spend(self, name: str, act: Callable[[], str]) -> Callable[[], str]:
        def fault() -> str:
            self.budget -= 1
            self.faults += 1
            return f"FAULT {name}: {act()}"
        return fault


def _paused(x: Worker, paused: bool) -> str:
    x.paused = paused
    return f"{x.key} {'pauses' if paused else 'wakes'}"


def _cut(a: Agent, cut: bool, until: int = 0) -> str:
    """Cut a node off from the broker, or heal it; a long cut heals no earlier than
    ``until`` (longer than a heartbeat timeout: the controller must judge the silence)."""
    a.partitioned, a.cut_until = cut, until
    how = f" until at least {until}" if until else ""
    return f"node {a.node} {'is cut off from' if cut else 'rejoins'} the broker{how}"


def _arm(w: World, fault: str, value: int = 1) -> str:
    w.faults[fault] = value
    if fault == "rot":
        return "the next checkpoint proposed will decay at rest"
    if fault == "slow":
        return f"the next shard report will reach the broker {value} ms late"
    return f"the next shard write will be {dict(tear='torn', lose='lost', fail='refused')[fault]}"


def _reorder(w: World, rng: random.Random, keep: bool) -> str:
    """Delay the next report behind later ones; a duplicate also delivers it now."""
    idx = w.deliverable()[0]
    flight = w.flight[idx] if keep else w.flight.pop(idx)
    at = rng.randint(idx + 1, len(w.flight)) if len(w.flight) > idx else idx
    w.flight.insert(at, flight)
    how = "duplicated" if keep else "delayed"
    return f"{flight.event.event_type} {flight.event.header.event_id} {how} to place {at}"


def _break(w: World) -> str:
    w.broken = True
    return "the job's code breaks: every worker launched from now on raises at import"


def _cancel(w: World) -> str:
    w.send(CancelRequested(header=w.header(0, "operator/oncall"), principal="oncall",
                           reason="simulated cancel"), "")
    return "an operator asks to cancel"


def run_seeds(seeds: range, *, plant: str | None = None, stop_at_first: bool = False,
              ettr_every: int = ETTR_EVERY) -> list[Outcome]:
    """Every seed's outcome, in seed order (up to the first violation, if asked),
    with the bug ``plant`` planted (``proof.plant``) if one is named; every
    ``ettr_every``-th seed also checks ETTR closure by the real query (0: none)."""
    out = []
    with PLANTS[plant]() if plant else nullcontext():
        for seed in seeds:
            check = ettr_every > 0 and seed % ettr_every == 0
            out.append(Simulation(seed).run(ettr=check))
            if stop_at_first and out[-1].prop is not None:
                break
    return out


def summary(outcomes: list[Outcome], seconds: float) -> list[tuple[str, str]]:
    """The rows ``python -m proof.sim`` prints."""
    n = len(outcomes)
    status = Counter(o.status for o in outcomes)
    verdicts = Counter(v for o in outcomes for v in o.verdicts)
    classes = Counter(c for o in outcomes for c in o.classes)
    return [
        ("seeds", f"{n} ({outcomes[0].seed}..{outcomes[-1].seed})" if n else "0"),
        ("steps", f"{sum(o.steps for o in outcomes):,} ({seconds:.1f} s)"),
        ("faults injected", f"{sum(o.faults for o in outcomes):,}"),
        ("runs ended", ", ".join(f"{k} {v}" for k, v in sorted(status.items()))),
        ("seeds that committed a checkpoint", str(sum(o.commits > 0 for o in outcomes))),
        ("seeds that revoked one", str(sum(o.revocations > 0 for o in outcomes))),
        ("seeds that refused a stale report", str(sum(o.stale > 0 for o in outcomes))),
        ("seeds that restarted", str(sum(o.generations > 1 for o in outcomes))),
        ("seeds that suspected corruption", str(sum(o.suspicions > 0 for o in outcomes))),
        ("corruption verdicts", ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
         or "none"),
        ("failures classified", ", ".join(f"{k} {v}" for k, v in sorted(classes.items()))
         or "none"),
        ("seeds whose interval the controller changed",
         str(sum(o.retuned > 0 for o in outcomes))),
        ("node operations applied", str(sum(o.operations for o in outcomes))),
        ("seeds with no fault, all succeeded (L)",
         str(sum(o.faults == 0 and o.prop is None for o in outcomes))),
        ("ETTR closed by the query", str(sum(o.ettr and o.prop is None for o in outcomes))),
        ("longest stretch with no fact (steps)", str(max((o.quiet for o in outcomes), default=0))),
        ("violations", str(sum(o.prop is not None for o in outcomes))),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m proof.sim", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=10_000, help="how many seeds (default 10000)")
    p.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    p.add_argument("--seed", type=int, help="run this one seed (a failing seed to replay)")
    p.add_argument("--trace", action="store_true", help="with --seed: print every step")
    p.add_argument("--plant", choices=sorted(PLANTS), help="plant a known bug first")
    p.add_argument("--stop-at-first", action="store_true", help="stop at the first violation")
    p.add_argument("--ettr-every", type=int, default=ETTR_EVERY, metavar="N",
                   help=f"check ETTR closure by the real query every N-th seed "
                        f"(default {ETTR_EVERY}; 0: never)")
    args = p.parse_args(argv)
    if args.seed is not None:
        with PLANTS[args.plant]() if args.plant else nullcontext():
            one = Simulation(args.seed, keep_trace=args.trace).run(
                ettr=args.ettr_every > 0 and args.seed % args.ettr_every == 0)
        print("\n".join(one.trace) if args.trace else "", one.line, sep="\n" if args.trace else "")
        return 1 if one.prop else 0
    began = time.perf_counter()
    outcomes = run_seeds(range(args.first, args.first + args.seeds), plant=args.plant,
                         stop_at_first=args.stop_at_first, ettr_every=args.ettr_every)
    rows = summary(outcomes, time.perf_counter() - began)
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    plant = f" --plant {args.plant}" if args.plant else ""
    for o in (o for o in outcomes if o.prop is not None):
        print(f"{o.line}\n  replay: python -m proof.sim --seed {o.seed}{plant} --trace")
    return 1 if any(o.prop for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
