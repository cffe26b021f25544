"""A secure local stack's signing keys: made once in ``<data dir>/keys/``, registered once.

``stack up`` keeps one Ed25519 key file (mode 0600, in a 0700 directory) for
the admin, the controller and the operator, the principals that sign (the
admin key records, the controller facts and commands, the operator requests),
and registers each on ``runledger.keys`` as the admin (the stack's
``credentials/admin.properties``): first the admin's own key, self-signed, the
trust anchor; then the others, each signed by it. It reads the keys log
first, so a restart registers nothing twice, and it keeps the key files, so a
restart signs with the keys already registered. A key file that was replaced
by hand registers the new key beside the old one; a key revoked on the log, or
an admin key that is not the one the log trusts, stops ``up`` with one line
saying what to do.

Tested in tests/runledger/stack/test_keys.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm

from events.signed.keyring import KeyRing
from events.signed.signing import SigningKey
from runledger import keylog
from runledger.errors import StackError
from runledger.stack.layout import ADMIN

DIR = "keys"
# Who signs on a local stack, each principal named as its role (as the Kafka principals are).
SIGNERS = (ADMIN, "controller", "operator")
PRODUCER = "stack/admin"


def keys_dir(data_dir: Path) -> Path:
    return data_dir / DIR


def key_file(data_dir: Path, principal: str) -> Path:
    return keys_dir(data_dir) / f"{principal}.key"


def ensure_keys(data_dir: Path, bootstrap: str, credentials: str) -> Path:
    """Make the key files that are missing and register the keys the log lacks; the keys dir."""
    keys = _key_files(data_dir)
    found = keylog.load_ring(bootstrap, credentials=credentials)
    ring, admin = found.ring, keys[ADMIN]
    if ring.anchor is None:
        ring = _register(bootstrap, ring, ADMIN, admin, admin, credentials)
    held = ring.get(admin.key_id)
    if held is None or held.role != ADMIN or held.revoked_at is not None:
        raise StackError(
            f"{key_file(data_dir, ADMIN)} (key {admin.key_id}) is not a live admin key on the "
            f"keys log of {bootstrap} (its anchor is {ring.anchor}); put back the admin key "
            "this stack made first, or start afresh with `runledger stack down --purge`")
    for principal in SIGNERS[1:]:
        key = keys[principal]
        entry = ring.get(key.key_id)
        if entry is None:
            ring = _register(bootstrap, ring, principal, key, admin, credentials)
        elif entry.revoked_at is not None:
            raise StackError(
                f"{key_file(data_dir, principal)} holds key {key.key_id}, revoked on the keys "
                "log; move the file away and run `runledger stack up` again to make and "
                "register a new one")
    return keys_dir(data_dir)


def _key_files(data_dir: Path) -> dict[str, SigningKey]:
    folder = keys_dir(data_dir)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)  # whatever the umask, or an older directory, left
    out: dict[str, SigningKey] = {}
    for principal in SIGNERS:
        path = key_file(data_dir, principal)
        if not path.exists():
            SigningKey.generate().save(path)
        try:
            out[principal] = SigningKey.load(path)
        except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as exc:
            why = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise StackError(f"cannot read the key file {path} ({why}); move it away and run "
                             "`runledger stack up` again to make a new one") from None
    return out


def _register(bootstrap: str, ring: KeyRing, principal: str, key: SigningKey,
              admin: SigningKey, credentials: str) -> KeyRing:
    event = keylog.registration(principal, principal, key.public,
                                now_ms=time.time_ns() // 1_000_000, by=PRODUCER,
                                reason="runledger stack up")
    try:
        return keylog.append(bootstrap, ring, event, admin, credentials=credentials).ring
    except keylog.KeyRefused as exc:
        raise StackError(str(exc)) from None
