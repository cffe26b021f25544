"""Real processes on a private broker: a controller, node agents, the CLI.

Each scenario gets its own single-node Kafka (a few seconds to start), because
a controller acts on every run it finds on the log: sharing one broker would
let one test's controller admit another test's runs. Each cluster's
controllers sign with the key its secure stack registered (``Cluster.controller_key``)
and refuse unsigned requests, so the CLI signs: with the stack's operator key
(``RUNLEDGER_KEY``), or as a named principal with ``Cluster.signed_as``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from events.kafka.consume import read_log
from events.kafka.runkeys import RunKey
from events.model import Event
from events.record import Record
from events.signed.signing import SigningKey
from events.topics import COMMANDS, RUNS
from runledger.nodekeys import enroll
from runledger.signer import ENV_KEY

PY = sys.executable
T = TypeVar("T")


def spec(name: str, worker_args: list[str], **overrides: Any) -> dict[str, Any]:
    """A valid run spec that runs the test worker; fast heartbeats and backoffs."""
    doc: dict[str, Any] = {
        "name": name,
        "code_version": "3f1c2a9b7d4e5f60718293a4b5c6d7e8f9012345",
        "command": [PY, "-m", "agent.testworker", *worker_args],
        "model": {"arch": "tiny"},
        "dataset": "sha256:" + "ab" * 32,
        "topology": {"replicas": 2, "slots_per_node": 2},
        "resume": "exact",
        "rpo_s": 600,
        "rto_s": 300,
        "heartbeat": {"interval_s": 0.3, "timeout_s": 3.0, "stall_timeout_s": 6.0},
        "retry": {
            "default": {
                "attempts": 5,
                "backoff_base_s": 0.5,
                "backoff_cap_s": 4.0,
                "escalate_after": 3,
            }
        },
        "cancel_authority": ["oncall"],
        "checkpoint": {"policy": "fixed", "interval_steps": 100},
    }
    doc.update(overrides)
    return doc


class Cluster:
    def __init__(self, bootstrap: str, work: Path, keys: Path | None = None) -> None:
        self.bootstrap = bootstrap
        self.work = work
        self.env = {**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap}
        if keys is not None:
            # The controller refuses unsigned requests: the CLI signs, as a user's does,
            # with the key RUNLEDGER_KEY names (its principal: "operator").
            self.env[ENV_KEY] = str(keys / "operator.key")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.keys = keys  # the stack's key files (admin.key, controller.key, operator.key)
        self.registered: set[str] = set()  # operators whose keys a test registered
        self.key_files: dict[str, Path] = {}  # principal -> its key file (signed_as)
        # The key every controller of this cluster signs facts and commands with: the
        # one its secure stack registered on runledger.keys, which the agents check.
        # A plaintext stack registers none: its controllers sign nothing and its
        # agents take unsigned commands on the broker's word.
        self.controller_key_file = keys / "controller.key" if keys is not None else None
        self.controller_key = (SigningKey.load(self.controller_key_file)
                               if self.controller_key_file is not None else None)
        self._signing = (["--signing-key", str(self.controller_key_file)]
                         if self.controller_key_file is not None else ["--unsigned"])
        self._trust = [] if self.controller_key_file is not None else ["--trust-unsigned"]
        # A plaintext stack has no keys log to register an operator's key on.
        self._requests = [] if keys is not None else ["--trust-unsigned"]

    # -- processes ----------------------------------------------------------

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen[bytes]:
        log = (self.work / log_name).open("ab")
        proc = subprocess.Popen(
            [PY, "-m", "runledger.cli", *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def controller(self, txn_id: str = "ctl", name: str = "controller", *extra: str,
                   group: str = "ctl") -> subprocess.Popen[bytes]:
        return self._spawn(
            ["controller", "--transactional-id", txn_id, "--group", group, "--tick", "0.1",
             # The checkpoint roots of these tests (its run manifests go there).
             "--allow-root", str(self.work), *self._signing, *self._requests, *extra],
            f"{name}.log",
        )

    def node_key(self, node: str) -> list[str]:
        """``--node-key`` of an agent of ``node``, enrolled with the stack's admin key
        (``runledger node enroll``); none on a plaintext stack, which takes unsigned reports."""
        if self.keys is None:
            return []
        path = self.work / f"node.{node}.key"
        enroll(self.bootstrap, node, path, SigningKey.load(self.keys / "admin.key"))
        return ["--node-key", str(path)]

    def run_key(self, run: str, generation: int, node: str) -> RunKey | None:
        """A run key for ``run``'s ``generation`` certified by ``node``'s enrolled key, as
        that node's agent gives its workers (``events.kafka.runkeys``): what a test that writes
        a worker's reports itself signs them with. None on a plaintext stack."""
        path = self.work / f"node.{node}.key"
        if self.keys is None:
            return None
        assert path.is_file(), f"node {node} has no key yet: start its agent first"
        return RunKey.issue(SigningKey.load(path), run, generation, node)

    def agent(self, node: str, slots: int, grace: float = 3.0,
              *extra: str) -> subprocess.Popen[bytes]:
        return self._spawn(
            [
                "agent",
                "--node",
                node,
                "--slots",
                str(slots),
                "--work-dir",
                str(self.work / node),
                # Checkpoint roots of these tests sit beside the agents' work dirs.
                "--allow-root",
                str(self.work),
                "--heartbeat-interval",
                "0.3",
                "--grace",
                str(grace),
                *self._trust,
                *self.node_key(node),
                *extra,
            ],
            f"agent-{node}.log",
        )

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PY, "-m", "runledger.cli", *args],
            env=self.env,
            text=True,
            capture_output=True,
            timeout=120,
        )

    def submit(self, doc: dict[str, Any], principal: str = "alice") -> str:
        path = self.work / f"{doc['name']}.yaml"
        path.write_text(yaml.safe_dump(doc))
        done = self.cli("submit", str(path), *self.signed_as(principal))
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def signed_as(self, principal: str) -> list[str]:
        """``--key FILE`` of a key registered to ``principal`` (role operator) on this
        cluster's keys log, made and registered once per cluster as an admin does with
        docs/security.md's `runledger key register`: a request is its key's principal's."""
        if self.keys is None:
            return []  # a plaintext stack: nothing to sign with
        path = self.key_files.get(principal)
        if path is None:
            path = self.work / "keys" / f"{principal}.key"
            path.parent.mkdir(mode=0o700, exist_ok=True)
            key = SigningKey.generate()
            key.save(path)
            done = self.cli("key", "register", principal, "--role", "operator",
                            "--public", key.public.raw.hex(),
                            "--admin-key", str(self.keys / "admin.key"))
            assert done.returncode == 0, done.stderr
            self.key_files[principal] = path
        return ["--key", str(path)]

    def log_of(self, name: str) -> str:
        path = self.work / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        # Workers live in their own sessions: make sure none outlives the test.
        for pid in worker_pids(None):
            if _environ(pid).get("RUNLEDGER_BOOTSTRAP") == self.bootstrap:
                os.kill(pid, signal.SIGKILL)

    # -- the log ------------------------------------------------------------

    def records(self, run_id: str, topic: str = RUNS) -> list[Record]:
        return [r for r in read_log(self.bootstrap, topic) if r.event.run_id == run_id]

    def facts(self, run_id: str) -> list[Event]:
        return [r.event for r in self.records(run_id)]

    def commands(self, run_id: str) -> list[Event]:
        return [r.event for r in self.records(run_id, COMMANDS)]

    def wait_facts(
        self,
        run_id: str,
        until: Callable[[list[Event]], bool],
        timeout: float = 60.0,
        what: str = "",
    ) -> list[Event]:
        return wait(
            lambda: _hit(self.facts(run_id), until),
            timeout,
            what or "facts",
            lambda: self._diagnose(run_id),
        )

    def _diagnose(self, run_id: str) -> str:
        facts = [f"{e.event_type}(g{e.generation})" for e in self.facts(run_id)]
        tail = self.log_of("controller")[-2000:]
        return f"facts: {facts}\ncontroller log tail:\n{tail}"


def _hit(facts: list[Event], until: Callable[[list[Event]], bool]) -> list[Event] | None:
    return facts if until(facts) else None


def wait(
    probe: Callable[[], T | None],
    timeout: float,
    what: str,
    diagnose: Callable[[], str] = lambda: "",
) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got is not None and got is not False:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{diagnose()}")


def of_type(facts: list[Event], name: str) -> list[Any]:
    return [e for e in facts if e.event_type == name]


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def worker_pids(
    run_id: str | None, generation: int | None = None, logical_id: str | None = None
) -> list[int]:
    """Live worker processes, found by the identity the agent put in their environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        env = _environ(int(entry.name))
        if "RUNLEDGER_LOGICAL_ID" not in env:
            continue
        if run_id is not None and env.get("RUNLEDGER_RUN_ID") != run_id:
            continue
        if generation is not None and env.get("RUNLEDGER_GENERATION") != str(generation):
            continue
        if logical_id is not None and env.get("RUNLEDGER_LOGICAL_ID") != logical_id:
            continue
        found.append(int(entry.name))
    return found


def demo_processes(work: Path) -> list[int]:
    """Live processes the demo started (it gives them RUNLEDGER_HOME=<workdir>)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RUNLEDGER_HOME={work}".encode() in environ:
            found.append(int(entry.name))
    return found
