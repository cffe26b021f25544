"""The log as stored: every record of some topics, raw value bytes and headers, up to an end.

A signature covers the exact bytes in the log and travels in record headers,
so whoever checks one (``runledger audit``, the key ring of ``runledger key``
and of ``stack up``) needs the records as Kafka holds them, not decoded events:
:func:`read_raw` hands them out as ``events.signed.audit.LoggedRecord``\\ s, read by an
undecoded ``events.kafka.reader.LogReader`` (``read_messages``).

The read is **bounded**: it takes each partition's end when it starts and
stops there, so it ends however much keeps arriving. It reads
``read_committed`` (an aborted or open transaction's records are never
seen), joins no consumer group and commits nothing. ``credentials`` names the
credentials file (``""``: none, plaintext; ``None``: ``$RUNLEDGER_CREDENTIALS``).

Tested in tests/runledger/test_rawlog.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Message

from events.kafka.clients import header_items
from events.kafka.reader import LogReader
from events.signed.audit import LoggedRecord


def read_raw(bootstrap: str, topics: Sequence[str], *, credentials: str | None = None,
             patience_s: float = 30.0) -> dict[str, list[LoggedRecord]]:
    """Every record of each topic below the end it had when reading started.

    Per topic, in (partition, offset) order. ``patience_s``: how long a broker that
    is down or failing over is waited for, and how long records may be due with
    none coming, before ``BrokerUnavailable`` (10 s at least: a fetch takes its
    time even from a broker that is there). A refused read is ``NotAuthorized``.
    """
    patience = max(patience_s, 10.0)
    out: dict[str, list[LoggedRecord]] = {topic: [] for topic in topics}
    with LogReader(bootstrap, topics, bounded=True, strict=True, retry_s=patience,
                   credentials=credentials, name="runledger-rawlog") as reader:
        while not reader.caught_up:
            for msg in reader.read_messages(500, 0.5):
                record = _logged(msg)
                out[record.topic].append(record)
    for records in out.values():
        records.sort(key=lambda r: (r.partition, r.offset))
    return out


def _logged(msg: Message) -> LoggedRecord:
    key = msg.key()
    return LoggedRecord(msg.topic() or "", msg.partition() or 0, msg.offset() or 0,
                        msg.value() or b"", tuple(header_items(msg)),
                        key.encode() if isinstance(key, str) else key)
