"""``runledger node enroll`` and the agent's node key, on the session's (secure) broker.

``node enroll`` (with the admin's credentials, as ``key register``) writes the
node's key file 0600 and registers it to ``node.NAME`` as an agent key; enrolling
again changes nothing; a key already another node's is refused. An agent given
a key the log does not register refuses to start, naming the enroll step, and
an agent on the remembered local stack enrolls itself on first start.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from events.kafka.connection import ENV_CREDENTIALS
from events.model import AgentRegistered, node_key
from events.signed.signing import SigningKey
from events.workerenv import ENV_BOOTSTRAP
from runledger import current, keylog
from tests.agent.tail import Tail, kill_tree
from tests.runledger.commands.test_signed_requests import cli, refused, stack_dir

pytestmark = pytest.mark.kafka


def admin_env() -> dict[str, str]:
    return {**os.environ, ENV_CREDENTIALS: str(stack_dir() / "credentials" / "admin.properties")}


def admin_key() -> str:
    return str(stack_dir() / "keys" / "admin.key")


def entry_of(bootstrap: str, key_id: str) -> tuple[str, str] | None:
    entry = keylog.load_ring(bootstrap).ring.get(key_id)
    return (entry.principal, entry.role) if entry is not None else None


def test_enroll_writes_the_key_0600_and_registers_it_once(bootstrap: str, tmp_path: Path) -> None:
    node = f"n-{uuid.uuid4().hex[:8]}"
    key_file = tmp_path / "n.key"
    out = cli("node", "enroll", node, "--admin-key", admin_key(), "--key", str(key_file),
              "--json", env=admin_env())
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["node"], doc["principal"]) == (node, f"node.{node}")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert doc["key_id"] == SigningKey.load(key_file).key_id
    assert entry_of(bootstrap, doc["key_id"]) == (f"node.{node}", "agent")
    assert f"--node-key {key_file}" in out.stderr

    records = keylog.load_ring(bootstrap).records
    again = cli("node", "enroll", node, "--admin-key", admin_key(), "--key", str(key_file),
                env=admin_env())
    assert again.returncode == 0 and "already registered" in again.stdout, again.stderr
    assert keylog.load_ring(bootstrap).records == records

    # One key, one node: another node may not be enrolled with it.
    refused(cli("node", "enroll", f"{node}-b", "--admin-key", admin_key(), "--key",
                str(key_file), env=admin_env()), f"registered to 'node.{node}'")
    refused(cli("node", "enroll", "../up", "--admin-key", admin_key(), env=admin_env()),
            "bad_name")


def test_an_agent_with_a_key_nobody_registered_refuses_to_start(bootstrap: str,
                                                                tmp_path: Path) -> None:
    key_file = tmp_path / "stray.key"
    SigningKey.generate().save(key_file)
    out = subprocess.run([sys.executable, "-m", "runledger.cli", "agent", "--node", "stray-1",
                          "--slots", "1", "--work-dir", str(tmp_path / "w"),
                          "--node-key", str(key_file)],
                         env={**os.environ, ENV_BOOTSTRAP: bootstrap}, capture_output=True,
                         text=True, timeout=60, check=False)
    refused(out, "runledger node enroll stray-1")
    assert "is not registered on runledger.keys" in out.stderr


def test_an_agent_on_the_local_stack_enrolls_itself(bootstrap: str, tmp_path: Path) -> None:
    node = f"self-{uuid.uuid4().hex[:8]}"
    home = tmp_path / "home"
    current.remember(home, stack_dir())  # as `runledger stack up` leaves it
    env = {k: v for k, v in os.environ.items() if k not in (ENV_BOOTSTRAP, ENV_CREDENTIALS)}
    log = tmp_path / "agent.log"
    tail = Tail(bootstrap)
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "runledger.cli", "agent", "--node", node,
                                 "--slots", "1", "--work-dir", str(tmp_path / "w")],
                                env={**env, "RUNLEDGER_HOME": str(home)}, stdout=sink,
                                stderr=sink)
    try:
        tail.wait_for("its registration", lambda: bool(tail.of(node_key(node), AgentRegistered)))
    finally:
        kill_tree(proc, log)
        tail.close()
    key_file = stack_dir() / "keys" / f"node.{node}.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert entry_of(bootstrap, SigningKey.load(key_file).key_id) == (f"node.{node}", "agent")
    assert "node key: made and registered" in log.read_text()
