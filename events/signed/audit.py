"""Offline verification of the signed log, from the log alone: ``runledger audit verify``'s core.

Pure: the caller reads ``runledger.keys`` and ``runledger.runs`` (every record,
in log order, as :class:`LoggedRecord`) and :func:`verify` judges them with no
broker, no clock and no randomness:

1. The keys log is folded with ``events.signed.keyring.apply``; a refused key record
   is a :data:`KEY_REFUSED` problem and changes nothing. The first record is the
   trust anchor; ``trust`` pins its key id (:data:`UNTRUSTED_ANCHOR`). Key
   records are one hash chain (``runledger-prev``): a record that does not
   name the digest of the record before it is a :data:`BROKEN_CHAIN` of the
   keys log, where it is (a key record removed, reordered or inserted), and
   the fold goes on from it, as a run's chain does.
2. Each fact is attributed to its run (``header.run_id``; an undecodable one
   to its record key, else to :data:`UNATTRIBUTED`), and the run's facts are
   checked in log order: the prev header names the digest of the run's last
   validly signed fact (:data:`GENESIS` first; else :data:`BROKEN_CHAIN`: a
   record altered, removed, reordered or inserted), the signature verifies
   with a controller key live at the fact's time (:data:`UNSIGNED`,
   :data:`UNKNOWN_KEY`, :data:`BAD_SIGNATURE`, :data:`REVOKED_KEY`,
   :data:`NOT_CONTROLLER`), the value decodes (:data:`UNDECODABLE`), a
   ``RunSubmitted`` or ``CancelRequested`` carries its operator's signature over
   the same bytes by a key registered to the event's ``principal``
   (``REQUEST_*``), and the fold accepts the run's validly signed facts in order
   (:data:`FOLD_REFUSED`, with the fold's reason; a ``WriteRejected`` of a run
   the fold does not know is informational, as the controller writes it).
   Each fact names, inside its signed message, the keys log's head the
   controller judged it under (``runledger-keys-head``); a validly signed fact
   whose keys head is not one of the keys log's records is
   :data:`KEYS_HEAD_MISSING` (key records were removed from the keys log's
   end, say a revocation), and a fact that names none is :data:`UNANCHORED`
   (a log written before facts named it: refused, not read as it was).
   Node-keyed facts (``node/<name>``) are chained and signed too, never folded.

Only a validly signed fact moves its run's chain forward: a forged or altered
record is reported once, where it is, and the run's next genuine fact is then
judged against the last genuine one (after an alteration, that next fact
names the lost original and is reported too). A genuine fact out of place
(after a removal, a reordering) moves the chain to itself, so one gap is
reported once; a genuine fact played a second time moves nothing.

**The end of a chain.** Removing a run's *last* facts leaves a valid, shorter
chain: nothing that remains names what was removed. The log alone cannot
show it. ``heads`` (a run's head digest from an earlier report,
:attr:`RunVerdict.head`, kept elsewhere, or the signed heads an export
carries: ``events.signed.loghead``) closes that gap: a run whose chain no longer
reaches its recorded head is :data:`TRUNCATED`. The keys log's end is held by
the facts that name it, and in a copy by its signed heads.

Tested in tests/events/signed/test_audit.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from events.codec import Codec, default_codec
from events.errors import DecodeError
from events.fold import apply as fold_apply
from events.model import CancelRequested, Event, RunSubmitted, WriteRejected
from events.names import NODE_PREFIX
from events.signed import keyring
from events.signed.keyring import EMPTY, KeyRing, Refusal, check_headers
from events.signed.signing import (
    GENESIS,
    KEYS_HEAD_HEADER,
    REQUEST_KEY_HEADER,
    REQUEST_SIG_HEADER,
    Headers,
    fact_digest,
    fact_message,
    prev_of,
    request_message,
    signature_of,
)
from events.state import RunState
from events.topics import KEYS, RUNS

UNSIGNED = keyring.UNSIGNED
UNKNOWN_KEY = keyring.UNKNOWN_KEY
BAD_SIGNATURE = keyring.BAD_SIGNATURE
REVOKED_KEY = keyring.REVOKED_KEY
NOT_CONTROLLER = "not_controller"
BROKEN_CHAIN = "broken_chain"
UNDECODABLE = "undecodable"
FOLD_REFUSED = "fold_refused"
REQUEST_UNSIGNED = "request_unsigned"
REQUEST_BAD_SIGNATURE = "request_bad_signature"
REQUEST_WRONG_PRINCIPAL = "request_wrong_principal"
REQUEST_UNKNOWN_KEY = "request_unknown_key"
REQUEST_REVOKED_KEY = "request_revoked_key"
REQUEST_WRONG_ROLE = "request_wrong_role"
KEY_REFUSED = "key_refused"
NO_ANCHOR = "no_anchor"
UNTRUSTED_ANCHOR = "untrusted_anchor"
TRUNCATED = "truncated"
UNANCHORED = "unanchored"
KEYS_HEAD_MISSING = "keys_head_missing"

# A problem of the record being checked: ``problem(reason, detail)``.
_Report = Callable[[str, str], None]

# The run of an undecodable fact that has no record key.
UNATTRIBUTED = "?"
CONTROLLER = "controller"
OPERATOR = "operator"

# keyring.check's reasons as a fact's signature problem, and as a request's.
_FACT = {keyring.WRONG_ROLE: NOT_CONTROLLER}
_REQUEST = {UNSIGNED: REQUEST_UNSIGNED, BAD_SIGNATURE: REQUEST_BAD_SIGNATURE,
            keyring.WRONG_PRINCIPAL: REQUEST_WRONG_PRINCIPAL, UNKNOWN_KEY: REQUEST_UNKNOWN_KEY,
            REVOKED_KEY: REQUEST_REVOKED_KEY, keyring.WRONG_ROLE: REQUEST_WRONG_ROLE}


@dataclass(frozen=True, slots=True)
class LoggedRecord:
    """One Kafka record as stored: where it is, its value bytes and its headers.

    Headers keep the log's order and repeats (a header Kafka holds as null is
    ``b""``). ``key`` (the record key) only attributes an undecodable fact to its run.
    """

    topic: str
    partition: int
    offset: int
    value: bytes
    headers: Headers
    key: bytes | None = None

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class Problem:
    where: str
    run_id: str
    reason: str
    detail: str

    def __str__(self) -> str:
        return f"{self.where} {self.run_id}: {self.reason} ({self.detail})"


@dataclass(frozen=True, slots=True)
class RunVerdict:
    """One run's chain: its records, its problems, and its head (the last genuine digest)."""

    run_id: str
    ok: bool
    records: int
    problems: tuple[Problem, ...]
    head: str = GENESIS


@dataclass(frozen=True, slots=True)
class AuditReport:
    anchor: str | None
    trust: str | None
    keys: tuple[Problem, ...]
    runs: tuple[RunVerdict, ...]
    ring: KeyRing = EMPTY

    @property
    def ok(self) -> bool:
        return not self.keys and all(run.ok for run in self.runs)

    @property
    def problems(self) -> tuple[Problem, ...]:
        return self.keys + tuple(p for run in self.runs for p in run.problems)


@dataclass(slots=True)
class _Chain:
    """A run's chain while it is checked (mutable, private to one :func:`verify`)."""

    head: str = GENESIS
    records: int = 0
    problems: list[Problem] = field(default_factory=list)
    state: RunState | None = None
    digests: set[str] = field(default_factory=set)


def verify(keys_records: Iterable[LoggedRecord], runs_records: Iterable[LoggedRecord],
           trust: str | None = None, heads: Mapping[str, str] | None = None,
           codec: Codec | None = None) -> AuditReport:
    """Every problem of the keys log and of each run's facts, and the trust anchor."""
    codec = codec or default_codec()
    ring, key_problems = fold_keys(keys_records, codec)
    if ring.anchor is None:
        key_problems.append(Problem(KEYS, "", NO_ANCHOR, "no admin key anchors the keys log"))
    elif trust is not None and ring.anchor != trust:
        key_problems.append(Problem(KEYS, "", UNTRUSTED_ANCHOR,
                                    f"the anchor is {ring.anchor}, the pinned one {trust}"))
    chains: dict[str, _Chain] = {}
    for record in runs_records:
        _check_fact(ring, chains, record, codec)
    for run_id, head in sorted((heads or {}).items()):
        chain = chains.setdefault(run_id, _Chain())
        if head != GENESIS and head not in chain.digests:
            chain.problems.append(Problem(f"{RUNS}@end", run_id, TRUNCATED,
                                          f"the chain never reaches its recorded head {head}"))
    runs = tuple(RunVerdict(run_id, not c.problems, c.records, tuple(c.problems), c.head)
                 for run_id, c in chains.items())
    return AuditReport(ring.anchor, trust, tuple(key_problems), runs, ring)


def fold_keys(records: Iterable[LoggedRecord],
              codec: Codec | None = None) -> tuple[KeyRing, list[Problem]]:
    """The key ring of a keys log, and the problem of each record it refuses."""
    codec = codec or default_codec()
    ring, problems = EMPTY, []
    for record in records:
        try:
            event = codec.decode(record.value).event
        except DecodeError as exc:
            run_id = _key_text(record.key) or UNATTRIBUTED
            problems.append(Problem(record.where, run_id, UNDECODABLE, str(exc)))
            continue
        found = signature_of(record.headers)
        signer, signature = found if isinstance(found, tuple) else (None, None)
        prev = prev_of(record.headers)
        broken = keyring.broken_link(ring, prev)
        if broken is not None:
            problems.append(Problem(record.where, event.run_id, BROKEN_CHAIN, broken))
        after = keyring.apply(ring, event, signer, signature, record.value, prev)
        if isinstance(after, Refusal):
            problems.append(Problem(record.where, event.run_id, KEY_REFUSED, str(after)))
        else:
            ring = after
    return ring, problems


def _check_fact(ring: KeyRing, chains: dict[str, _Chain], record: LoggedRecord,
                codec: Codec) -> None:
    event: Event | None = None
    try:
        event = codec.decode(record.value).event
        run_id = event.run_id
    except DecodeError as exc:
        run_id = _key_text(record.key) or UNATTRIBUTED
        undecodable: str | None = str(exc)
    else:
        undecodable = None
    chain = chains.setdefault(run_id, _Chain())
    chain.records += 1

    def problem(reason: str, detail: str) -> None:
        chain.problems.append(Problem(record.where, run_id, reason, detail))

    if undecodable is not None:
        problem(UNDECODABLE, undecodable)
    at = event.header.occurred_at if event is not None else None
    digest = _chained_and_signed(ring, chain, record, at, problem)
    if digest is None:
        return
    if digest in chain.digests:
        # A genuine fact played again: its chain break is reported; the run goes on
        # from where it was, so the facts after it are not reported too.
        problem(BROKEN_CHAIN, "a replay of an earlier fact of the run")
        return
    chain.head = digest
    chain.digests.add(digest)
    if event is not None:
        _check_request(ring, record, event, problem)
        _fold(chain, event, problem)


def _chained_and_signed(ring: KeyRing, chain: _Chain, record: LoggedRecord, at: int | None,
                        problem: _Report) -> str | None:
    """The fact's digest when a controller key signed it; chain breaks are reported apart."""
    prev = prev_of(record.headers)
    if prev is None:
        problem(BROKEN_CHAIN, "no prev header, or not one 64-hex digest")
        return None
    if prev != chain.head:
        problem(BROKEN_CHAIN, f"names prev {prev[:16]}, the run's last fact is {chain.head[:16]}")
    keys_head = prev_of(record.headers, KEYS_HEAD_HEADER)
    if keys_head is None:
        problem(UNANCHORED, "no runledger-keys-head naming the keys log's head it was signed "
                            "under (a controller older than the anchored keys log wrote it); "
                            "this runledger refuses such a log: make a new stack")
    message = fact_message(prev, record.value, keys_head)
    why = check_headers(ring, record.headers, message, principal=None, role=CONTROLLER, at=at)
    found = signature_of(record.headers)
    if why is not None:
        signer = found[0] if isinstance(found, tuple) else "nobody"
        problem(_FACT.get(why, why), f"signed by {signer}")
        return None
    if keys_head is not None and keys_head != GENESIS and keys_head not in ring.heads:
        problem(KEYS_HEAD_MISSING, f"signed under keys head {keys_head[:16]}, which no record "
                                   f"of the keys log has: key records were removed from it "
                                   f"(its last is {ring.head[:16]})")
    assert isinstance(found, tuple)  # check_headers found it
    return fact_digest(record.value, found[1])


def _check_request(ring: KeyRing, record: LoggedRecord, event: Event, problem: _Report) -> None:
    """A fact copied from a request carries its operator's signature over the same bytes."""
    if not isinstance(event, RunSubmitted | CancelRequested):
        return
    why = check_headers(ring, record.headers, request_message(record.value),
                        principal=event.principal, role=OPERATOR, at=event.header.occurred_at,
                        names=(REQUEST_SIG_HEADER, REQUEST_KEY_HEADER))
    if why is not None:
        problem(_REQUEST[why], f"{event.event_type} of principal {event.principal!r}")


def _fold(chain: _Chain, event: Event, problem: _Report) -> None:
    if event.run_id.startswith(NODE_PREFIX):
        return  # node inventory, not a run
    transition = fold_apply(chain.state, event)
    verdict = transition.verdict
    if not verdict.accepted and not isinstance(event, WriteRejected):
        problem(FOLD_REFUSED, f"{event.event_type}: {verdict.reason} ({verdict.detail})")
    if transition.state is not None:
        chain.state = transition.state


def _key_text(key: bytes | None) -> str | None:
    if not key:
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None
