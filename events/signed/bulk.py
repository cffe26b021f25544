"""Signatures verified in bulk: one compiled call per batch, on threads, without the GIL.

A reader of history (the projector, ``runledger replay``) verifies one Ed25519
signature per report, and those were most of its time. Verifying them one at a
time on Python threads barely helps (bench/projector.py: 10.0 s against 9.0 s over
10⁵ signed records): after each libsodium call a thread must take the GIL back,
and a busy reader thread keeps it for up to the interpreter's switch interval.
``runledger_native.verify_many`` takes the whole batch, releases the GIL once and
verifies on its own threads, calling the very libsodium function PyNaCl's
``VerifyKey.verify`` calls (``crypto_sign_open`` on the signature, then the
message, found in PyNaCl's own extension module), so the bulk answer and
``PublicKey.verify``'s cannot differ on any bytes. Each yes goes into the memo
of verified signatures (``events.signed.seen``), where the door, judging the
records afterwards, finds it.

Without the compiled module (an install that did not build ``native/``) the batch
is verified one signature at a time by ``PublicKey.verify``: the same answers.

Tested in tests/events/signed/test_bulk.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import nacl.bindings  # noqa: F401 - imported for its sodium_init, which must run first
from nacl._sodium import ffi, lib

from events.compiled import native
from events.signed.seen import SEEN
from events.signed.signing import PublicKey

# The address of the libsodium function PublicKey.verify ends in, as PyNaCl's
# extension module links it.
_VERIFY = int(ffi.cast("uintptr_t", ffi.addressof(lib, "crypto_sign_open")))

Work = Sequence[tuple[PublicKey, bytes, bytes]]  # (key, message, signature)


def verify_many(work: Work, threads: int) -> list[bool]:
    """Whether each signature is its key's over its message; every yes is remembered."""
    if native is None or not work:
        return [public.verify(message, signature) for public, message, signature in work]
    oks: list[bool] = native.verify_many(
        _VERIFY, [w[0].raw for w in work], [w[1] for w in work], [w[2] for w in work],
        threads)
    digest = SEEN.digest
    for (public, message, signature), ok in zip(work, oks, strict=True):
        if ok:
            SEEN.add(digest(public.raw, signature, message))
    return oks
