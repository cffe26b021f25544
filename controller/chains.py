"""Each run's hash chain as the controller continues it, and what it signs. Pure.

Every fact the controller appends to ``runledger.runs`` is signed with its
Ed25519 key together with the digest of the run's previous fact on the log
(``events.signed.signing.sign_fact``), so each run's facts form a chain from
``GENESIS`` that ``events.signed.audit.verify`` checks; every command is signed too
(``sign_command``). Node-scoped facts (``node/<name>``) are chained per key,
like a run's.

**Keys head.** Every fact also names, inside what is signed, the digest of the
newest key record of the controller's key ring (``runledger-keys-head``,
:attr:`Chains.keys_head`, which the shell sets from its ring before each
sign): a key record later removed from the end of ``runledger.keys`` (a
revocation) is then named by every fact signed after it, and the audit finds
it missing.

**Heads.** :class:`Chains` keeps, per run id, the digest of the last signed
fact on the log: the ``prev`` of the run's next fact. The shell recovers them
from the raw records of ``runs`` (:meth:`Chains.observe`): every record while
it replays the log at start and after a refused transaction, then, as it
tails the log, every record another writer appended (a run whose partition
this controller takes over continues from the last owner's fact: the takeover
waits until the tail has read it, ``controller.ownership``). Its own records
are never taken from the tail: their heads moved when they were committed
(:meth:`Chains.advance`), and a tail that lags behind would move a head back.
A record without a signature moves nothing, as in the audit; one whose
signature this controller cannot judge (it holds no key ring) moves its head
all the same: the audit reports it, and the chain goes on from it.

**Copies.** A ``RunSubmitted`` fact copied from a request must be the
request's exact value bytes, carrying the operator's signature
(``carried_request``), never a re-encoding: :func:`outgoing` substitutes them.

Tested in tests/controller/test_chains.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from controller.guard import Encoded
from events.model import Event, RunSubmitted
from events.record import Record
from events.signed.signing import (
    GENESIS,
    KEY_HEADER,
    SIG_HEADER,
    Headers,
    SigningKey,
    carried_request,
    fact_digest,
    sign_command,
    sign_fact,
    signature_of,
)
from events.topics import COMMANDS, RUNS

# A request's own signature headers, as it arrived (renamed when carried).
_REQUEST_HEADERS = (SIG_HEADER, KEY_HEADER)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One record the controller appends, as it will be stored."""

    topic: str
    event: Event
    value: bytes
    headers: Headers = ()  # the signature's, once signed (``sign``)
    request: Headers = ()  # a copied request's own signature headers, carried onto the fact
    version: int | None = None  # the schema version ``value`` was written with; None: newest


def outgoing(out: Iterable[Encoded], request: Record | None = None) -> list[Outgoing]:
    """The records one step appends; a ``RunSubmitted`` that copies ``request`` is its bytes.

    ``request``: the input the step took, read with its value bytes and headers
    (``raw``). The fact copies it when the step appends the very event the
    request decoded to.
    """
    copied = request.event if request is not None and request.value else None
    records: list[Outgoing] = []
    for topic, event, value in out:
        if request is not None and isinstance(copied, RunSubmitted) and topic == RUNS \
                and event == copied:
            kept = tuple((n, v) for n, v in request.headers if n in _REQUEST_HEADERS)
            records.append(Outgoing(topic, event, request.value, request=kept,
                                    version=request.writer_version))
        else:
            records.append(Outgoing(topic, event, value))
    return records


def link(record: Record) -> tuple[str, str] | None:
    """``(run id, digest)`` of a signed fact read from ``runs``; None when it is unsigned.

    The record must have been read ``raw`` (its value bytes and headers).
    """
    found = signature_of(record.headers)
    if isinstance(found, str) or not record.value:
        return None
    return record.event.run_id, fact_digest(record.value, found[1])


def sign(key: SigningKey | None, heads: Mapping[str, str], out: Sequence[Outgoing],
         keys_head: str = GENESIS) -> tuple[list[Outgoing], dict[str, str]]:
    """Every record signed, each fact chained to its run's head and naming ``keys_head``;
    and the heads it moved.

    ``heads`` is not changed: the moved heads count only once the records are
    committed. Without a key the records go out unsigned (a copied request's
    signature is still carried) and no head moves.
    """
    moved: dict[str, str] = {}
    signed: list[Outgoing] = []
    for record in out:
        if key is None:
            headers = _carried(record)
        elif record.topic == RUNS:
            run_id = record.event.run_id
            prev = moved.get(run_id) or heads.get(run_id, GENESIS)
            headers = sign_fact(key, prev, record.value, request=record.request,
                                keys_head=keys_head)
            found = signature_of(headers)
            assert not isinstance(found, str)  # sign_fact wrote it
            moved[run_id] = fact_digest(record.value, found[1])
        elif record.topic == COMMANDS:
            headers = sign_command(key, record.value)
        else:
            headers = ()
        signed.append(replace(record, headers=headers))
    return signed, moved


def _carried(record: Outgoing) -> Headers:
    """An unsigned fact still carries the operator's signature of the request it copies."""
    if record.topic != RUNS or not record.request:
        return ()
    return carried_request(record.request)


class Chains:
    """The heads of every run's chain, as this controller knows them (mutable shell state)."""

    def __init__(self, key: SigningKey | None, me: str) -> None:
        self.key = key
        self.me = me  # this controller's writer header: its own records
        self.heads: dict[str, str] = {}
        # The head of the key ring the controller judges by (events.signed.keyring.KeyRing.head).
        self.keys_head = GENESIS

    def reset(self) -> None:
        """Forget every head: a replay of ``runs`` from the beginning follows."""
        self.heads = {}

    def observe(self, records: Iterable[Record], *, own: bool = True) -> None:
        """Move the heads past facts read from ``runs``, in log order.

        ``own``: also this controller's own records (a replay); a tail passes False.
        """
        for record in records:
            if not own and record.writer == self.me:
                continue
            found = link(record)
            if found is not None:
                self.heads[found[0]] = found[1]

    def sign(self, out: Sequence[Outgoing]) -> tuple[list[Outgoing], dict[str, str]]:
        return sign(self.key, self.heads, out, self.keys_head)

    def advance(self, moved: Mapping[str, str]) -> None:
        """The heads after a committed transaction (``moved``, from :meth:`sign`)."""
        self.heads.update(moved)

    def head(self, run_id: str) -> str:
        return self.heads.get(run_id, GENESIS)
