"""The keys log from an admin's side: the ring it folds to, and key records checked before writing.

``runledger key`` and ``runledger stack up`` register and revoke keys here;
``submit`` and ``cancel`` look up whose key signs a request. :func:`load_ring`
reads ``runledger.keys`` (bounded, raw: ``runledger.rawlog``) and folds it
with ``events.signed.audit.fold_keys``, the audit's own fold. :func:`append` signs a
key record with an admin key, chained to the ring's head (the digest of the
last key record it read: ``runledger-prev``), asks ``events.signed.keyring.apply``
whether the ring would take it, and writes it only then: a record the ring would refuse (the
last admin key revoked, a key registered twice, a signer that is no admin) is
reported in one line and never reaches the log. Writers on one machine take
turns and chain to the head read in their turn; two admins writing at once from
different machines can still race past the check; both then name the same prev,
and ``runledger audit verify`` names the later record's broken chain (and its
refusal, if the fold refuses it).

Tested in tests/runledger/commands/test_keys.py and tests/runledger/stack/test_keys.py.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from events.codec import default_codec
from events.errors import KafkaOperationError, NotAuthorized
from events.kafka.clients import event_headers
from events.kafka.connection import client_config, principal, refused
from events.model import Header, PrincipalKeyRegistered, PrincipalKeyRevoked, principal_key
from events.partition import PARTITIONER
from events.principals import PRINCIPAL_ROLES
from events.signed import keyring
from events.signed.audit import Problem, fold_keys
from events.signed.keyring import KeyRing, Refusal
from events.signed.signing import PublicKey, SigningKey, sign_key_record
from events.topics import KEYS
from runledger.errors import RunledgerError, UsageError
from runledger.rawlog import read_raw

KeyRecord = PrincipalKeyRegistered | PrincipalKeyRevoked

# What to do after each refusal of the key fold, said after the refusal itself.
_HINTS = {
    keyring.LAST_ADMIN: "register another admin key first, then revoke this one",
    keyring.DUPLICATE_KEY: "a key is registered once, ever: make a new one with "
                           "`runledger key create`",
    keyring.NO_SUCH_KEY: "`runledger key list` shows the registered keys",
    keyring.ALREADY_REVOKED: "nothing to do",
    keyring.WRONG_PRINCIPAL: "`runledger key list` shows whose key it is",
    keyring.NOT_ADMIN: "--admin-key must be a live admin key on the keys log "
                       "(`runledger key list`)",
    keyring.UNKNOWN_KEY: "--admin-key must be a live admin key on the keys log "
                         "(`runledger key list`)",
    keyring.REVOKED_KEY: "that admin key is revoked; sign with a live admin key",
    keyring.NOT_SELF_SIGNED: "the keys log is empty: its first record registers the admin "
                             "key itself (`runledger key register NAME --role admin --key "
                             "ADMIN.key --admin-key ADMIN.key`)",
}


class KeyRefused(RunledgerError):
    """The key fold would refuse the record: nothing was written."""


@dataclass(frozen=True, slots=True)
class Ring:
    """The key ring of a keys log, with the problems of the records it refused."""

    ring: KeyRing
    records: int
    problems: tuple[Problem, ...]


def load_ring(bootstrap: str, *, credentials: str | None = None, topic: str = KEYS,
              patience_s: float = 30.0) -> Ring:
    records = read_raw(bootstrap, [topic], credentials=credentials,
                       patience_s=patience_s)[topic]
    ring, problems = fold_keys(records)
    return Ring(ring, len(records), tuple(problems))


def check_role(role: str) -> str:
    if role not in PRINCIPAL_ROLES:
        raise UsageError(f"--role {role!r} is not a key role; use one of "
                         f"{', '.join(PRINCIPAL_ROLES)}")
    return role


def registration(principal: str, role: str, public: PublicKey, *, now_ms: int, by: str,
                 reason: str) -> PrincipalKeyRegistered:
    """``public`` registered as ``principal``'s key for ``role``; ``by`` names the writer."""
    return PrincipalKeyRegistered(
        header=_header(principal, f"registered/{public.key_id}", now_ms, by),
        principal=principal, role=check_role(role), key_id=public.key_id,
        public_key=public.raw, reason=reason)


def revocation(principal: str, key_id: str, *, now_ms: int, by: str,
               reason: str) -> PrincipalKeyRevoked:
    return PrincipalKeyRevoked(header=_header(principal, f"revoked/{key_id}", now_ms, by),
                               principal=principal, key_id=key_id, reason=reason)


def _header(principal: str, what: str, now_ms: int, by: str) -> Header:
    # The event id names the key: one registration and one revocation per key, ever.
    run_id = principal_key(principal)
    return Header(event_id=f"{run_id}/{what}", run_id=run_id, generation=0,
                  occurred_at=now_ms, producer=by)


@dataclass(frozen=True, slots=True)
class Written:
    ring: KeyRing
    where: str


def append(bootstrap: str, ring: KeyRing, event: KeyRecord, admin: SigningKey, *,
           credentials: str | None = None, topic: str = KEYS) -> Written:
    """Write ``event`` signed by ``admin`` once the ring would take it; the ring after it.

    Raises :class:`KeyRefused` (nothing written) when the fold refuses it. Writers on
    this machine take turns (:func:`_turn`), and each chains to the log's head as read
    in its turn, not to ``ring`` (read before it), which another writer may have
    moved on meanwhile; when the log is as ``ring`` says, the two are the same.
    """
    return append_all(bootstrap, ring, [event], admin, credentials=credentials,
                      topic=topic)[-1]


def append_all(bootstrap: str, ring: KeyRing, events: Sequence[KeyRecord], admin: SigningKey,
               *, credentials: str | None = None, topic: str = KEYS) -> list[Written]:
    """:func:`append` for many records in one turn: the log is read once, each record
    chains to the one before it, and one producer writes them all in order. Enrolling
    the 12,500 nodes of a fleet one ``append`` at a time re-reads a growing log per
    node; this reads it once. Nothing is written when the fold refuses any of them."""
    with _turn(bootstrap, topic):
        fresh = load_ring(bootstrap, credentials=credentials, topic=topic).ring
        ring = fresh if fresh.head != ring.head else ring
        codec = default_codec()
        records: list[tuple[str, bytes, list[Any]]] = []
        rings: list[KeyRing] = []
        for event in events:
            value = codec.encode(event)
            headers = sign_key_record(admin, ring.head, value)
            after = keyring.apply(ring, event, admin.key_id, headers[0][1], value, ring.head)
            if isinstance(after, Refusal):
                hint = _HINTS.get(after.reason)
                raise KeyRefused(f"{topic} would refuse this {event.event_type}: {after}"
                                 + (f"; {hint}" if hint else ""))
            version = codec.registry.latest(event.event_type).version
            records.append((event.run_id, value, [*event_headers(event, version), *headers]))
            rings.append(ring := after)
        where = _produce(bootstrap, topic, records, credentials)
    return [Written(r, w) for r, w in zip(rings, where, strict=True)]


@contextmanager
def _turn(bootstrap: str, topic: str) -> Iterator[None]:
    """An exclusive lock per keys log (its address and topic) among this machine's
    processes: an admin's `runledger key`, `stack up`, and agents enrolling themselves
    on a local stack. It lives in the system's temporary directory (no home is
    written); writers on other machines can still race, which `audit verify` names."""
    digest = hashlib.sha256(f"{bootstrap}\n{topic}".encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"runledger-keys-{digest}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _produce(bootstrap: str, topic: str, records: Sequence[tuple[str, bytes, list[Any]]],
             credentials: str | None) -> list[str]:
    """Write ``(key, value, headers)`` records in order and wait for the broker's
    acknowledgements; where each landed.

    Idempotent, so a retry after a lost acknowledgement cannot register a key twice.
    """
    producer = Producer(client_config(bootstrap, {
        "client.id": "runledger-keys", "acks": "all", "enable.idempotence": True,
        "partitioner": PARTITIONER, "message.timeout.ms": 15_000, "log_level": 0,
    }, credentials))
    landed: dict[int, str] = {}
    failed: list[str] = []

    def report_for(i: int) -> Any:
        def report(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                landed[i] = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
                return
            try:
                why = refused(err.code(), "write", topic)
                # Only the admin writes key records: say so rather than "ask for a role".
                failed.append(_no_write(topic, credentials) if why and " may not " in why
                              else why or err.str())
            except SystemError:
                # A fatal error (no producer id: the principal may write nowhere) leaves
                # confluent-kafka's own exception pending, and every method of err raises.
                failed.append(_no_write(topic, credentials))
        return report

    for i, (key, value, headers) in enumerate(records):
        producer.produce(topic, value=value, key=key, headers=headers, on_delivery=report_for(i))
        producer.poll(0)
    try:
        remaining = producer.flush(30.0)
    except SystemError:  # the fatal error above, raised again by flush
        remaining = 0
    if failed:
        raise NotAuthorized(failed[0]) if "may not" in failed[0] else \
            KafkaOperationError(f"write to {topic}: {failed[0]}")
    if remaining or len(landed) < len(records):
        raise KafkaOperationError(f"write to {topic}: not acknowledged within 30 s")
    return [landed[i] for i in range(len(records))]


def _no_write(topic: str, credentials: str | None) -> str:
    return (f"principal {principal(credentials)!r} may not write {topic}: the broker refused "
            "it; key records are written with the admin's credentials "
            "(RUNLEDGER_CREDENTIALS=<stack data dir>/credentials/admin.properties)")


__all__ = ["KeyRefused", "Ring", "Written", "append", "append_all", "check_role", "load_ring",
           "registration", "revocation"]
