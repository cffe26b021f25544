"""Who may look: anyone on this machine at a loopback address, an operator elsewhere.

On a loopback address (the default, ``127.0.0.1``) the page is as open as
``runledger status`` on the same machine. On any other address the server
refuses to start without TLS (``--tls-cert``/``--tls-key``), and every request
must carry HTTP Basic credentials that are a Kafka principal's own: the user
name and password the cluster knows (SCRAM or PLAIN). They are checked where
they are kept, by the cluster: a SASL login with them, over the same
security protocol and CA as the view's own client (:func:`kafka_login`), and
the principal must hold a live key registered for the ``operator`` or
``admin`` role on ``runledger.keys``. No password is stored; a login that
worked is remembered for ``REMEMBER_S`` by a digest of the pair, so a page
polling every few seconds does not log in to Kafka each time. A refused login
is answered after ``REFUSED_PAUSE_S``, one at a time, so guessing is slow.

Tested in tests/runledger/ui/test_auth.py and tests/runledger/ui/test_server.py.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runledger.errors import UsageError

REMEMBER_S = 300.0
REFUSED_PAUSE_S = 1.0
LOGIN_S = 10.0
ROLES = frozenset({"operator", "admin"})
REALM = "runledger live view: a Kafka operator's user name and password"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a literal address or ``localhost``) reaches only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen(host: str, tls: bool) -> None:
    """Refuse to serve a non-loopback address in the clear: Basic credentials would
    travel unencrypted."""
    if not is_loopback(host) and not tls:
        raise UsageError(
            f"--host {host} is reachable from other machines: give --tls-cert FILE and"
            " --tls-key FILE (PEM) so an operator's password never crosses the network in"
            " the clear, or keep the default --host 127.0.0.1 and reach it through an SSH"
            " tunnel")


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """The (user, password) of an ``Authorization: Basic ...`` header, else None."""
    if not header or not header.startswith("Basic "):
        return None
    try:
        text = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = text.partition(":")
    if not sep or not user:
        return None
    return user, password


@dataclass(frozen=True, slots=True)
class Verdict:
    principal: str | None
    reason: str  # why not, for the log and the 401 page (never the password)


Login = Callable[[str, str], str | None]  # (user, password) -> None if the cluster took it
Roles = Callable[[str], frozenset[str]]  # principal -> the roles of its live keys


class Gate:
    """The credential check of a non-loopback view; ``open`` lets everyone in."""

    def __init__(self, login: Login | None, roles: Roles | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.open = login is None
        self._login = login
        self._roles = roles
        self._clock = clock
        self._ok: dict[str, float] = {}
        self._lock = threading.Lock()
        self._refusing = threading.Lock()

    def check(self, header: str | None) -> Verdict:
        if self.open:
            return Verdict("local", "loopback")
        pair = basic_credentials(header)
        if pair is None:
            return Verdict(None, "no credentials")
        user, password = pair
        digest = hashlib.sha256(f"{user}\0{password}".encode()).hexdigest()
        now = self._clock()
        with self._lock:
            if self._ok.get(digest, -1.0) > now:
                return Verdict(user, "remembered")
        verdict = self._ask(user, password)
        if verdict.principal is not None:
            with self._lock:
                self._ok[digest] = now + REMEMBER_S
        else:
            with self._refusing:  # one refused try at a time, each slow
                time.sleep(REFUSED_PAUSE_S)
        return verdict

    def _ask(self, user: str, password: str) -> Verdict:
        assert self._login is not None and self._roles is not None
        problem = self._login(user, password)
        if problem is not None:
            return Verdict(None, f"the Kafka cluster refused {user!r}: {problem}")
        roles = self._roles(user)
        if not roles & ROLES:
            held = ", ".join(sorted(roles)) or "none"
            return Verdict(None, f"{user!r} holds no live operator or admin key on"
                                 f" runledger.keys (its roles: {held})")
        return Verdict(user, "logged in")


def kafka_login(bootstrap: str) -> Login:
    """A login check against the cluster: metadata fetched as the given user, with the
    view's own security protocol and TLS settings (its ``sasl.*`` replaced)."""

    def login(user: str, password: str) -> str | None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        from events.kafka.connection import AUTHENTICATION_CODES, KAFKA_LOG, security_settings
        own = security_settings()
        if "sasl.mechanism" not in own:
            return "the cluster takes no passwords (its clients do not use SASL)"
        settings: dict[str, Any] = {k: v for k, v in own.items() if not k.startswith("sasl.")}
        settings.update({"sasl.mechanism": own["sasl.mechanism"], "sasl.username": user,
                         "sasl.password": password, "bootstrap.servers": bootstrap})
        refusals: list[str] = []

        def on_error(err: Any) -> None:
            if err.code() in AUTHENTICATION_CODES:
                refusals.append(err.str())

        conf: dict[str, Any] = {**settings, "error_cb": on_error, "logger": KAFKA_LOG}
        client = AdminClient(conf)
        deadline = time.monotonic() + LOGIN_S
        while True:
            try:
                client.list_topics(timeout=1.0)
                return None
            except KafkaException as exc:
                client.poll(0.1)  # serves error_cb: a refused login is reported there
                if refusals:
                    return refusals[-1]
                if time.monotonic() > deadline:
                    return f"no answer within {LOGIN_S:g} s ({exc.args[0].str()})"

    return login


def key_roles(bootstrap: str) -> Roles:
    """The roles of a principal's live keys on ``runledger.keys``, read at each ask."""

    def roles(principal: str) -> frozenset[str]:
        from events.kafka.keys import read_ring_or_empty
        ring = read_ring_or_empty(bootstrap, name="runledger-ui")
        return frozenset(e.role for e in ring.keys.values()
                         if e.principal == principal and e.revoked_at is None)

    return roles


__all__ = ["REALM", "Gate", "Verdict", "basic_credentials", "check_listen", "is_loopback",
           "kafka_login", "key_roles"]
