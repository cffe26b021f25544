"""Whether what the controller appends fits one record, judged before the transaction. Pure.

A record over ``events.limits.RECORD_MAX_BYTES`` (key, value and every header)
is refused by the producer, which aborts the whole transaction; the loop would
then read the same input again and refuse it again, for ever, and no other run
of the partition would be decided. The copy of a ``RunSubmitted`` request is
where that happens: it keeps the request's value bytes and adds the writer
header, the fact's signature, key id and chain link, and the operator's
signature renamed. So each input's records are measured as they will be
stored (:func:`too_large`) and an input whose records would not fit is refused
on its own, as a ``WriteRejected`` (``events.limits.TOO_LARGE``) naming the
size and the limit, like any other refused input.

Signatures are measured, not made: an Ed25519 signature is always
:data:`~events.signed.signing.SIGNATURE_BYTES` long and a chain link 64 hex characters.

Tested in tests/controller/test_fit.py and tests/e2e/test_limits.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from controller.chains import Outgoing
from events.kafka.clients import WRITER_HEADER, event_headers
from events.limits import copy_problem, record_bytes
from events.signed.signing import (
    KEY_HEADER,
    KEYS_HEAD_HEADER,
    PREV_HEADER,
    SIG_HEADER,
    SIGNATURE_BYTES,
    Headers,
    carried_request,
)
from events.topics import COMMANDS, RUNS

_PREV_CHARS = 64  # a chain link: a SHA-256 digest in hex

# The schema version an event type is written with when the record does not say
# (the writer's newest: ``Codec.registry.latest``).
VersionOf = Callable[[str], int]


def stored_bytes(record: Outgoing, writer: str, key_id: str | None, version_of: VersionOf) -> int:
    """The record's size as the producer counts it, once signed and sent by ``writer``."""
    version = record.version if record.version is not None else version_of(
        record.event.event_type)
    headers = [*event_headers(record.event, version), (WRITER_HEADER, writer.encode())]
    headers += _signature(record, key_id)
    return record_bytes(record.event.run_id, len(record.value), headers)


def _signature(record: Outgoing, key_id: str | None) -> Headers:
    """Headers of the right sizes for what ``controller.chains.sign`` will add."""
    if key_id is None or record.topic not in (RUNS, COMMANDS):
        return carried_request(record.request) if record.topic == RUNS else ()
    signed: Headers = ((SIG_HEADER, bytes(SIGNATURE_BYTES)), (KEY_HEADER, key_id.encode()))
    if record.topic == COMMANDS:
        return signed
    return (*signed, (PREV_HEADER, b"0" * _PREV_CHARS), (KEYS_HEAD_HEADER, b"0" * _PREV_CHARS),
            *carried_request(record.request))


def too_large(records: Iterable[Outgoing], writer: str, key_id: str | None,
              version_of: VersionOf) -> str | None:
    """Why one of ``records`` cannot be appended (the first too large), or None."""
    for record in records:
        why = copy_problem(stored_bytes(record, writer, key_id, version_of), record.topic)
        if why is not None:
            return f"{record.event.event_type}: {why}"
    return None
