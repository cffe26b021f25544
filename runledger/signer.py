"""An operator's signed requests: whose key signs, and the signature beside the value bytes.

Every request command (``submit``, ``cancel``, ``resume``, ``node``
operations, and the gate evidence of ``preflight``, ``pilot`` and ``drill``)
signs, because the controller refuses unsigned requests unless started
``--trust-unsigned``: with the key file named (``--key FILE`` or
``RUNLEDGER_KEY``), else the remembered local stack's ``keys/operator.key``
when the command talks to that stack (:func:`request_signer`); with none of
them it is refused in one line saying where a key can come from
(:class:`NoKey`). The request's ``principal`` is the principal the key is
registered to on ``runledger.keys``, looked up there (:func:`signer`): a key
the log does not know, one revoked, one that is not an operator's, or a
``--principal`` naming someone else is refused in one line and nothing is
written. So the principal a request names is the one its signature proves.
:func:`signed_record` encodes the request once and signs exactly those bytes
(``events.signed.signing.sign_request``), so the signature verifies against what the
log stores. :func:`send_request` writes one request, signed or not, and waits
for the broker's acknowledgement; every command that writes to
``runledger.requests`` goes through it. A request too large for the controller
to copy onto ``runledger.runs`` with its headers
(``events.limits.MAX_REQUEST_BYTES``) is refused there in one line
(:class:`RequestTooLarge`), and nothing is written.

Tested in tests/runledger/commands/test_signed_requests.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm

from events.codec import Codec, default_codec
from events.errors import KafkaOperationError
from events.kafka.clients import EventProducer, Headers, event_headers
from events.limits import record_bytes, request_problem
from events.model import Event
from events.signed.signing import SigningKey, sign_request
from events.topics import REQUESTS
from runledger import config, keylog
from runledger.errors import RunledgerError, UsageError

ENV_KEY = config.ENV_KEY  # declared with the configuration, which loads no cryptography
OPERATOR = "operator"


class SignerRefused(RunledgerError):
    """The key cannot sign a request: unregistered, revoked, not an operator's, or not yours."""


class NoKey(UsageError):
    """No key to sign a request with: none named, and no local stack's operator key."""


class RequestTooLarge(RunledgerError):
    """A request whose copy on ``runledger.runs`` would not fit one record; nothing was sent."""


@dataclass(frozen=True, slots=True)
class Signer:
    key: SigningKey
    principal: str
    path: Path


def load_key(path: Path, option: str) -> SigningKey:
    """A key file, or a one-line error naming the option, the file and what to do."""
    try:
        return SigningKey.load(path)
    except FileNotFoundError:
        raise UsageError(f"{option} {path}: no such file") from None
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"{option} {path} is not an unencrypted Ed25519 key file as "
                         f"`runledger key create` writes ({why})") from None


def signer(bootstrap: str, path: Path, principal: str | None) -> Signer:
    """Who signs with the key in ``path``, from the keys log; ``principal`` must agree."""
    key = load_key(path, f"--key (or ${ENV_KEY})")
    ring = keylog.load_ring(bootstrap, patience_s=config.retry_s()).ring
    entry = ring.get(key.key_id)
    if entry is None:
        raise SignerRefused(
            f"key {key.key_id} ({path}) is not registered on runledger.keys; an admin "
            f"registers it: runledger key register NAME --role {OPERATOR} --public "
            f"{key.public.raw.hex()} --admin-key ADMIN.key")
    if entry.revoked_at is not None:
        raise SignerRefused(f"key {key.key_id} ({path}) of {entry.principal} was revoked; "
                            "sign with a live key (`runledger key list` shows them)")
    if entry.role != OPERATOR:
        raise SignerRefused(f"key {key.key_id} ({path}) is {entry.principal}'s {entry.role} key;"
                            f" requests are signed with an {OPERATOR} key")
    if principal is not None and principal != entry.principal:
        raise SignerRefused(f"--principal {principal!r} is not the principal key {key.key_id} "
                            f"is registered to ({entry.principal!r}); a signed request is its "
                            "key's principal's: drop --principal")
    return Signer(key, entry.principal, path)


def request_signer(address: str, key: Path | None, principal: str | None,
                   bootstrap: str | None = None) -> Signer:
    """Who signs a request: ``key`` (``--key`` or ``$RUNLEDGER_KEY``), else the remembered
    local stack's operator key when ``bootstrap`` (``--bootstrap``) and
    ``RUNLEDGER_BOOTSTRAP`` do not name another cluster; :class:`NoKey` when neither."""
    path = key if key is not None else config.stack_signing_key(bootstrap, OPERATOR)
    if path is None:
        raise NoKey(f"no key to sign the request with (the controller refuses unsigned "
                    f"requests): pass --key FILE or set ${ENV_KEY} to your operator key, or "
                    "run against a local stack (`runledger stack up`, no --bootstrap or "
                    "RUNLEDGER_BOOTSTRAP) whose keys/operator.key you can read")
    return signer(address, path, principal)


def signed_record(codec: Codec, event: Event, key: SigningKey) -> tuple[bytes, Headers]:
    """The request's value bytes and its headers: the usual ones and the signature."""
    value = codec.encode(event)
    # The version the codec wrote (the newest), as EventProducer.send names it.
    version = codec.registry.latest(event.event_type).version
    return value, [*event_headers(event, version), *sign_request(key, value)]


def send_request(bootstrap: str, event: Event, key: SigningKey | None,
                 topic: str = REQUESTS) -> None:
    """Write one request (signed when there is a key) and wait until the broker has it
    (acks=all), or raise naming the topic and the delivery error."""
    failures: list[str] = []
    codec = default_codec()
    if key is None:
        value = codec.encode(event)
        headers: Headers = event_headers(event, codec.registry.latest(event.event_type).version)
    else:
        value, headers = signed_record(codec, event, key)
    too_large = request_problem(record_bytes(event.run_id, len(value), headers), topic)
    if too_large is not None:  # measured before any broker is asked
        raise RequestTooLarge(f"{event.event_type} of {event.run_id} was not sent: "
                              f"{too_large}")
    # A delivery timeout below the flush timeout turns a lost write into a
    # delivery error with a reason rather than an unexplained flush timeout.
    producer = EventProducer(bootstrap, client_id="runledger-cli", codec=codec,
                             config={"message.timeout.ms": 15_000})
    producer.send_bytes(topic, event.run_id, value, headers, on_failure=failures.append)
    producer.flush(30.0)
    if failures:
        raise KafkaOperationError(f"write to {topic}: {failures[0]}")
