"""Who may look at the live view: loopback, else an operator the Kafka cluster vouches for.

The gate's rules are tested with a login and a key ring given as functions; the
real login is then tried against the session's secure broker, with the right
and a wrong password, so a password the cluster refuses is refused here too.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from events.kafka.connection import ENV_CREDENTIALS, parse_credentials
from runledger.errors import UsageError
from runledger.ui import auth
from runledger.ui.auth import Gate, basic_credentials, check_listen, is_loopback


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture(autouse=True)
def quick_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "REFUSED_PAUSE_S", 0.0)


def test_loopback_addresses_are_told_apart_from_the_rest() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "example.org"))


def test_a_non_loopback_address_is_refused_without_tls() -> None:
    check_listen("127.0.0.1", tls=False)
    check_listen("0.0.0.0", tls=True)
    with pytest.raises(UsageError, match="--tls-cert FILE and --tls-key FILE"):
        check_listen("0.0.0.0", tls=False)


def test_basic_credentials_are_parsed_or_refused() -> None:
    assert basic_credentials(header("alice", "p:w")) == ("alice", "p:w")
    for bad in (None, "", "Bearer x", "Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode(),
                "Basic " + base64.b64encode(b":pw").decode()):
        assert basic_credentials(bad) is None


class Cluster:
    """A login and a key ring as the gate sees them; counts the logins."""

    def __init__(self, users: dict[str, str], roles: dict[str, frozenset[str]]) -> None:
        self.users, self.role_of, self.logins = users, roles, 0

    def login(self, user: str, password: str) -> str | None:
        self.logins += 1
        return None if self.users.get(user) == password else "SASL authentication failed"

    def roles(self, user: str) -> frozenset[str]:
        return self.role_of.get(user, frozenset())


def test_an_operator_is_let_in_and_remembered_for_a_while() -> None:
    c = Cluster({"ops": "pw"}, {"ops": frozenset({"operator"})})
    now = [100.0]
    gate = Gate(c.login, c.roles, clock=lambda: now[0])
    assert gate.check(header("ops", "pw")).principal == "ops"
    assert gate.check(header("ops", "pw")).principal == "ops"
    assert c.logins == 1  # the second request did not log in to Kafka again
    now[0] += auth.REMEMBER_S + 1
    assert gate.check(header("ops", "pw")).principal == "ops"
    assert c.logins == 2


def test_wrong_passwords_and_roles_without_an_operator_key_are_refused() -> None:
    c = Cluster({"ops": "pw", "agent-1": "pw2"}, {"ops": frozenset({"operator"}),
                                                  "agent-1": frozenset({"agent"})})
    gate = Gate(c.login, c.roles)
    assert gate.check(None).reason == "no credentials"
    wrong = gate.check(header("ops", "nope"))
    assert wrong.principal is None and "refused 'ops'" in wrong.reason
    assert "nope" not in wrong.reason  # the password is never repeated
    agent = gate.check(header("agent-1", "pw2"))
    assert agent.principal is None and "no live operator or admin key" in agent.reason
    assert "agent" in agent.reason
    # A refused pair is not remembered: the right one still works afterwards.
    assert gate.check(header("ops", "pw")).principal == "ops"


def test_an_open_gate_lets_everyone_in() -> None:
    assert Gate(None, None).check(None).principal == "local"


@pytest.mark.kafka
def test_the_cluster_itself_checks_the_password(bootstrap: str) -> None:
    settings = parse_credentials(Path(os.environ[ENV_CREDENTIALS]).read_text(), "session")
    user, password = settings["sasl.username"], settings["sasl.password"]
    login = auth.kafka_login(bootstrap)
    assert login(user, password) is None
    refused = login(user, password + "-wrong")
    assert refused is not None and "auth" in refused.lower()
    # The session's principal is the stack's admin, with its key on runledger.keys.
    assert "admin" in auth.key_roles(bootstrap)(user)
    assert auth.key_roles(bootstrap)("nobody-at-all") == frozenset()
