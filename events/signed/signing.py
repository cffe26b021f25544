"""Ed25519 keys, the signed messages of each use, and the record headers that carry them.

Who signs what (the security issue; docs/architecture.md §4):

- an operator signs each request (:func:`request_message`);
- the controller signs each command (:func:`command_message`) and each fact
  (:func:`fact_message`), a fact together with the digest of its run's previous
  fact, so the facts of one run form a hash chain starting at :data:`GENESIS`;
- a node's agent signs each report it sends (:func:`report_message`) with its
  node key (``events.kafka.reportdoor``);
- an admin signs each key record on ``runledger.keys`` (:func:`key_message`),
  together with the digest of the previous key record (:func:`key_digest`), so
  the keys log is one hash chain starting at :data:`GENESIS` too;
- a fact also names the keys log's head the controller judged it under
  (:data:`KEYS_HEAD_HEADER`, inside its signed message): a key record removed
  from the end of the keys log is then missing from a chain a later fact names;
- whoever exports the log signs the heads of the copy (:func:`heads_message`).

A signature covers the exact value bytes stored in the log (the Avro single-object
encoding), never a re-encoding, and travels beside them in Kafka record headers:
:data:`SIG_HEADER`, :data:`KEY_HEADER` (the signer's key id) and, on facts and
key records, :data:`PREV_HEADER`; on facts :data:`KEYS_HEAD_HEADER`. A fact
copied from a request keeps the operator's signature in
:data:`REQUEST_SIG_HEADER` and :data:`REQUEST_KEY_HEADER`.

Each use prefixes its own ASCII tag and a NUL, so a signature made for one use
never verifies as another (a command replayed as a fact, a request as a key
record). The ``sign_*`` helpers return the headers a writer attaches;
:func:`signature_of` reads them back. Key generation is the only randomness here;
verification is deterministic and never raises on a bad signature. Keys are made,
saved and used to sign with ``cryptography``; verification, which every reader does
once per signed record, uses libsodium (PyNaCl), about twice as fast here.

Tested in tests/events/signed/test_signing.py.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

# Re-exported (X as X): sizes and ids, which need no cryptography.
from events.keyids import KEY_ID_CHARS as KEY_ID_CHARS
from events.keyids import PUBLIC_KEY_BYTES as PUBLIC_KEY_BYTES
from events.keyids import SIGNATURE_BYTES as SIGNATURE_BYTES
from events.keyids import is_key_id as is_key_id
from events.keyids import key_id_of as key_id_of
from events.signed.seen import SEEN

SIG_HEADER = "runledger-sig"
KEY_HEADER = "runledger-key"
PREV_HEADER = "runledger-prev"
KEYS_HEAD_HEADER = "runledger-keys-head"
REQUEST_SIG_HEADER = "runledger-request-sig"
REQUEST_KEY_HEADER = "runledger-request-key"

# The prev of a run's first fact: the digest of nothing.
GENESIS = "0" * 64

REQUEST_TAG = b"runledger/request/v1"
COMMAND_TAG = b"runledger/command/v1"
FACT_TAG = b"runledger/fact/v1"
REPORT_TAG = b"runledger/report/v1"
# v2 facts name the keys log's head too; v2 key records name their prev. A v1
# signature never verifies as v2 (the tag differs), so an old record cannot be
# passed off as a new one by adding headers.
ANCHORED_FACT_TAG = b"runledger/fact/v2"
KEY_TAG = b"runledger/key/v2"
DIGEST_TAG = b"runledger/fact-digest/v1"
KEY_DIGEST_TAG = b"runledger/key-digest/v1"
HEADS_TAG = b"runledger/log-heads/v1"

Headers = tuple[tuple[str, bytes], ...]

_DIGEST = re.compile(r"[0-9a-f]{64}")



def is_digest(value: str) -> bool:
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


class PublicKey:
    """An Ed25519 public key: what a key record registers and a verifier checks with."""

    __slots__ = ("_key", "_raw")

    def __init__(self, raw: bytes) -> None:
        if not isinstance(raw, bytes) or len(raw) != PUBLIC_KEY_BYTES:
            raise ValueError(f"an Ed25519 public key is {PUBLIC_KEY_BYTES} raw bytes")
        self._raw = raw
        Ed25519PublicKey.from_public_bytes(raw)  # refuses what is no key, as it always has
        self._key = VerifyKey(raw)

    @classmethod
    def from_raw(cls, raw: bytes) -> PublicKey:
        return cls(raw)

    @property
    def raw(self) -> bytes:
        return self._raw

    @property
    def key_id(self) -> str:
        return key_id_of(self._raw)

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is this key's over ``message``; False, never an error.
        A signature this process verified recently is not verified again
        (``events.signed.seen``)."""
        if not isinstance(signature, bytes) or len(signature) != SIGNATURE_BYTES:
            return False
        seen = SEEN.digest(self._raw, signature, message)
        if seen in SEEN:
            return True
        try:
            self._key.verify(message, signature)
        except (BadSignatureError, ValueError):
            return False
        SEEN.add(seen)
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._raw)

    def __repr__(self) -> str:
        return f"PublicKey({self.key_id})"


class SigningKey:
    """An Ed25519 private key. Its ``repr`` names the public key id only."""

    __slots__ = ("_key", "_public")

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        raw = key.public_key().public_bytes(serialization.Encoding.Raw,
                                            serialization.PublicFormat.Raw)
        self._public = PublicKey(raw)

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: str | Path) -> SigningKey:
        """A key from a PEM PKCS#8 file (unencrypted), as :meth:`save` writes it."""
        data = Path(path).read_bytes()
        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{path}: not an Ed25519 private key")
        return cls(key)

    def save(self, path: str | Path) -> None:
        """Write the key as PEM PKCS#8, mode 0600; an existing file is never overwritten."""
        pem = self.pem()
        # O_EXCL: refuse a file (or a link) that is already there, atomically; the
        # mode is set at creation so the key is never readable by others, even briefly.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask left
            os.write(fd, pem)
        finally:
            os.close(fd)

    def pem(self) -> bytes:
        """The key as PEM PKCS#8 (what :meth:`save` writes), for a file of another shape."""
        return self._key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())

    @classmethod
    def from_pem(cls, data: bytes) -> SigningKey:
        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("not an Ed25519 private key")
        return cls(key)

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    @property
    def public(self) -> PublicKey:
        return self._public

    @property
    def key_id(self) -> str:
        return self._public.key_id

    def __repr__(self) -> str:
        return f"SigningKey({self.key_id})"


def _tagged(tag: bytes, *parts: bytes) -> bytes:
    return b"".join((tag, b"\x00", *parts))


def request_message(value: bytes) -> bytes:
    return _tagged(REQUEST_TAG, value)


def command_message(value: bytes) -> bytes:
    return _tagged(COMMAND_TAG, value)


def _digest_bytes(digest: str, what: str) -> bytes:
    if not is_digest(digest):
        raise ValueError(f"{what} digest {digest!r:.80} is not 64 lowercase hex characters")
    return digest.encode("ascii")


def report_message(value: bytes) -> bytes:
    return _tagged(REPORT_TAG, value)


def key_message(prev_digest: str, value: bytes) -> bytes:
    """What an admin signs for a key record: the previous key record's digest, then the value."""
    return _tagged(KEY_TAG, _digest_bytes(prev_digest, "prev"), value)


def fact_message(prev_digest: str, value: bytes, keys_head: str | None = None) -> bytes:
    """What the controller signs for a fact: the previous fact's digest, then the value.

    With ``keys_head`` (the digest of the newest key record the controller's
    ring had folded, :data:`GENESIS` for none) that digest comes between them,
    under its own tag. Digests have a fixed length (64 hex characters), so
    where one ends and the next part starts is never ambiguous. Without it the
    message is the v1 one, which only a log written before facts named the keys
    head has (the audit reports such a fact).
    """
    prev = _digest_bytes(prev_digest, "prev")
    if keys_head is None:
        return _tagged(FACT_TAG, prev, value)
    return _tagged(ANCHORED_FACT_TAG, prev, _digest_bytes(keys_head, "keys head"), value)


def heads_message(body: bytes) -> bytes:
    """What an exporter signs: the canonical JSON of a copy's heads (``events.signed.loghead``)."""
    return _tagged(HEADS_TAG, body)


def _link(tag: bytes, value: bytes, signature: bytes) -> str:
    # The value's length comes first so no other (value, signature) split of the
    # same bytes has the same digest.
    h = hashlib.sha256(_tagged(tag, len(value).to_bytes(8, "big")))
    h.update(value)
    h.update(signature)
    return h.hexdigest()


def fact_digest(value: bytes, signature: bytes) -> str:
    """The link the next fact of the run names: SHA-256 over the value and its signature."""
    return _link(DIGEST_TAG, value, signature)


def key_digest(value: bytes, signature: bytes) -> str:
    """The link the next key record names, and a fact's keys head: as :func:`fact_digest`."""
    return _link(KEY_DIGEST_TAG, value, signature)


def _signed(key: SigningKey, message: bytes) -> Headers:
    return ((SIG_HEADER, key.sign(message)), (KEY_HEADER, key.key_id.encode("ascii")))


def sign_request(key: SigningKey, value: bytes) -> Headers:
    """The headers of an operator's signed request."""
    return _signed(key, request_message(value))


def sign_command(key: SigningKey, value: bytes) -> Headers:
    """The headers of a command the controller signs."""
    return _signed(key, command_message(value))


def sign_report(key: SigningKey, value: bytes) -> Headers:
    """The headers of a report a node's agent signs with its node key."""
    return _signed(key, report_message(value))


def sign_key_record(key: SigningKey, prev: str, value: bytes) -> Headers:
    """The headers of a key record an admin signs (the first one: its own key, prev
    :data:`GENESIS`): signature, key id, prev."""
    return (*_signed(key, key_message(prev, value)), (PREV_HEADER, prev.encode("ascii")))


def sign_fact(key: SigningKey, prev: str, value: bytes,
              request: Headers = (), keys_head: str | None = None) -> Headers:
    """The headers of a fact: signature, key id, prev, keys head; a copied request's signature.

    ``request`` is the headers the request arrived with (:func:`sign_request`),
    for a fact that copies a request's value bytes; they are carried over as
    :data:`REQUEST_SIG_HEADER` and :data:`REQUEST_KEY_HEADER`. ``keys_head``
    None writes a v1 fact (no :data:`KEYS_HEAD_HEADER`): only tests of old logs do.
    """
    out = (*_signed(key, fact_message(prev, value, keys_head)),
           (PREV_HEADER, prev.encode("ascii")))
    if keys_head is not None:
        out += ((KEYS_HEAD_HEADER, keys_head.encode("ascii")),)
    return out + carried_request(request)


def carried_request(request: Headers) -> Headers:
    """A request's signature headers, renamed as a fact carries them."""
    renamed = {SIG_HEADER: REQUEST_SIG_HEADER, KEY_HEADER: REQUEST_KEY_HEADER}
    return tuple((renamed[name], value) for name, value in request if name in renamed)


def header_values(headers: Headers, name: str) -> list[bytes]:
    return [value for key, value in headers if key == name]


def signature_of(headers: Headers, sig_name: str = SIG_HEADER,
                 key_name: str = KEY_HEADER) -> tuple[str, bytes] | str:
    """``(key id, signature)`` from a record's headers, or why there is none.

    A header given twice counts as none: two verifiers could otherwise each
    read a different one.
    """
    sigs, keys = header_values(headers, sig_name), header_values(headers, key_name)
    if not sigs or not keys:
        missing = sig_name if not sigs else key_name
        return f"no {missing} header"
    if len(sigs) > 1 or len(keys) > 1:
        return f"{sig_name} or {key_name} given more than once"
    try:
        key_id = keys[0].decode("ascii")
    except UnicodeDecodeError:
        return f"{key_name} is not ASCII"
    return key_id, sigs[0]


def prev_of(headers: Headers, name: str = PREV_HEADER) -> str | None:
    """The prev digest a fact or key record names (or, with ``name``
    :data:`KEYS_HEAD_HEADER`, a fact's keys head), or None when it names none
    (or several, or garbage)."""
    values = header_values(headers, name)
    if len(values) != 1:
        return None
    try:
        prev = values[0].decode("ascii")
    except UnicodeDecodeError:
        return None
    return prev if is_digest(prev) else None
