"""The memo of verified signatures: a yes from libsodium, remembered by its bytes.

Verification is most of a controller's CPU per report (about 60 of its 370 µs,
measured in bench/scale.py's fleet), and the controller reads every agent's
records twice: as its inputs and in its node tail (``controller.follow``). A
check is a pure function of key, message and signature, so its answer may be
remembered; only a yes is, and what it does not decide (revocation, principal,
role: ``events.signed.keyring.check``) is judged every time. BLAKE2b with 16 bytes
keeps a forged pair from colliding with a remembered one. The node tail reads at
the head of the topic and the inputs as far behind as the controller lags, so
:data:`SEEN_MAX` entries (about 30 MB) cover 100 s of the largest fleet's
records (2,500/s): a lagging controller that re-verified everything would only
fall further behind.

Two writers fill it: ``signing.PublicKey.verify`` (one signature at a time) and
``bulk.verify_many`` (a reader's batch, verified ahead of its judgment). Both
verify with the same libsodium function before they add a digest.

Tested in tests/events/signed/test_signing.py and tests/events/kafka/test_ahead.py.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict


class Seen:
    """The signatures this process verified most recently, as digests of key, signature
    and message, so that a record read twice is verified once."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()  # readers verify on several threads
        # Insertion order, the oldest first. Not a dict: deleting a dict's first entry
        # over and over leaves a run of dead slots that every next(iter()) walks.
        self._order: OrderedDict[bytes, None] = OrderedDict()

    @staticmethod
    def digest(raw: bytes, signature: bytes, message: bytes) -> bytes:
        h = hashlib.blake2b(raw, digest_size=16)
        h.update(signature)
        h.update(message)
        return h.digest()

    def __contains__(self, digest: bytes) -> bool:
        return digest in self._order

    def add(self, digest: bytes) -> None:
        with self._lock:
            self._order[digest] = None
            if len(self._order) > self.size:
                self._order.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._order.clear()


SEEN_MAX = 1 << 18
SEEN = Seen(SEEN_MAX)


def forget_verified() -> None:
    """Empty the memo: for a benchmark that times verification pass after pass over
    the same records (a reader never needs it)."""
    SEEN.clear()
