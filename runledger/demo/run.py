"""The demo's sequence: :func:`run_demo` and the :class:`Summary` it returns.

:func:`run_demo` starts a local Kafka broker in a work directory (or uses an
existing one), synthesizes a mixed corpus, starts the controller, the
projector and one two-slot agent (its node key enrolled with the stack's admin
key, ``runledger node enroll``) as real OS processes, submits (signed with the
local stack's operator key) a two-process
torch run of ``examples/train_tiny.py`` whose rank 1 is killed between two
checkpoints, follows the run through the kill, the automatic recovery from the
latest committed checkpoint and its success, then waits for the running
projector's snapshot to hold the whole run and, with the projector still
running, prints ``status``, the ETTR, provenance and incidents queries, and
writes the HTML report. Every process it started is stopped on every way out.

Tested in tests/e2e/test_demo.py.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.service import ENV_SIGNING_KEY
from events.errors import EventsError
from events.kafka.broker import check_broker
from events.kafka.connection import ENV_CREDENTIALS
from events.signed.signing import SigningKey
from events.state import Status
from projectors.snapshot import snapshot_path
from runledger import stack
from runledger.demo.look import epilogue, start_ui
from runledger.demo.procs import DemoError, Services, cli_ok, kill_workers
from runledger.demo.setup import (
    DemoOptions,
    Layout,
    build_dataset,
    fault_for,
    prepare_workdir,
    write_spec,
)
from runledger.demo.watch import RunWatch, Stage, follow, wait_for_snapshot
from runledger.errors import Interrupted, StackError
from runledger.nodekeys import enroll
from runledger.stack.acls import CONTROLLER_PREFIX

Say = Callable[[str], None]


@dataclass(slots=True)
class Summary:
    """What the demo did, as ``--json`` prints it and ``summary.json`` keeps it."""

    workdir: str
    ok: bool = False
    error: str | None = None
    run_id: str | None = None
    bootstrap: str | None = None
    stack_started: bool = False
    db: str | None = None
    report: str | None = None
    spec: str | None = None
    dataset_id: str | None = None
    state: str | None = None
    planned_steps: int = 0
    kill_step: int = 0
    final_step: int | None = None
    generations: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, int]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    ui_url: str | None = None
    timings_s: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def run_demo(opts: DemoOptions, say: Say) -> Summary:
    """Run the demo; the summary says whether it worked (``ok``) and what did not.

    A KeyboardInterrupt becomes :class:`~runledger.errors.Interrupted`, raised
    after everything started is stopped.
    """
    problems = opts.problems()
    if problems:
        raise DemoError("; ".join(problems))
    layout = prepare_workdir(opts.workdir)
    summary = Summary(workdir=str(layout.root), planned_steps=opts.steps,
                      kill_step=opts.kill_step, spec=str(layout.spec))
    say(f"runledger demo in {layout.root}")
    demo = _Demo(opts, layout, summary, say)
    t0 = time.monotonic()
    try:
        demo.run()
        summary.ok = True
    except (DemoError, StackError, EventsError) as exc:
        summary.error = str(exc)
    except KeyboardInterrupt:
        summary.error = "interrupted"
        raise Interrupted("demo interrupted; everything it started is stopped") from None
    finally:
        with _no_sigint():
            demo.close()
        summary.timings_s["total"] = round(time.monotonic() - t0, 1)
        layout.summary.write_text(json.dumps(summary.to_json(), indent=2) + "\n")
        epilogue(summary, layout.root, layout.stack, say, opts.keep_stack)
    return summary


class _Demo:
    def __init__(self, opts: DemoOptions, layout: Layout, summary: Summary, say: Say) -> None:
        self.opts = opts
        self.layout = layout
        self.summary = summary
        self.say = say
        self.stack: stack.Stack | None = None
        # A secure local stack's credentials directory: each service runs as its role.
        self.credentials: Path | None = None
        # A secure local stack's signing keys: the run is submitted signed by its operator.
        self.keys: Path | None = None
        self.services: Services | None = None
        self.watch: RunWatch | None = None
        self._t = time.monotonic()

    def _lap(self, name: str) -> None:
        now = time.monotonic()
        self.summary.timings_s[name] = round(now - self._t, 1)
        self._t = now

    def run(self) -> None:
        opts, layout, summary, say = self.opts, self.layout, self.summary, self.say
        bootstrap = self._broker()
        summary.bootstrap = bootstrap
        self._lap("broker")
        env = {**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap,
               "RUNLEDGER_HOME": str(layout.root), "RUNLEDGER_DATASETS": str(layout.catalog),
               "PYTHONUNBUFFERED": "1"}
        env.pop("RUNLEDGER_FAULT", None)  # only the demo's own fault, only in the agent
        env.update(self._as_role("operator"))  # submit, status, the queries: an operator's
        summary.dataset_id = build_dataset(layout, env, say)
        domain = write_spec(layout, opts)
        self._lap("dataset")
        self.services = services = Services(env)
        logs = {name: layout.log(name) for name in ("controller", "projector", "agent", "ui")}
        summary.logs = {name: str(path) for name, path in logs.items()}
        summary.logs["workers"] = str(layout.agent)
        summary.db = str(layout.db)
        # Own fencing identity and consumer group: on a shared broker the demo's
        # controller must never fence (or share offsets with) a real one.
        # Under the controller role's prefix, which its ACLs grant.
        tag = f"{CONTROLLER_PREFIX}-{domain}"
        signing = self._signing()
        services.start("controller", ["controller", "--transactional-id", tag, "--group", tag,
                                      *signing],
                       logs["controller"], env={**env, **self._as_role("controller")})
        services.start("projector", ["project", "--db", str(layout.db), "--snapshot-every", "1"],
                       logs["projector"],
                       env={**env, **self._as_role("projector")})
        agent_env = {**env, **self._as_role("agent"), "RUNLEDGER_FAULT": fault_for(opts),
                     "RUNLEDGER_TRACE_BATCHES": str(layout.batches)}
        services.start("agent", ["agent", "--node", opts.node, "--slots", "2", "--domain", domain,
                                 "--work-dir", str(layout.agent), "--heartbeat-interval", "0.5",
                                 "--grace", "5",
                                 # An unsigned controller's commands carry no signature.
                                 *(["--trust-unsigned"] if "--unsigned" in signing else []),
                                 *self._node_key(opts.node, bootstrap)],
                       logs["agent"], env=agent_env)
        say(f"started controller, projector and agent {opts.node} (2 slots); logs in"
            f" {layout.root / 'logs'}")
        summary.ui_url = url = start_ui(services, opts.ui_port, layout.db, logs["ui"], env)
        say(f"live view: {url}  (read-only; open it now: it follows the run as it trains)")
        say(f"$ runledger submit {layout.spec}")
        out = cli_ok(["submit", str(layout.spec), *self._signer(), "--json"], env)
        run_id = str(json.loads(out)["run_id"])
        summary.run_id = run_id
        say(f"  run {run_id}: {opts.steps} steps, a checkpoint every {opts.interval},"
            f" rank 1 killed after step {opts.kill_step} of generation 1")
        say(f"  watch it live: {url}/runs/{run_id}")
        self._lap("services_and_submit")
        self._follow(run_id, bootstrap, logs["controller"], logs["agent"])
        self._check_recovery()
        self._lap("run")
        self._project(run_id, logs["projector"])
        self._lap("projection")
        self._queries(run_id, env)
        self._lap("queries")

    def _broker(self) -> str:
        if self.opts.bootstrap is not None:
            address = self.opts.bootstrap
            self.say(f"using the Kafka broker at {address}")
            check_broker(address)
            stack.cluster_up(address)  # the topics, where missing
            return address
        self.say(f"starting a local Kafka broker in {self.layout.stack} ...")
        self.stack = stack.Stack(self.layout.stack)
        self.summary.stack_started = True
        info = self.stack.up()
        self.keys = info.keys
        if info.credentials is not None:
            self.credentials = info.credentials.parent
            # This process reads the run's facts as an operator would.
            os.environ.update(self._as_role("operator"))
            self.say(f"  broker at {info.bootstrap} (SASL/SCRAM, ACLs; each service runs as "
                     f"its role, credentials in {self.credentials})")
        else:
            self.say(f"  broker at {info.bootstrap}")
        return info.bootstrap

    def _signing(self) -> list[str]:
        """How the demo's controller signs: with the key its stack wrote, else the one
        the environment names, else (a cluster with no key at hand) unsigned."""
        key = self.layout.stack / "keys" / "controller.key"
        if self.stack is not None and key.exists():
            # Unsigned requests are refused (the default): its stack's operator key signs
            # the submission.
            return ["--signing-key", str(key)]
        return [] if os.environ.get(ENV_SIGNING_KEY) else ["--unsigned"]

    def _signer(self) -> list[str]:
        """Who submits: the stack's operator key signs (its principal is the key's); on a
        cluster the demo did not start, the user's own key (RUNLEDGER_KEY): without one
        `submit` says where a key comes from, since the controller refuses unsigned ones."""
        if self.keys is not None:
            return ["--key", str(self.keys / "operator.key")]
        return []

    def _node_key(self, node: str, bootstrap: str) -> list[str]:
        """The agent's own key, which signs its reports: on the demo's own stack, enrolled
        with that stack's admin key (``runledger node enroll``); elsewhere none."""
        if self.keys is None or self.credentials is None:
            return []
        path = self.keys / f"node.{node}.key"
        enroll(bootstrap, node, path, SigningKey.load(self.keys / "admin.key"),
               credentials=str(self.credentials / "admin.properties"), by="demo")
        return ["--node-key", str(path)]

    def _as_role(self, role: str) -> dict[str, str]:
        """The environment that makes a process one role's principal (nothing on a
        cluster the demo did not start: the user's own credentials hold there)."""
        if self.credentials is None:
            return {}
        return {ENV_CREDENTIALS: str(self.credentials / f"{role}.properties")}

    def _follow(self, run_id: str, bootstrap: str, controller_log: Path, agent_log: Path) -> None:
        opts, layout = self.opts, self.layout
        assert self.services is not None
        self.watch = watch = RunWatch(bootstrap, run_id)
        watch.open()
        workers = f" and the worker logs in {layout.agent / run_id}"
        stages = [
            Stage("admission of the run", lambda w: w.generation >= 1, controller_log,
                  f" and {agent_log}"),
            Stage("training step in generation 1",
                  lambda w: w.steps.get(1, 0) >= 1 or w.generation > 1,
                  layout.worker_log(run_id, 1, "r0"), f", {agent_log}{workers}"),
            Stage(f"kill of rank 1 after step {opts.kill_step}",
                  lambda w: any(f.generation == 1 for f in w.failures),
                  layout.worker_log(run_id, 1, "r1"),
                  f" (RUNLEDGER_FAULT={fault_for(opts)} in the agent's environment)"),
            Stage("recovery (generation 2 running)",
                  lambda w: w.generation >= 2 and w.state is not None
                  and w.state.status == Status.RUNNING, controller_log, workers),
            Stage("successful end of the run",
                  lambda w: w.finished is not None and w.finished.outcome == "succeeded",
                  controller_log, workers),
        ]
        deadline = time.monotonic() + opts.timeout_s
        try:
            follow(watch, stages, steps=opts.steps, stall_s=opts.stall_s, deadline=deadline,
                   say=self.say, check=self.services.check_alive)
        finally:
            self._record(watch)

    def _record(self, watch: RunWatch) -> None:
        s = self.summary
        s.state = watch.state.status.value if watch.state else None
        s.generations = [{"generation": g.generation, "reason": g.reason,
                          "resume_step": g.resume_step, "members": len(g.members),
                          "last_step": watch.steps.get(g.generation)}
                         for g in watch.generations]
        s.checkpoints = [{"generation": c.generation, "step": c.step} for c in watch.commits]
        s.failures = [{"generation": f.generation, "class": f.failure_class,
                       "signature": f.signature, "action": f.action} for f in watch.failures]
        s.final_step = watch.state.step if watch.state else None

    def _check_recovery(self) -> None:
        """The run succeeded; check it did so through a recovery from a committed checkpoint."""
        s, opts = self.summary, self.opts
        if len(s.generations) < 2:
            raise DemoError("the run succeeded without a recovery: the injected kill never hit")
        resume = s.generations[1]["resume_step"]
        committed = {c["step"] for c in s.checkpoints if c["generation"] == 1}
        if resume is None or resume not in committed or resume >= opts.kill_step:
            raise DemoError(f"generation 2 resumed from step {resume}, not from a checkpoint"
                            f" committed before the kill at step {opts.kill_step}")
        if s.final_step != opts.steps:
            raise DemoError(f"the run ended at step {s.final_step}, not {opts.steps}")
        self.say(f"recovered: generation 2 resumed from the checkpoint of step {resume};"
                 f" steps {resume + 1}..{opts.kill_step} were replayed")

    def _project(self, run_id: str, log: Path) -> None:
        """Wait for the running projector to publish a snapshot that holds the whole run.

        The projector keeps running: ``query`` and ``report`` read its snapshot
        (DuckDB lets no reader open the file it writes) and say how old it is.
        """
        meta = wait_for_snapshot(self.layout.db, run_id, 120.0, log)
        behind = meta.behind()
        lag = ("unknown" if behind is None
               else ", ".join(f"{t} {n}" for t, n in behind.items()))
        self.say(f"projection caught up to the run's end: the running projector's snapshot"
                 f" {snapshot_path(self.layout.db)} (records behind the log end when it was"
                 f" taken: {lag}); the queries read it while the projector runs")

    def _queries(self, run_id: str, env: dict[str, str]) -> None:
        say, db = self.say, str(self.layout.db)
        say(f"\n$ runledger status {run_id}")
        say(cli_ok(["status", run_id], env).rstrip())
        if self.keys is not None:  # a log the demo's own stack signed
            copy = str(self.layout.root / "log-copy")
            say(f"\n$ runledger audit verify {run_id}")
            say(cli_ok(["audit", "verify", run_id], env).rstrip())
            # The copy's heads are signed by the stack's operator key (events.signed.loghead).
            signer = str(self.keys / "operator.key")
            say(f"$ runledger audit export {copy} --key {signer}   # verify it offline: "
                "audit verify --from")
            say(cli_ok(["audit", "export", copy, "--key", signer], env).rstrip())
        if not self.opts.queries:
            say("\n(--no-queries: skipping the ETTR, provenance and incidents queries and the"
                " report)")
            return
        for name in ("ettr", "provenance", "incidents"):
            say(f"\n$ runledger query {name} {run_id} --db {db}")
            say(cli_ok(["query", name, run_id, "--db", db], env).rstrip())
        report = str(self.layout.report)
        say(f"\n$ runledger report {run_id} --db {db} --html {report}")
        out = cli_ok(["report", run_id, "--db", db, "--html", report], env).rstrip()
        if out:
            say(out)
        self.summary.report = report

    def close(self) -> None:
        """Stop everything this demo started: agent, projector, controller, workers, broker."""
        if self.watch is not None:
            self.watch.close()
        if self.services is not None:
            self.services.stop_all()
            stray = kill_workers(self.layout.agent)
            if stray:
                self.say(f"killed {len(stray)} worker process(es) the agent left: {stray}")
        if self.stack is not None:
            if self.opts.keep_stack:
                self.say(f"the broker keeps running (--keep-stack); stop it with: runledger"
                         f" stack down --data-dir {self.layout.stack}")
            else:
                self.stack.down()


@contextmanager
def _no_sigint() -> Iterator[None]:
    """Hold Ctrl-C off while cleaning up, so a second one cannot leave processes behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
