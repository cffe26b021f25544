"""Report signatures verified ahead, on threads, before the report door judges them.

A reader of history (the projector, ``runledger replay``) verifies one Ed25519
signature per report, and those verifications were most of its time: 14 of a
projection's 17.3 s over 10⁵ signed records (docs/performance.md). Here a
batch's signatures go to ``events.signed.bulk.verify_many`` on a thread of their
own, which verifies them in one compiled call on ``threads`` threads without the
GIL, while the reader goes on with its own Python work (consuming, decoding,
mapping rows, DuckDB).

Each good signature lands in the memo of verified signatures
(``events.signed.seen``: a pure function of key, message and signature). The
door, judging the same records afterwards on the reader's thread, finds it there
and judges everything else (revocation at the record's time, principal, role,
placement) exactly as before: verifying ahead moves where libsodium's time is
spent and cannot change a verdict. A bad signature is not remembered, so the door
verifies it again and refuses it itself.

Which signature a report's judgment will check is read from its headers alone
(:func:`signed`): a worker's report carries its run key in a certificate
(``events.kafka.runkeys``); an agent's names a key of the ring. A guess that
misses (a key the ring lacks, a garbled certificate) costs nothing but the door's
own verification.

Tested in tests/events/kafka/test_ahead.py; measured in bench/projector.py.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from events.kafka.runkeys import carried
from events.kafka.runkeys import report_message as worker_report_message
from events.record import Quarantined, Record
from events.signed.bulk import verify_many
from events.signed.keyring import KeyRing
from events.signed.signing import PublicKey, report_message, signature_of
from events.topics import REPORTS

# Verifying threads: one per core (two verify 10⁵ signatures in 0.52 of one's time
# here), at most 4: beyond that the reader's own thread, not libsodium, is the bound.
DEFAULT_THREADS = max(1, min(4, os.cpu_count() or 1))

Signed = tuple[PublicKey, bytes, bytes]  # (key, message, signature) the door will verify


def signed(ring: KeyRing, record: Record) -> Signed | None:
    """The signature judging ``record`` will verify, when its headers say which; pure.

    Only a report carries one; a report signed twice (which the door refuses) or not
    at all gives None."""
    if record.topic != REPORTS:
        return None
    found = signature_of(record.headers)
    if isinstance(found, str):
        return None
    key_id, signature = found
    certified, read = carried(record.headers)
    if certified:
        public = read[1] if read is not None else None
        if public is None or public.key_id != key_id:
            return None  # refused without a verification
        return public, worker_report_message(record.value), signature
    entry = ring.keys.get(key_id)
    if entry is None:
        return None
    return entry.public, report_message(record.value), signature


class Ahead:
    """A thread that verifies batches ahead; :meth:`check` starts one batch."""

    def __init__(self, threads: int = DEFAULT_THREADS) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.threads = threads  # the compiled call's own threads, per batch
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="runledger-verify")

    def check(self, ring: KeyRing, items: Sequence[Record | Quarantined]) -> Checking:
        """Start verifying every signature judging ``items`` will check;
        :meth:`Checking.wait` returns once all are verified."""
        work = [s for item in items if isinstance(item, Record)
                and (s := signed(ring, item)) is not None]
        if not work:
            return Checking(None)
        return Checking(self._pool.submit(verify_many, work, self.threads))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class Checking:
    """One batch's verifications under way."""

    def __init__(self, future: Future[list[bool]] | None) -> None:
        self._future = future

    def wait(self) -> int:
        """Block until every verification is done; how many signatures were good."""
        return sum(self._future.result()) if self._future is not None else 0
