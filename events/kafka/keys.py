"""The key ring as the log says it is now: ``runledger.keys`` read to its end and folded.

The shell around ``events.signed.keyring`` for the processes that judge signatures
live (the controller judges requests, agents judge commands). A reader reads it
again, to its end, whenever a signature names a key it does not know or thinks
revoked (and the controller every 30 s); a :class:`RingReader` reads on from
where it stopped, since a fleet's keys log holds a record per node. A refused key
record is logged and leaves the ring as it was; so is a break in the keys log's
chain (``events.signed.keyring.broken_link``), though the record, validly signed by
an admin, is taken: ``runledger audit verify`` is where a broken keys log fails.

Tested in tests/events/kafka/test_keys.py, tests/agent/test_signed_commands.py,
tests/controller/test_signatures.py and tests/e2e/test_node_identity.py.
"""

from __future__ import annotations

import logging

from events.errors import KafkaOperationError
from events.kafka.offsets import LogGap, Partition
from events.kafka.reader import BEGINNING, LogReader
from events.record import Record
from events.signed.keyring import EMPTY, KeyRing, Refusal, apply, broken_link
from events.signed.signing import prev_of, signature_of
from events.topics import KEYS

log = logging.getLogger("runledger.keys")
READ_S = 10.0  # how long a read waits for a broker that is failing over


def read_ring(bootstrap: str, *, name: str, retry_s: float = READ_S) -> KeyRing:
    """The ring folded from the whole keys log, up to its end when called."""
    return RingReader(bootstrap, name=name, retry_s=retry_s).read()


def read_ring_or_empty(bootstrap: str, *, name: str, retry_s: float = READ_S) -> KeyRing:
    """:func:`read_ring`; empty on a cluster made before ``runledger.keys`` existed (no
    anchor: agents' unsigned reports are then taken on the broker's word,
    ``events.kafka.reportdoor``)."""
    return RingReader(bootstrap, name=name, retry_s=retry_s).read_or_empty()


class RingReader:
    """The ring, read forward: each :meth:`read` folds only the key records appended
    since the last one, up to the log's end when called, into the ring it kept.

    The ring is a fold, so reading on from where the last read stopped gives the ring
    a read from the beginning would. A reader that judges signatures re-reads the
    keys log every 30 s and whenever a key is unknown; a fleet's keys log holds a
    record per node, and reading 12,500 of them again was a fifth of a controller's
    CPU in the window (bench/scale.py). A log that no longer holds where it stopped
    (deleted below it, or recreated shorter) is read again from its beginning.
    """

    def __init__(self, bootstrap: str, *, name: str, retry_s: float = READ_S) -> None:
        self.bootstrap, self.name, self.retry_s = bootstrap, name, retry_s
        self.ring = EMPTY
        self._next: dict[Partition, int] = {}  # the offset after the last record folded

    def read(self) -> KeyRing:
        """The ring up to the keys log's end now; ``KafkaOperationError`` if it cannot
        be read (the ring kept is unchanged)."""
        try:
            return self._read(self.ring, dict(self._next))
        except LogGap as gap:
            log.warning("%s; reading %s again from its beginning", gap, KEYS)
            return self._read(EMPTY, {})

    def read_or_empty(self) -> KeyRing:
        """:meth:`read`, or the empty ring where there is no keys log (see
        :func:`read_ring_or_empty`)."""
        try:
            return self.read()
        except KafkaOperationError:
            return EMPTY

    def _read(self, ring: KeyRing, start: dict[Partition, int]) -> KeyRing:
        reader = LogReader(self.bootstrap, [KEYS], start=start or BEGINNING, raw=True,
                           bounded=True, strict=True, retry_s=self.retry_s,
                           name=f"{self.name}-keys")
        try:
            for record in reader.records():
                ring = _fold(ring, record)
                start[(record.topic, record.partition)] = record.offset + 1
        finally:
            reader.close()
        self.ring, self._next = ring, start
        return ring


def _fold(ring: KeyRing, record: Record) -> KeyRing:
    """The ring after one key record; a refused one (or a break in the chain) is logged."""
    signed = signature_of(record.headers)
    key_id, signature = (None, None) if isinstance(signed, str) else signed
    prev = prev_of(record.headers)
    broken = broken_link(ring, prev)
    if broken is not None:
        log.error("key record %s[%d]@%d: broken chain: %s", record.topic,
                  record.partition, record.offset, broken)
    after = apply(ring, record.event, key_id, signature, record.value, prev)
    if isinstance(after, Refusal):
        log.error("key record %s[%d]@%d refused: %s", record.topic, record.partition,
                  record.offset, after)
        return ring
    return after
