"""The stack ``stack up`` remembers: the pointer, the fallback order, the credentials offered.

No broker: the remembered stack's ``stack.json`` names a port nobody listens on,
and the one-line error names the address a command chose. The broker side (up,
a command with nothing exported, down) is in tests/runledger/stack/test_cluster.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from events.errors import BrokerUnavailable
from events.kafka.connection import ENV_CREDENTIALS
from events.workerenv import ENV_BOOTSTRAP
from runledger import config, current
from runledger.errors import UsageError


def fake_stack(data_dir: Path, port: int = 1, secure: bool = True) -> Path:
    """A data directory as `stack up` leaves it, for a broker that is not running."""
    data_dir.mkdir(parents=True)
    (data_dir / "stack.json").write_text(json.dumps({
        "version": 1, "cluster_id": "x", "kafka_version": "4.1.0", "secure": secure,
        "tls": False, "nodes": [{"node_id": 1, "port": port, "controller_port": 2}]}))
    creds = data_dir / "credentials"
    creds.mkdir(mode=0o700)
    for role in ("admin", "operator"):
        path = creds / f"{role}.properties"
        path.touch(mode=0o600)
        path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                        f"sasl.username={role}\nsasl.password=secret-{role}\n")
    return data_dir


def test_remember_recall_forget(tmp_path: Path) -> None:
    home = tmp_path / "home"
    stack = fake_stack(tmp_path / "d", port=4242)
    assert current.recall(home) is None
    pointer = current.remember(home, stack)
    assert oct(pointer.stat().st_mode & 0o777) == "0o600"
    got = current.recall(home)
    assert got == current.Remembered(stack.resolve(), "127.0.0.1:4242",
                                     stack.resolve() / "credentials" / "operator.properties")
    assert not current.forget(home, tmp_path / "other")  # not the remembered one: kept
    assert current.recall(home) is not None
    assert current.forget(home, stack) and current.recall(home) is None


def test_an_insecure_or_purged_stack(tmp_path: Path) -> None:
    home = tmp_path / "home"
    plain = fake_stack(tmp_path / "plain", secure=False)
    current.remember(home, plain)
    recalled = current.recall(home)
    assert recalled is not None and recalled.credentials is None
    (plain / "stack.json").unlink()  # `stack down --purge` of another shell
    assert current.recall(home) is None


def test_a_pointer_others_may_rewrite_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pointer = current.remember(home, fake_stack(tmp_path / "d"))
    pointer.chmod(0o666)
    with pytest.raises(UsageError, match=r"may be rewritten by other users.*chmod 600"):
        current.recall(home)


def test_the_operator_credentials_go_only_to_the_remembered_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    stack = fake_stack(tmp_path / "d", port=4242)
    monkeypatch.setenv("RUNLEDGER_HOME", str(home))
    monkeypatch.delenv(ENV_BOOTSTRAP, raising=False)
    monkeypatch.delenv(ENV_CREDENTIALS, raising=False)
    with pytest.raises(BrokerUnavailable, match=r"pass --bootstrap, set RUNLEDGER_BOOTSTRAP, or"
                                                r" start a local stack with `runledger stack up`"):
        config.bootstrap()
    current.remember(home, stack)
    assert config.bootstrap("elsewhere:9092") == "elsewhere:9092"
    assert ENV_CREDENTIALS not in os.environ  # never the stack's password for another cluster
    assert config.bootstrap() == "127.0.0.1:4242"
    assert os.environ[ENV_CREDENTIALS] == str(stack.resolve() / "credentials/operator.properties")
    monkeypatch.setenv(ENV_CREDENTIALS, "/mine.properties")
    config.bootstrap()
    assert os.environ[ENV_CREDENTIALS] == "/mine.properties"  # the user's choice stands


def runledger(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in (ENV_BOOTSTRAP, ENV_CREDENTIALS)}
    return subprocess.run([sys.executable, "-m", "runledger.cli", *args], capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**base, "RUNLEDGER_HOME": str(home), "RUNLEDGER_RETRY_S": "0",
                               **env})


def test_commands_find_the_remembered_stack_and_the_overrides_win(tmp_path: Path) -> None:
    home = tmp_path / "home"
    none = runledger(home, "status", "some-run")
    assert none.returncode == 1 and "pass --bootstrap, set RUNLEDGER_BOOTSTRAP" in none.stderr
    assert str(home / "current-stack.json") in none.stderr
    current.remember(home, fake_stack(tmp_path / "d", port=1))
    found = runledger(home, "status", "some-run")
    assert found.returncode == 1 and "127.0.0.1:1" in found.stderr, found.stderr
    env = runledger(home, "runs", RUNLEDGER_BOOTSTRAP="127.0.0.1:3")
    assert "127.0.0.1:3" in env.stderr and "127.0.0.1:1" not in env.stderr, env.stderr
    flag = runledger(home, "runs", "--bootstrap", "127.0.0.1:2", RUNLEDGER_BOOTSTRAP="127.0.0.1:3")
    assert "127.0.0.1:2" in flag.stderr and "127.0.0.1:3" not in flag.stderr, flag.stderr


def test_the_services_get_their_own_role_and_the_controller_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    stack = fake_stack(tmp_path / "d", port=4242)
    creds = stack / "credentials"
    for role in ("controller", "agent"):
        (creds / f"{role}.properties").touch(mode=0o600)
    (stack / "keys").mkdir()
    (stack / "keys" / "controller.key").touch(mode=0o600)
    (stack / "keys" / "operator.key").touch(mode=0o600)
    current.remember(home, stack)
    agent = current.recall(home, "agent")
    assert agent is not None
    assert agent.credentials == stack.resolve() / "credentials" / "agent.properties"
    assert agent.signing_key is None  # only the controller and a person get a key
    ctl = current.recall(home, "controller")
    assert ctl is not None and ctl.signing_key == stack.resolve() / "keys" / "controller.key"
    person = current.recall(home)  # a person's commands sign requests with the operator key
    assert person is not None and person.signing_key == stack.resolve() / "keys" / "operator.key"
    projector = current.recall(home, "projector")
    assert projector is not None and projector.credentials is None  # no file: none offered
    with pytest.raises(ValueError, match="'admin' is not one of"):
        current.recall(home, "admin")  # never the admin's powers by default
    monkeypatch.setenv("RUNLEDGER_HOME", str(home))
    monkeypatch.delenv(ENV_BOOTSTRAP, raising=False)
    monkeypatch.delenv(ENV_CREDENTIALS, raising=False)
    assert config.stack_signing_key() == stack.resolve() / "keys" / "controller.key"
    assert config.stack_signing_key(role="operator") == stack.resolve() / "keys" / "operator.key"
    assert config.stack_signing_key("127.0.0.1:9", "operator") is None  # another cluster
    assert config.stack_signing_key("elsewhere:9092") is None  # not for another cluster
    config.bootstrap(role="agent")
    assert os.environ[ENV_CREDENTIALS] == str(stack.resolve() / "credentials/agent.properties")
