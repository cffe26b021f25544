"""The key ring: ``runledger.keys`` folded into who holds which key. Pure, like ``events.fold``.

:func:`apply` folds one key record (``events.principals``) with the signature
it carries: a terminal check, a judgment, a change, every refusal a named
constant. The first record must be an admin registering its own key, signed by
that key: the **trust anchor**, which an audit reports and an operator can pin.
Every later record is signed by a live admin key. A key id is registered once,
ever: a revoked key is never registered again.

**Chain.** Each key record names the digest of the key record before it
(``runledger-prev``, inside its signed message: ``events.signed.signing.key_message``),
the anchor :data:`~events.signed.signing.GENESIS`. :func:`apply` judges one record's
signature over the prev it names, and the ring remembers its :attr:`KeyRing.head`
(the digest of the last record it took) for the next one; whether the named
prev *is* that head is the caller's question (:func:`broken_link`): the audit
reports a break where it is, and goes on, as it does for facts. A record with
no prev (written before key records were chained) is refused as
:data:`UNCHAINED`: a keys log from then is not read, a new stack is made.

:func:`check` is the one judge of a signature against the ring, for a request,
a command, a fact or a key record: ``None`` when valid, else one of
:data:`UNSIGNED`, :data:`UNKNOWN_KEY`, :data:`BAD_SIGNATURE`,
:data:`REVOKED_KEY`, :data:`WRONG_PRINCIPAL` (the key is registered to someone
else) or :data:`WRONG_ROLE`, in that order of precedence.

**Revocation order.** Key records are folded in log order (``runledger.keys``
has one partition), so a key record signed by an admin key revoked earlier in
that log is refused, whatever its time. Records of other topics cannot be
placed by offset against the keys log, so :func:`check` takes ``at``: the
signed record's own ``header.occurred_at`` (ms). A key revoked by a revocation
whose ``header.occurred_at`` is T verifies records with ``at < T``, and nothing
at or after T; ``at=None`` (a live verifier: the controller, an agent) means
"now": a revoked key verifies nothing. A rotation therefore registers the new
key, moves the signer to it, and only then revokes the old one. Times are the
writers' own (an admin's, a controller's), so a clock skew between them moves
the line; and a registration is not dated: a key verifies records older than
its registration, which only an admin could have arranged.

Tested in tests/events/signed/test_keyring.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from events.model import Event, PrincipalKeyRegistered, PrincipalKeyRevoked, principal_key
from events.shelf import Shelf
from events.signed.signing import (
    GENESIS,
    Headers,
    PublicKey,
    key_digest,
    key_id_of,
    key_message,
    signature_of,
)

ADMIN = "admin"

# check's reasons, also apply's.
UNSIGNED = "unsigned"
UNKNOWN_KEY = "unknown_key"
BAD_SIGNATURE = "bad_signature"
REVOKED_KEY = "revoked_key"
WRONG_PRINCIPAL = "wrong_principal"
WRONG_ROLE = "wrong_role"
# apply's own.
NOT_A_KEY_RECORD = "not_a_key_record"
WRONG_RECORD_KEY = "wrong_record_key"
NOT_ADMIN = "not_admin"
NOT_SELF_SIGNED = "not_self_signed"
KEY_ID_MISMATCH = "key_id_mismatch"
DUPLICATE_KEY = "duplicate_key"
NO_SUCH_KEY = "no_such_key"
ALREADY_REVOKED = "already_revoked"
LAST_ADMIN = "last_admin"
UNCHAINED = "unchained"


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One registered key; times are the key records' ``header.occurred_at``."""

    principal: str
    role: str
    public: PublicKey
    registered_at: int
    registered_by: str
    revoked_at: int | None = None
    revoked_by: str | None = None

    @property
    def key_id(self) -> str:
        return self.public.key_id

    def live_at(self, at: int | None) -> bool:
        """Whether the key verifies a record of time ``at`` (None: now)."""
        return self.revoked_at is None or (at is not None and at < self.revoked_at)


@dataclass(frozen=True, slots=True)
class KeyRing:
    """Every key registered so far, by key id, and the anchor's key id.

    Copy-on-write: :func:`apply` returns a new ring and never changes this one. The
    keys and the heads are shelves (``events.shelf``), so a key record copies one bucket:
    a fleet's 12,500 node keys, copied whole per record, made the fold O(keys²) (tens of
    seconds of a controller's CPU each time it read the keys log).
    """

    keys: Mapping[str, KeyEntry] = field(default_factory=Shelf)
    anchor: str | None = None
    head: str = GENESIS  # the digest of the last key record taken: the next one's prev
    records: int = 0  # how many key records were taken
    # Every head the ring has had (a set: the values say nothing): a fact's keys head
    # must be one (events.signed.audit).
    heads: Mapping[str, bool] = field(default_factory=Shelf)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", Shelf.of(self.keys))
        heads = self.heads
        object.__setattr__(self, "heads", Shelf.of(
            heads if isinstance(heads, Mapping) else dict.fromkeys(heads, True)))

    def get(self, key_id: str) -> KeyEntry | None:
        return self.keys.get(key_id)

    def live_admins(self) -> list[str]:
        return sorted(k for k, e in self.keys.items() if e.role == ADMIN and e.revoked_at is None)


EMPTY = KeyRing()


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str
    detail: str

    def __str__(self) -> str:
        return f"{self.reason} ({self.detail})"


# (public key, message, signature) -> whether the signature is that key's over it.
Verify = Callable[[PublicKey, bytes, bytes], bool]


def _verify(public: PublicKey, message: bytes, signature: bytes) -> bool:
    return public.verify(message, signature)


def check(ring: KeyRing, *, principal: str | None, key_id: str | None, message: bytes,
          signature: bytes | None, role: str | None = None, at: int | None = None,
          verify: Verify = _verify) -> str | None:
    """``None`` when ``signature`` over ``message`` is valid from ``key_id``, else why not.

    ``principal`` (None: anyone's key) and ``role`` (None: any role) are what the
    signed record claims its signer is; ``at`` is its time (see the module
    docstring), None for a live check. ``verify``: the signature check itself, which
    a caller that sees the same signed message again and again may memoize.
    """
    if not key_id or not signature:
        return UNSIGNED
    entry = ring.keys.get(key_id)
    if entry is None:
        return UNKNOWN_KEY
    if not verify(entry.public, message, signature):
        return BAD_SIGNATURE
    if not entry.live_at(at):
        return REVOKED_KEY
    if principal is not None and entry.principal != principal:
        return WRONG_PRINCIPAL
    if role is not None and entry.role != role:
        return WRONG_ROLE
    return None


def check_headers(ring: KeyRing, headers: Headers, message: bytes, *, principal: str | None,
                  role: str | None, at: int | None = None,
                  names: tuple[str, str] | None = None) -> str | None:
    """:func:`check` with the signature and key id read from a record's headers.

    ``names`` are the (signature, key id) header names; by default
    ``events.signed.signing.SIG_HEADER`` and ``KEY_HEADER``. Missing or doubled
    headers are :data:`UNSIGNED`.
    """
    found = signature_of(headers, *names) if names else signature_of(headers)
    if isinstance(found, str):
        return UNSIGNED
    key_id, signature = found
    return check(ring, principal=principal, key_id=key_id, message=message,
                 signature=signature, role=role, at=at)


def broken_link(ring: KeyRing, prev: str | None) -> str | None:
    """Why a key record naming ``prev`` does not continue ``ring``'s chain; None when it does."""
    if prev is None or prev == ring.head:
        return None  # no prev at all is apply's refusal (UNCHAINED)
    return (f"names prev {prev[:16]}, the keys log's last record is {ring.head[:16]}: a key "
            "record before it was removed, reordered or inserted")


def apply(ring: KeyRing, event: Event, signer_key_id: str | None, signature: bytes | None,
          value: bytes, prev: str | None) -> KeyRing | Refusal:
    """The ring after one key record (its value bytes and the prev it names, as signed),
    or why it is refused.

    A refused record leaves the ring as it was (the caller keeps ``ring``). A
    taken one becomes the ring's :attr:`KeyRing.head`.
    """
    if not isinstance(event, PrincipalKeyRegistered | PrincipalKeyRevoked):
        return Refusal(NOT_A_KEY_RECORD, f"{event.event_type} is not a key record")
    if event.run_id != principal_key(event.principal):
        return Refusal(WRONG_RECORD_KEY, f"keyed {event.run_id!r}, not "
                                         f"{principal_key(event.principal)!r}")
    if not signer_key_id or not signature:
        return Refusal(UNSIGNED, f"{event.event_type} of {event.principal!r} is not signed")
    if prev is None:
        return Refusal(UNCHAINED, f"{event.event_type} of {event.principal!r} names no "
                                  "runledger-prev: a keys log written before key records were "
                                  "chained; this runledger does not read it, make a new stack")
    message = key_message(prev, value)
    if isinstance(event, PrincipalKeyRegistered):
        after = _register(ring, event, signer_key_id, signature, message)
    else:
        after = _revoke(ring, event, signer_key_id, signature, message)
    if isinstance(after, Refusal):
        return after
    head = key_digest(value, signature)
    return replace(after, head=head, records=ring.records + 1,
                   heads=Shelf.of(ring.heads).with_({head: True}))


def _register(ring: KeyRing, e: PrincipalKeyRegistered, signer: str, signature: bytes,
              message: bytes) -> KeyRing | Refusal:
    if e.key_id != key_id_of(e.public_key):
        return Refusal(KEY_ID_MISMATCH, f"key id {e.key_id} is not the id of the public key "
                                        f"({key_id_of(e.public_key)})")
    if e.key_id in ring.keys:
        return Refusal(DUPLICATE_KEY, f"key {e.key_id} is already registered "
                                      f"(to {ring.keys[e.key_id].principal!r})")
    entry = KeyEntry(e.principal, e.role, PublicKey(e.public_key), e.header.occurred_at, signer)
    if ring.anchor is None:
        # The trust anchor: nothing can vouch for the first key but itself.
        if e.role != ADMIN:
            return Refusal(NOT_ADMIN, f"the first key record registers a {e.role} key; "
                                      "it must register an admin key")
        if signer != e.key_id:
            return Refusal(NOT_SELF_SIGNED, f"the first key record is signed by {signer}, "
                                            f"not by the key it registers ({e.key_id})")
        if not entry.public.verify(message, signature):
            return Refusal(BAD_SIGNATURE, f"the anchor {e.key_id} does not verify its own record")
        return KeyRing({e.key_id: entry}, anchor=e.key_id)
    refused = _by_admin(ring, signer, signature, message)
    if refused is not None:
        return refused
    return replace(ring, keys=Shelf.of(ring.keys).with_({e.key_id: entry}))


def _revoke(ring: KeyRing, e: PrincipalKeyRevoked, signer: str, signature: bytes,
            message: bytes) -> KeyRing | Refusal:
    target = ring.keys.get(e.key_id)
    if target is None:
        return Refusal(NO_SUCH_KEY, f"key {e.key_id} was never registered")
    if target.principal != e.principal:
        return Refusal(WRONG_PRINCIPAL, f"key {e.key_id} is {target.principal!r}'s, "
                                        f"not {e.principal!r}'s")
    if target.revoked_at is not None:
        return Refusal(ALREADY_REVOKED, f"key {e.key_id} was revoked by {target.revoked_by}")
    refused = _by_admin(ring, signer, signature, message)
    if refused is not None:
        return refused
    if ring.live_admins() == [e.key_id]:
        # Nobody could sign a key record ever again: the log would be frozen.
        return Refusal(LAST_ADMIN, f"key {e.key_id} is the last live admin key")
    revoked = replace(target, revoked_at=e.header.occurred_at, revoked_by=signer)
    return replace(ring, keys=Shelf.of(ring.keys).with_({e.key_id: revoked}))


def _by_admin(ring: KeyRing, signer: str, signature: bytes, message: bytes) -> Refusal | None:
    """A key record after the anchor: signed, now, by a live admin key."""
    why = check(ring, principal=None, key_id=signer, message=message, signature=signature,
                role=ADMIN)
    if why is None:
        return None
    if why == WRONG_ROLE:
        entry = ring.keys[signer]
        return Refusal(NOT_ADMIN, f"signed by {signer}, {entry.principal!r}'s {entry.role} key")
    return Refusal(why, f"signed by {signer}")
