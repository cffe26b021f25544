"""A run's own key: what a run's workers sign their reports with, vouched for by their node.

The broker's ``worker`` role says only that some worker wrote a report, and
every worker on every node holds it. So that a job can speak for its own run
and no other, the agent that starts a run's workers on node N gives them a
**run key**: a fresh Ed25519 key for exactly one (run, generation, node), with a
certificate, the node key's signature over those three names and the run key's
public half (:func:`cert_message`). The agent writes both to a 0600 file in its
work dir (:meth:`RunKey.save`) and names it in the worker's environment
(:data:`ENV`); a worker signs every report with it (:meth:`RunKey.headers`:
the signature and key id as any signed record has, and the certificate in
:data:`CERT_HEADER`). No registry is involved: the certificate carries its own
authority, the node key registered on ``runledger.keys``.

:func:`judge_worker_report` (pure) believes a worker's report only when the
certificate is the live agent key of ``node.<N>``'s signature for the report's
own run and generation, the report is the run key's signature over its exact
value bytes (``runledger/worker-report/v1``, a tag no other use signs), the
report's ``node`` (when it names one) is N, and N hosts a member of that
generation (when the reader knows the run). A job on another node, or of another
run on the same node, holds no certificate for the run it would forge.

What a run key cannot stop: a process that can read the file (the worker's OS
user, which by default is the agent's) can sign for that run, generation and
node, the same reach a worker already has. Reports of a plaintext stack (a keys
log with no anchor) may be unsigned.

Tested in tests/events/kafka/test_runkeys.py and tests/e2e/test_node_identity.py.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from events.kafka.clients import EventProducer, OnFailure, event_headers
from events.model import Event
from events.record import Record
from events.signed.keyring import BAD_SIGNATURE, UNSIGNED, KeyRing, check
from events.signed.signing import (
    KEY_HEADER,
    SIG_HEADER,
    Headers,
    PublicKey,
    SigningKey,
    header_values,
    signature_of,
)
from events.topics import REPORTS

# The worker's environment names its run key file (set by the agent, never a spec).
ENV = "RUNLEDGER_WORKER_KEY"
CERT_HEADER = "runledger-cert"
CERT_TAG = b"runledger/run-key-cert/v1"
REPORT_TAG = b"runledger/worker-report/v1"
AGENT_ROLE = "agent"
FILE_VERSION = 1

# Refusals of this door besides the keyring's own reasons.
BAD_CERT = "bad_cert"  # no, several or a garbled certificate beside a signature
WRONG_RUN = "wrong_run"  # certified for another run or generation than the report's
NODE_MISMATCH = "node_mismatch"  # the report names another node than its certificate
NOT_PLACED = "not_placed"  # the certifying node hosts no member of that generation


# (run id, generation) -> the nodes hosting that generation's members, when the
# reader knows them (the controller's model); None: unknown, any certifying node.
Hosts = Callable[[str, int], frozenset[str] | None]


def _anywhere(run_id: str, generation: int) -> None:
    return None


class RunKeyError(ValueError):
    """A run key file that cannot be read (the message names the file)."""


@dataclass(frozen=True, slots=True)
class Cert:
    """Node ``node``'s word that ``public`` speaks for ``run_id`` generation ``generation``."""

    run_id: str
    generation: int
    node: str
    public: str  # the run key's public half, hex
    node_key_id: str
    signature: str  # the node key's signature over cert_message(...), hex

    def to_bytes(self) -> bytes:
        return json.dumps([self.run_id, self.generation, self.node, self.public,
                           self.node_key_id, self.signature], separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Cert | None:
        """The certificate a header carries; None when it is not one."""
        try:
            parts = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return None
        if not (isinstance(parts, list) and len(parts) == 6
                and isinstance(parts[1], int) and not isinstance(parts[1], bool)
                and all(isinstance(p, str) for i, p in enumerate(parts) if i != 1)):
            return None
        return cls(*parts)


def cert_message(run_id: str, generation: int, node: str, public: str) -> bytes:
    """What a node key signs to vouch for a run key (canonical JSON: no split is ambiguous)."""
    body = json.dumps([run_id, generation, node, public], separators=(",", ":"))
    return b"".join((CERT_TAG, b"\x00", body.encode()))


def report_message(value: bytes) -> bytes:
    return b"".join((REPORT_TAG, b"\x00", value))


@dataclass(frozen=True, slots=True)
class RunKey:
    key: SigningKey
    cert: Cert

    @classmethod
    def issue(cls, node_key: SigningKey, run_id: str, generation: int, node: str) -> RunKey:
        """A fresh key for one run, generation and node, certified by the node's key."""
        key = SigningKey.generate()
        public = key.public.raw.hex()
        signature = node_key.sign(cert_message(run_id, generation, node, public))
        return cls(key, Cert(run_id, generation, node, public, node_key.key_id,
                             signature.hex()))

    def headers(self, value: bytes) -> Headers:
        """What a worker attaches to a report: signature, key id and certificate."""
        sig = self.key.sign(report_message(value))
        return ((SIG_HEADER, sig), (KEY_HEADER, self.key.key_id.encode("ascii")),
                (CERT_HEADER, self.cert.to_bytes()))

    def save(self, path: Path) -> None:
        """Write the key and its certificate, mode 0600; never over an existing file."""
        body = json.dumps({"version": FILE_VERSION, "key": self.key.pem().decode("ascii"),
                           "cert": json.loads(self.cert.to_bytes())}).encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, body)
        finally:
            os.close(fd)

    @classmethod
    def load(cls, path: str | Path) -> RunKey:
        try:
            doc = json.loads(Path(path).read_bytes())
            if doc.get("version") != FILE_VERSION:
                raise ValueError(f"version {doc.get('version')!r}, expected {FILE_VERSION}")
            cert = Cert.from_bytes(json.dumps(doc["cert"]).encode())
            if cert is None:
                raise ValueError("its cert is not a run key certificate")
            key = SigningKey.from_pem(doc["key"].encode("ascii"))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RunKeyError(f"cannot read the run key {path} ({ENV}): {exc}") from None
        if key.public.raw.hex() != cert.public:
            raise RunKeyError(f"the run key {path} ({ENV}) does not match its certificate")
        return cls(key, cert)


def from_environ(environ: Mapping[str, str]) -> RunKey | None:
    """The run key the agent named in a worker's environment; None when it named none
    (a plaintext stack, or an agent without a node key)."""
    path = environ.get(ENV)
    return RunKey.load(path) if path else None


def send_report(producer: EventProducer, event: Event, key: RunKey | None,
                on_failure: OnFailure | None = None) -> None:
    """Queue a worker's report on ``runledger.reports``, signed with its run key if any."""
    if key is None:
        producer.send(REPORTS, event, on_failure)
        return
    value = producer.codec.encode(event)
    written = producer.codec.registry.latest(event.event_type).version
    producer.send_bytes(REPORTS, event.run_id, value,
                        [*event_headers(event, written), *key.headers(value)], on_failure)


def judge_worker_report(ring: KeyRing, record: Record, *, require: bool,
                        hosts: Hosts = _anywhere, at: int | None = None) -> tuple[str, str] | None:
    """None when a worker's report may be believed, else (reason, detail). Pure.

    ``at``: the node key is judged as it was then (None: now), as ``keyring.check``."""
    event = record.event
    problem, node = _problem(ring, record, hosts, at)
    if problem is None or (problem == UNSIGNED and not require):
        return None
    where = f"{record.topic}[{record.partition}]@{record.offset}"
    return problem, (f"{event.event_type} of run {event.run_id} generation "
                     f"{event.header.generation} at {where}: {_meaning(problem, node)}; "
                     "nothing of it is believed")


def _problem(ring: KeyRing, record: Record, hosts: Hosts,
             at: int | None) -> tuple[str | None, str]:
    event, headers = record.event, record.headers
    found = signature_of(headers)
    certified, read = carried(headers)
    if isinstance(found, str):
        return (UNSIGNED if not certified else BAD_CERT), ""
    if read is None:
        return BAD_CERT, ""
    cert, public, node_sig, vouched_message = read
    if (cert.run_id, cert.generation) != (event.run_id, event.header.generation):
        return WRONG_RUN, cert.node
    named = getattr(event, "node", None)
    if isinstance(named, str) and named != cert.node:
        return NODE_MISMATCH, cert.node
    if public is None:
        return BAD_CERT, cert.node
    vouched = check(ring, principal=f"node.{cert.node}", key_id=cert.node_key_id,
                    message=vouched_message, signature=node_sig, role=AGENT_ROLE, at=at,
                    verify=_node_signed)
    if vouched is not None:
        return vouched, cert.node
    key_id, signature = found
    if key_id != public.key_id or not public.verify(report_message(record.value), signature):
        return BAD_SIGNATURE, cert.node
    placed = hosts(event.run_id, event.header.generation)
    if placed is not None and cert.node not in placed:
        return NOT_PLACED, cert.node
    return None, cert.node


# A certificate read: the certificate, its run key (None: garbled), the node's
# signature over it and the message that signature is over.
CertRead = tuple[Cert, PublicKey | None, bytes, bytes]

# Every report of one run key carries the same certificate: its parsing and the node
# key's signature over it are pure functions of their bytes, memoized here (one
# verification per certificate instead of one per report); the node key's status is
# still judged per record, against the ring as of the record (``check``).
CERT_CACHE = 4096


@functools.lru_cache(maxsize=CERT_CACHE)
def _read_cert(data: bytes) -> CertRead | None:
    """The certificate, its run key (None: garbled), the node's signature and the
    message that signature is over."""
    cert = Cert.from_bytes(data)
    if cert is None:
        return None
    message = cert_message(cert.run_id, cert.generation, cert.node, cert.public)
    try:
        return (cert, PublicKey(bytes.fromhex(cert.public)), bytes.fromhex(cert.signature),
                message)
    except ValueError:
        return cert, None, b"", message


def carried(headers: Headers) -> tuple[bool, CertRead | None]:
    """Whether a report carries a certificate header at all, and its one certificate
    read (None: it carries none, several, or a garbled one, which
    :func:`judge_worker_report` refuses). The door and ``events.kafka.ahead`` both
    read the headers through here, so they cannot disagree on which key signed."""
    certs = header_values(headers, CERT_HEADER)
    return bool(certs), (_read_cert(bytes(certs[0])) if len(certs) == 1 else None)


@functools.lru_cache(maxsize=CERT_CACHE)
def _signed_by(public: bytes, message: bytes, signature: bytes) -> bool:
    return PublicKey(public).verify(message, signature)


def _node_signed(public: PublicKey, message: bytes, signature: bytes) -> bool:
    return _signed_by(public.raw, message, signature)


def _meaning(problem: str, node: str) -> str:
    how = ("a run's workers sign with the run key their node's agent certified for that run "
           "and generation")
    return {
        UNSIGNED: f"not signed; {how} (RUNLEDGER_WORKER_KEY)",
        BAD_CERT: f"its run key certificate is missing or garbled; {how}",
        WRONG_RUN: f"its run key was certified by node {node!r} for another run or generation",
        NODE_MISMATCH: f"it names another node than {node!r}, whose run key signed it",
        NOT_PLACED: f"node {node!r}, which certified its run key, hosts no member of it",
        BAD_SIGNATURE: "its signature does not verify under its run key or certificate",
    }.get(problem, f"the certificate of its run key is not node {node!r}'s live agent key's "
                   f"signature ({problem})")
