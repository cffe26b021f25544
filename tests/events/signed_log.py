"""Signed logs for the signing tests: real Ed25519 keys, the real codec, facts the fold accepts.

``KeysLog`` appends key records signed as an admin would (``sign_key_record``,
chained from the log's head); ``RunsLog`` appends facts as the controller would
(``sign_fact``, each run's chain kept from its head, naming ``keys_head``, the
keys log's head the story's controller judged by), a ``RunSubmitted`` carrying
its operator's request signature. ``story()`` is one small log: an anchor admin, a controller, two
operators and an agent; run ``r1`` submitted by alice runs to success, run
``r2`` submitted by bob is cancelled, a node is quarantined and an input of an
unknown run is rejected, the runs interleaved over two partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events.codec import default_codec
from events.kafka.reportdoor import node_principal
from events.model import Event, RunSubmitted
from events.signed.audit import LoggedRecord, fold_keys
from events.signed.keyring import KeyRing
from events.signed.signing import (
    GENESIS,
    Headers,
    SigningKey,
    fact_digest,
    key_digest,
    sign_fact,
    sign_key_record,
    sign_request,
    signature_of,
)
from events.topics import KEYS, RUNS
from tests.events.builders import Ev

CODEC = default_codec()
START = 1_700_000_000_000


@dataclass(frozen=True)
class Cast:
    """Everyone's signing key (generated once per test session)."""

    admin: SigningKey = field(default_factory=SigningKey.generate)
    controller: SigningKey = field(default_factory=SigningKey.generate)
    alice: SigningKey = field(default_factory=SigningKey.generate)
    bob: SigningKey = field(default_factory=SigningKey.generate)
    agent: SigningKey = field(default_factory=SigningKey.generate)
    stranger: SigningKey = field(default_factory=SigningKey.generate)  # never registered


CAST = Cast()


class KeysLog:
    def __init__(self, at: int = START - 100_000) -> None:
        self.records: list[LoggedRecord] = []
        self.ev = Ev("keys", start=at, producer="admin/root", ids="keys-{n}")
        self.head = GENESIS

    def append(self, event: Event, signer: SigningKey, prev: str | None = None) -> LoggedRecord:
        """A key record chained to the log's head (or to ``prev``); it becomes the head."""
        value = CODEC.encode(event)
        headers = sign_key_record(signer, self.head if prev is None else prev, value)
        record = LoggedRecord(KEYS, 0, len(self.records), value, headers,
                              event.run_id.encode())
        self.records.append(record)
        self.head = key_digest(value, headers[0][1])
        return record

    def register(self, principal: str, role: str, key: SigningKey,
                 signer: SigningKey | None = None, **kw: object) -> LoggedRecord:
        event = self.ev.key_registered(principal, role, key.public.raw, **kw)
        return self.append(event, signer or CAST.admin)

    def revoke(self, principal: str, key: SigningKey, signer: SigningKey | None = None,
               **kw: object) -> LoggedRecord:
        event = self.ev.key_revoked(principal, key.key_id, **kw)
        return self.append(event, signer or CAST.admin)


def cast_keys() -> KeysLog:
    keys = KeysLog()
    keys.register("root", "admin", CAST.admin, signer=CAST.admin)  # the anchor
    keys.register("controller", "controller", CAST.controller)
    keys.register("alice", "operator", CAST.alice)
    keys.register("bob", "operator", CAST.bob)
    keys.register("node-a", "agent", CAST.agent)
    return keys


def node_rings(nodes: dict[str, SigningKey], revoked: str) -> tuple[KeyRing, KeyRing]:
    """The cast's ring with each node's agent key registered as ``node.<name>``; and the
    same after node ``revoked``'s key is revoked."""
    keys = cast_keys()
    for name, key in nodes.items():
        keys.register(node_principal(name), "agent", key)
    ring, problems = fold_keys(keys.records)
    keys.revoke(node_principal(revoked), nodes[revoked])
    after, more = fold_keys(keys.records)
    assert problems == [] and more == []
    return ring, after


class RunsLog:
    """Facts as the controller appends them, each run's chain continued from its head."""

    def __init__(self, keys_head: str = GENESIS) -> None:
        self.records: list[LoggedRecord] = []
        self.heads: dict[str, str] = {}
        self._offsets: dict[int, int] = {}
        self.keys_head = keys_head  # what each fact names: set it as the keys log grows

    def append(self, event: Event, key: SigningKey | None = None, request: Headers = (),
               partition: int = 0, prev: str | None = None) -> LoggedRecord:
        value = CODEC.encode(event)
        prev = prev or self.heads.get(event.run_id, GENESIS)
        headers = sign_fact(key or CAST.controller, prev, value, request, self.keys_head)
        offset = self._offsets.get(partition, 0)
        self._offsets[partition] = offset + 1
        record = LoggedRecord(RUNS, partition, offset, value, headers, event.run_id.encode())
        self.records.append(record)
        self.heads[event.run_id] = digest_of(record)
        return record

    def submit(self, event: RunSubmitted, operator: SigningKey,
               partition: int = 0) -> LoggedRecord:
        """The request's value bytes copied onto runs with the operator's signature."""
        request = sign_request(operator, CODEC.encode(event))
        return self.append(event, request=request, partition=partition)


def digest_of(record: LoggedRecord) -> str:
    found = signature_of(record.headers)
    assert isinstance(found, tuple)
    return fact_digest(record.value, found[1])


def story() -> tuple[KeysLog, RunsLog]:
    keys = cast_keys()
    runs = RunsLog(keys.head)
    r1, r2 = Ev("r1", start=START, producer="controller"), Ev("r2", start=START + 500,
                                                             producer="controller")
    runs.submit(r1.submitted(principal="alice"), CAST.alice, partition=0)
    runs.submit(r2.submitted(principal="bob"), CAST.bob, partition=1)
    runs.append(r1.queued(), partition=0)
    runs.append(r1.admitted(), partition=0)
    runs.append(r2.queued(), partition=1)
    runs.append(r1.generation_started(1), partition=0)
    runs.append(r1.confirmed(1), partition=0)
    runs.append(r2.cancelled(), partition=1)
    runs.append(r1.step(1, 1), partition=0)
    runs.append(r1.quarantined("node-b"), partition=1)
    runs.append(r1.step(1, 2), partition=0)
    runs.append(r1.committed(1, 2), partition=0)
    runs.append(r2.rejected(run_id="ghost", reason="unknown_run"), partition=1)
    runs.append(r1.finished(1), partition=0)
    return keys, runs


OLD_CONTROLLER = SigningKey.generate()  # a controller key that is rotated out and revoked


@dataclass
class Rotated:
    """The issue's attack, as a log: a revoked controller key still signs r1's end."""

    keys: KeysLog
    runs: RunsLog
    revocation: LoggedRecord  # the revocation of OLD_CONTROLLER
    forged: LoggedRecord  # r1's outcome rewritten, signed by OLD_CONTROLLER after it
    after: list[LoggedRecord]  # genuine facts signed after the revocation, naming it


def rotated_story(trailing: bool) -> Rotated:
    """The controller's old key is registered, used, and revoked; ``trailing``: the
    revocation is the keys log's last record (else an operator is registered after it).

    Facts signed after the revocation name the keys head it made. The forged
    ``RunFinished`` (failed) of r1 is chained onto r1's genuine facts and signed by the
    revoked key, naming the keys head before the revocation, as its forger would.
    """
    keys = cast_keys()
    keys.register("controller-old", "controller", OLD_CONTROLLER)
    before = keys.head
    runs = RunsLog(keys.head)
    r1, r2 = Ev("r1", start=START, producer="controller"), Ev("r2", start=START + 500,
                                                             producer="controller")
    runs.submit(r1.submitted(principal="alice"), CAST.alice)
    runs.append(r1.queued(), key=OLD_CONTROLLER)
    runs.append(r1.admitted(), key=OLD_CONTROLLER)
    # Revoked after r1's admission and before the forged end (times: events.signed.keyring).
    revocation = keys.revoke("controller-old", OLD_CONTROLLER, at=START + 10_000)
    if not trailing:
        keys.register("carol", "operator", SigningKey.generate(), at=START + 11_000)
    runs.keys_head = keys.head
    after = [runs.submit(r2.submitted(principal="bob"), CAST.bob, partition=1),
             runs.append(r2.queued(), partition=1),
             runs.append(r1.generation_started(1)), runs.append(r1.confirmed(1))]
    runs.keys_head = before
    forged = runs.append(Ev("r1", start=START + 60_000, producer="controller").finished(
        1, outcome="failed", reason="rewritten"), key=OLD_CONTROLLER)
    return Rotated(keys, runs, revocation, forged, after)
