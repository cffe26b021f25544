"""Key ids and key sizes: what an event may say about a key without any cryptography.

The key catalog's events (``events.principals``) name keys by id and carry raw
public keys; checking their shape needs only these. ``events.signed.signing``, which
loads the cryptography libraries, re-exports them, so every reader of the event
model (every command) does not pay for signing it never does.

Tested in tests/events/signed/test_signing.py.
"""

from __future__ import annotations

import hashlib
import re

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
KEY_ID_CHARS = 16

_KEY_ID = re.compile(r"[0-9a-f]{16}")


def key_id_of(raw: bytes) -> str:
    """The id of a raw public key: the first 16 hex characters of its SHA-256."""
    return hashlib.sha256(raw).hexdigest()[:KEY_ID_CHARS]


def is_key_id(value: str) -> bool:
    return isinstance(value, str) and _KEY_ID.fullmatch(value) is not None
