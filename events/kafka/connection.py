"""How every runledger client connects: the bootstrap plus the credentials file.

A secure cluster (the default of ``runledger stack up``) authenticates every
client with SASL/SCRAM and authorizes it with ACLs, so each Kafka client this
project builds (producers, consumers, readers, admin clients) takes its
settings from :func:`client_config`, never from a hand-written dict.

Credentials live in a file named by ``RUNLEDGER_CREDENTIALS``: librdkafka
properties, one ``key=value`` per line, ``#`` comments, e.g.::

    security.protocol=SASL_PLAINTEXT
    sasl.mechanism=SCRAM-SHA-512
    sasl.username=operator-alice
    sasl.password=...

Only ``security.protocol`` and ``sasl.*`` / ``ssl.*`` keys are accepted, so a
credentials file cannot redirect a client elsewhere or change its delivery
guarantees. The password is read from the file at connect time and never
copied into an event, a log line or an error message (:func:`principal` gives
the name alone). Without the variable a client connects as before, in
plaintext (``runledger stack up --insecure``).

Tested in tests/events/kafka/test_connection.py.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError

from events.errors import CredentialsError

# librdkafka's own messages (connection failures, retries) go to this logger at
# their syslog level mapped to logging's, instead of straight onto stderr. The
# NullHandler keeps them off stderr where nothing configured logging (a plain
# CLI command, whose broker errors arrive as one line anyway); a service that
# calls logging.basicConfig sees them through propagation, WARNING and up.
KAFKA_LOG = logging.getLogger("runledger.kafka")
KAFKA_LOG.addHandler(logging.NullHandler())
KAFKA_LOG.setLevel(logging.WARNING)

ENV_CREDENTIALS = "RUNLEDGER_CREDENTIALS"
_ALLOWED_PREFIXES = ("sasl.", "ssl.")
_ALLOWED_KEYS = frozenset({"security.protocol"})
ANONYMOUS = "ANONYMOUS"  # Kafka's name for a client that did not authenticate


def credentials_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The credentials file: an explicit one, else ``$RUNLEDGER_CREDENTIALS``, else none."""
    raw = os.fspath(explicit) if explicit is not None else os.environ.get(ENV_CREDENTIALS, "")
    return Path(raw).expanduser() if raw else None


def parse_credentials(text: str, where: str) -> dict[str, str]:
    """The settings of a credentials file's text; ``where`` names it in errors."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CredentialsError(f"{where}:{number}: expected key=value")
        if key not in _ALLOWED_KEYS and not key.startswith(_ALLOWED_PREFIXES):
            raise CredentialsError(
                f"{where}:{number}: {key!r} is not a connection setting (a credentials file "
                "holds only security.protocol, sasl.* and ssl.* keys)"
            )
        out[key] = value.strip()
    return out


def load_credentials(path: Path) -> dict[str, str]:
    """Read and check one credentials file; refuses a file others may read."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as exc:
        raise CredentialsError(
            f"cannot read credentials file {path} ({exc.strerror}); set {ENV_CREDENTIALS} "
            "to a file `runledger principal add` or `runledger stack up` wrote"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO) and "sasl.password" in text:
        raise CredentialsError(
            f"credentials file {path} is readable by other users (mode "
            f"{stat.S_IMODE(mode):o}); run `chmod 600 {path}`"
        )
    return parse_credentials(text, str(path))


def security_settings(explicit: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The security settings every client adds to its configuration ({} when none)."""
    path = credentials_path(explicit)
    return {} if path is None else load_credentials(path)


def client_config(bootstrap: str, settings: Mapping[str, Any] | None = None,
                  credentials: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """A librdkafka configuration: bootstrap, then ``settings``, then the credentials.

    The credentials come last so no caller's setting can turn authentication off;
    librdkafka logs through :data:`KAFKA_LOG` unless ``settings`` names a logger.
    """
    return {"bootstrap.servers": bootstrap, "logger": KAFKA_LOG, **(settings or {}),
            **security_settings(credentials)}


def principal(explicit: str | os.PathLike[str] | None = None) -> str:
    """The user name the broker will see (``ANONYMOUS`` without credentials)."""
    try:
        return security_settings(explicit).get("sasl.username") or ANONYMOUS
    except CredentialsError:
        return ANONYMOUS


# What each authorization error means for the principal, and its resource's kind.
_REFUSED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "consumer group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
    # An idempotent producer with no WRITE on any topic is refused a producer id.
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
}
# A login the broker refused (a wrong password, an unknown user).
AUTHENTICATION_CODES = frozenset({KafkaError.SASL_AUTHENTICATION_FAILED,
                                  KafkaError._AUTHENTICATION})


def refused(code: int, operation: str, resource: str) -> str | None:
    """One line for an authorization or authentication refusal, else None.

    It names the principal, the operation and the resource, says the refusal is
    the broker's, and what to do: ask for a role, or fix the credentials.
    """
    who = principal()
    if code in AUTHENTICATION_CODES:
        return (f"the broker did not accept the credentials of principal {who!r}; check the "
                f"file {ENV_CREDENTIALS} names (`runledger principal add` writes one)")
    kind = _REFUSED.get(code)
    if kind is None:
        return None
    if kind == "cluster":
        what = f"{operation} {resource} (it holds no WRITE on any topic)"
    else:
        what = f"{operation} {kind} {resource}"
    hint = (" set RUNLEDGER_CREDENTIALS to a principal's credentials file" if who == ANONYMOUS
            else " ask an admin for a role that may (`runledger acl apply --dry-run` lists "
                 "each role's grants)")
    return f"principal {who!r} may not {what}: the broker refused it;{hint}"
