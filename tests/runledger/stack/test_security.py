"""The secure stack against its real broker: principals, roles as ACLs, and refusals.

Runs against the session's broker, which ``make test`` starts secure (SASL/SCRAM,
StandardAuthorizer, no ACL means no access) with the admin's credentials in
``RUNLEDGER_CREDENTIALS``. Principals are made the way docs/operating.md says, with
``runledger principal add``; every refusal asserted here is the broker's (a
client-side check would not produce a Kafka authorization error).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from events.errors import NotAuthorized
from events.kafka.broker import check_broker
from events.kafka.clients import EventProducer
from events.kafka.connection import ENV_CREDENTIALS
from events.topics import COMMANDS, REPORTS, REQUESTS, RUNS
from runledger.stack.acls import Role, grants_for
from runledger.stack.principals import current_acls
from tests.events.builders import Ev
from tests.stacks import session_credentials

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(session_credentials() is None,
                       reason="needs the secure broker `make test` starts"),
]


def runledger(*args: str, credentials: Path | None, cwd: Path | None = None
              ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, ENV_CREDENTIALS: str(credentials or ""), "RUNLEDGER_RETRY_S": "5"}
    return subprocess.run([sys.executable, "-m", "runledger.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def admin() -> Path:
    creds = session_credentials()
    assert creds is not None
    return creds


@pytest.fixture(scope="module")
def principals(admin: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[Role, Path]:
    """One new principal per role, made with `runledger principal add` as the admin."""
    where = tmp_path_factory.mktemp("principals")
    suffix = os.urandom(3).hex()
    out: dict[Role, Path] = {}
    for i, role in enumerate(Role):
        name = f"{role.value}-{suffix}"
        as_json = ["--json"] if i % 2 else []  # both forms of the command's answer
        done = runledger("principal", "add", name, "--role", role.value, *as_json,
                         credentials=admin, cwd=where)
        assert done.returncode == 0, done.stderr
        if as_json:
            doc = json.loads(done.stdout)
            assert (doc["principal"], doc["role"], doc["credentials"]) == (
                name, role.value, f"{name}.properties") and doc["acls"] > 0
            assert "password" not in done.stdout
        else:
            assert f"principal {name} ({role.value}" in done.stdout
        out[role] = where / f"{name}.properties"
    return out


@pytest.fixture
def as_principal(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    def use(path: Path | None) -> None:
        monkeypatch.setenv(ENV_CREDENTIALS, str(path or ""))
    yield use


def write(bootstrap: str, topic: str, run_id: str) -> list[str]:
    """Write one event to ``topic``; the delivery failures (empty: delivered)."""
    failures: list[str] = []
    producer = EventProducer(bootstrap, config={"message.timeout.ms": 10_000})
    producer.send(topic, Ev(run_id).heartbeat(1, "r0", step=1, node="n1", n=1),
                  on_failure=failures.append)
    try:
        producer.flush(20)
    except NotAuthorized as exc:
        failures.append(str(exc))
    return failures


@pytest.mark.parametrize(("role", "topic"), [
    (Role.OPERATOR, RUNS), (Role.OPERATOR, COMMANDS), (Role.OPERATOR, REPORTS),
    (Role.AGENT, REQUESTS), (Role.AGENT, RUNS), (Role.AGENT, COMMANDS),
    (Role.PROJECTOR, RUNS), (Role.PROJECTOR, REPORTS), (Role.PROJECTOR, REQUESTS),
    (Role.WORKER, REQUESTS), (Role.WORKER, RUNS), (Role.WORKER, COMMANDS),
])
def test_a_role_may_not_write_what_it_does_not_own(
        bootstrap: str, principals: dict[Role, Path], as_principal: object, run_id: str,
        role: Role, topic: str) -> None:
    as_principal(principals[role])  # type: ignore[operator]
    failures = write(bootstrap, topic, run_id)
    assert failures, f"{role} wrote {topic}"
    name = principals[role].stem
    # The projector may write nothing at all: the broker may refuse it a producer
    # id before it refuses the topic, and the message says which.
    # (A refused producer id purges the queue first; the refusal itself follows.)
    said = [f for f in failures if f"principal {name!r} may not write " in f]
    assert said, failures
    assert topic in said[0] and "the broker refused it" in said[0]


@pytest.mark.parametrize(("role", "topic"), [
    (Role.OPERATOR, REQUESTS), (Role.AGENT, REPORTS), (Role.CONTROLLER, RUNS),
    (Role.CONTROLLER, COMMANDS), (Role.WORKER, REPORTS),
])
def test_a_role_writes_what_it_owns(bootstrap: str, principals: dict[Role, Path],
                                    as_principal: object, run_id: str, role: Role,
                                    topic: str) -> None:
    as_principal(principals[role])  # type: ignore[operator]
    assert write(bootstrap, topic, run_id) == []


def test_the_cluster_holds_exactly_each_roles_grants(
        bootstrap: str, principals: dict[Role, Path], admin: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CREDENTIALS, str(admin))
    for role, path in principals.items():
        assert current_acls(bootstrap, path.stem) == list(grants_for(role))


def test_no_or_wrong_credentials_are_refused_by_the_broker(
        bootstrap: str, principals: dict[Role, Path], tmp_path: Path,
        as_principal: object) -> None:
    as_principal(None)  # type: ignore[operator]
    with pytest.raises(Exception, match="set RUNLEDGER_CREDENTIALS"):
        check_broker(bootstrap, timeout_s=3)
    forged = tmp_path / "forged.properties"
    text = principals[Role.OPERATOR].read_text()
    forged.write_text(text.replace("sasl.password=", "sasl.password=x"))
    forged.chmod(0o600)
    as_principal(forged)  # type: ignore[operator]
    with pytest.raises(NotAuthorized, match="did not accept the credentials of principal"):
        check_broker(bootstrap, timeout_s=10)


def test_the_cli_names_the_principal_the_operation_and_the_topic(
        principals: dict[Role, Path]) -> None:
    done = runledger("events", "dump", "--topic", COMMANDS,
                     credentials=principals[Role.OPERATOR])
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    name = principals[Role.OPERATOR].stem
    assert f"principal {name!r} may not read topic {COMMANDS}: the broker refused it" in lines[0]


def test_a_worker_reads_no_run_s_commands(principals: dict[Role, Path]) -> None:
    # Every worker once held its agent's credentials and could read every run's commands.
    done = runledger("events", "dump", "--topic", COMMANDS, credentials=principals[Role.WORKER])
    assert done.returncode == 1 and "Traceback" not in done.stderr
    name = principals[Role.WORKER].stem
    assert f"principal {name!r} may not read topic {COMMANDS}: the broker refused it" \
        in done.stderr
    readable = runledger("events", "dump", "--topic", RUNS, credentials=principals[Role.WORKER])
    assert readable.returncode == 0, readable.stderr


def test_only_the_admin_adds_principals(principals: dict[Role, Path], tmp_path: Path) -> None:
    done = runledger("principal", "add", "mallory", "--role", "controller",
                     credentials=principals[Role.OPERATOR], cwd=tmp_path)
    assert done.returncode == 1
    assert "the broker refused principal" in done.stderr
    assert not (tmp_path / "mallory.properties").exists()


def test_credentials_are_owner_only_and_no_password_reaches_a_log(
        principals: dict[Role, Path], admin: Path) -> None:
    creds_dir = admin.parent
    assert stat.S_IMODE(creds_dir.stat().st_mode) == 0o700
    passwords = []
    for path in [*creds_dir.glob("*.properties"), *principals.values()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        passwords += [line.partition("=")[2] for line in path.read_text().splitlines()
                      if line.startswith("sasl.password=")]
    assert len(passwords) >= 9
    data_dir = creds_dir.parent
    logs = [p for p in data_dir.rglob("*.log*") if p.is_file()]
    assert logs, f"no broker log under {data_dir}"
    for log in logs:
        text = log.read_text(errors="replace")
        assert not any(pw in text for pw in passwords), f"a password is in {log}"


def test_a_credentials_file_others_can_read_is_refused(
        principals: dict[Role, Path], tmp_path: Path) -> None:
    loose = tmp_path / "loose.properties"
    loose.write_text(principals[Role.OPERATOR].read_text())
    loose.chmod(0o644)
    done = runledger("runs", credentials=loose)
    assert done.returncode == 1
    assert f"credentials file {loose} is readable by other users" in done.stderr
    assert f"chmod 600 {loose}" in done.stderr
