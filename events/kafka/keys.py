"""The key ring as the log says it is now: ``runledger.keys`` read to its end and folded.

The shell around ``events.signed.keyring`` for the processes that judge signatures
live (the controller judges requests, agents judge commands). The keys topic is
small (a record per registration or revocation), so a reader re-reads it whole
whenever a signature names a key it does not know or thinks revoked, rather
than following it. A refused key record is logged and leaves the ring as it was;
so is a break in the keys log's chain (``events.signed.keyring.broken_link``), though
the record, validly signed by an admin, is taken: ``runledger audit verify``
is where a broken keys log fails.

Tested in tests/agent/test_signed_commands.py, tests/controller/test_signatures.py and
tests/e2e/test_node_identity.py.
"""

from __future__ import annotations

import logging

from events.errors import KafkaOperationError
from events.kafka.reader import BEGINNING, LogReader
from events.signed.keyring import EMPTY, KeyRing, Refusal, apply, broken_link
from events.signed.signing import prev_of, signature_of
from events.topics import KEYS

log = logging.getLogger("runledger.keys")
READ_S = 10.0  # how long a read waits for a broker that is failing over


def read_ring(bootstrap: str, *, name: str, retry_s: float = READ_S) -> KeyRing:
    """The ring folded from the whole keys log, up to its end when called."""
    reader = LogReader(bootstrap, [KEYS], start=BEGINNING, raw=True, bounded=True,
                       strict=True, retry_s=retry_s, name=f"{name}-keys")
    ring = EMPTY
    try:
        for record in reader.records():
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
            else:
                ring = after
    finally:
        reader.close()
    return ring


def read_ring_or_empty(bootstrap: str, *, name: str, retry_s: float = READ_S) -> KeyRing:
    """:func:`read_ring`; empty on a cluster made before ``runledger.keys`` existed (no
    anchor: agents' unsigned reports are then taken on the broker's word,
    ``events.kafka.reportdoor``)."""
    try:
        return read_ring(bootstrap, name=name, retry_s=retry_s)
    except KafkaOperationError:
        return EMPTY
