"""Key facts: which principal holds which public key, on ``runledger.keys`` (admins).

A principal (an operator, an agent, a worker, the controller, a projector, an
admin) signs what it sends with an Ed25519 key (``events.signed.signing``); these two
events register and revoke those keys. They are keyed by the pseudo run id
``key/<principal>`` (:func:`principal_key`), like node records are keyed
``node/<name>``, and the fold of runs never sees them: ``events.signed.keyring`` folds
them into a key ring. Each is signed by an admin key; the first, an admin
registering its own key, is the trust anchor.

Tested in tests/events/signed/test_keyring.py and tests/events/test_codec.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from events.base import Event, one_of
from events.errors import InvalidEvent
from events.keyids import PUBLIC_KEY_BYTES, is_key_id
from events.names import name_problem
from events.topics import KEYS

KEY_PREFIX = "key/"
# Every role a key may be registered for (events.authority.Role names the senders).
PRINCIPAL_ROLES = ("operator", "agent", "worker", "controller", "projector", "admin")


def principal_key(principal: str) -> str:
    """The ``run_id`` header value (and record key) of a principal's key records."""
    return f"{KEY_PREFIX}{principal}"


def _principal_and_key_id(cls: str, principal: str, key_id: str) -> None:
    why = name_problem(principal, f"{cls}.principal")
    if why is not None:
        raise InvalidEvent(why)
    if not is_key_id(key_id):
        raise InvalidEvent(f"{cls}.key_id must be 16 lowercase hex characters, got {key_id!r:.40}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PrincipalKeyRegistered(Event):
    """An admin registered ``public_key`` (raw Ed25519) as ``principal``'s key for ``role``."""

    principal: str
    role: str
    key_id: str
    public_key: bytes
    reason: str
    TOPIC: ClassVar[str] = KEYS

    def __post_init__(self) -> None:
        _principal_and_key_id("PrincipalKeyRegistered", self.principal, self.key_id)
        one_of(self.role, PRINCIPAL_ROLES, "PrincipalKeyRegistered.role")
        if not isinstance(self.public_key, bytes) or len(self.public_key) != PUBLIC_KEY_BYTES:
            raise InvalidEvent(
                f"PrincipalKeyRegistered.public_key must be {PUBLIC_KEY_BYTES} raw bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class PrincipalKeyRevoked(Event):
    """An admin revoked ``principal``'s key ``key_id``: from now on it verifies nothing new."""

    principal: str
    key_id: str
    reason: str
    TOPIC: ClassVar[str] = KEYS

    def __post_init__(self) -> None:
        _principal_and_key_id("PrincipalKeyRevoked", self.principal, self.key_id)
