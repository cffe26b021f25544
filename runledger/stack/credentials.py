"""Credential files: one owner-only librdkafka properties file per principal.

A secure stack keeps them in ``<data dir>/credentials/`` (mode 0700): the
admin's (Kafka's super user, bootstrapped into the metadata at format) and one
per role (``operator``, ``agent``, ``controller``, ``projector``), created
through the Admin API once the broker is up. A file that already exists is
kept, so a restart reuses the passwords, and an operator may put their own
files there before the first ``up``. ``runledger principal add`` writes the
same format for any other principal on any cluster.

A client uses one with ``RUNLEDGER_CREDENTIALS=<file>`` (``events.kafka.connection``).
Passwords come from :mod:`secrets`, are written with mode 0600 from the first
byte, and are never printed.

Tested in tests/runledger/stack/test_security.py.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from events.errors import CredentialsError
from events.kafka.connection import load_credentials
from events.names import name_problem
from runledger.errors import StackError, UsageError
from runledger.stack.layout import ADMIN, SCRAM

DIR = "credentials"
_PLAIN = re.compile(r"[A-Za-z0-9_-]{16,}")


def credentials_dir(data_dir: Path) -> Path:
    return data_dir / DIR


def credentials_file(data_dir: Path, name: str) -> Path:
    return credentials_dir(data_dir) / f"{name}.properties"


def render(username: str, password: str, protocol: str = "SASL_PLAINTEXT",
           ssl: dict[str, str] | None = None) -> str:
    """A credentials file; ``ssl``: the ``ssl.*`` settings (a TLS cluster's CA)."""
    extra = "".join(f"{key}={value}\n" for key, value in sorted((ssl or {}).items()))
    return (f"# runledger credentials of principal {username}: keep this file private\n"
            f"security.protocol={protocol}\nsasl.mechanism={SCRAM}\n"
            f"sasl.username={username}\nsasl.password={password}\n{extra}")


def tls_settings(ca: Path | None) -> tuple[str, dict[str, str]]:
    """The protocol and ``ssl.*`` settings of a stack with (or without) TLS."""
    if ca is None:
        return "SASL_PLAINTEXT", {}
    return "SASL_SSL", {"ssl.ca.location": str(ca)}


def new_password() -> str:
    return secrets.token_urlsafe(24)


def check_name(name: str) -> None:
    """A principal name: the log's name rule, so it can name a file and an ACL."""
    problem = name_problem(name, "principal")
    if problem is not None:
        raise UsageError(problem)


def write_private(path: Path, text: str, *, overwrite: bool = False) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the first byte."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise UsageError(f"{path} already exists; choose another --out or remove it") from None
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def password_of(path: Path) -> str:
    try:
        password = load_credentials(path).get("sasl.password", "")
    except CredentialsError as exc:
        raise StackError(str(exc)) from None
    if not password:
        raise StackError(f"{path} holds no sasl.password; remove it and run `stack up` again")
    return password


def ensure(data_dir: Path, names: tuple[str, ...], ca: Path | None = None) -> dict[str, str]:
    """Every named principal's password, generating the files that are missing
    (for a TLS stack, naming its CA: ``ca``)."""
    out: dict[str, str] = {}
    protocol, ssl = tls_settings(ca)
    for name in names:
        path = credentials_file(data_dir, name)
        if not path.exists():
            write_private(path, render(name, new_password(), protocol, ssl))
        out[name] = password_of(path)
    return out


def admin_password(data_dir: Path, ca: Path | None = None) -> str:
    """The admin's password, which also goes into server.properties and format's
    arguments: only characters that need no quoting there."""
    password = ensure(data_dir, (ADMIN,), ca)[ADMIN]
    if not _PLAIN.fullmatch(password):
        path = credentials_file(data_dir, ADMIN)
        raise StackError(f"the admin password in {path} may hold only letters, digits, "
                         "'_' and '-' (it is written into the brokers' configuration)")
    return password
