"""Reading ``runledger.status``: the newest summary of one run, of some partitions, or all.

The topic is compacted, so a partition holds about one record per run plus
what the cleaner has not reached yet (the active segment, ``segment.ms``).
The reader assigns itself the partitions it needs (one, for one run: the
murmur2 partition of its id, ``events.partition``), reads them from the low to
the high watermark (``read_committed``: a summary whose transaction has not
committed is not there yet), compares keys before decoding anything, and
decodes only the newest value of each key it keeps. Nothing is committed and
no group is joined.

:func:`status_partitions` says whether the topic exists at all: a cluster set
up by an older runledger has none, and callers then fold ``runs`` instead.

Tested in tests/e2e/test_controller.py (through `runledger status`) and
tests/e2e/test_own_job.py (as the operator, who may join no group).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, TopicPartition

from events.errors import BrokerUnavailable, DecodeError, KafkaOperationError
from events.partition import partition_for
from events.reader import _consumer, _partitions, _watermarks
from events.status import RunStatusChanged, decode
from events.topics import STATUS

_BATCH = 10_000
# consume() waits out its whole timeout unless the batch fills: keep it short, and
# stop at each partition's end-of-partition event instead.
_POLL_S = 0.02
# A reader that hears nothing for this long while records are still due gives up.
_PATIENCE_S = 30.0
# The broker holds a fetch that reached the end for fetch.wait.max.ms (500 ms by
# default) hoping for more; a reader that stops at the end wants the answer now.
_SETTINGS = {"fetch.wait.max.ms": 5}


def status_partitions(bootstrap: str, name: str = "runledger-status") -> int | None:
    """How many partitions ``runledger.status`` has; None when the topic does not exist."""
    consumer = _consumer(bootstrap, name, None)
    try:
        return len(_partitions(consumer, [STATUS], 10.0))
    except KafkaOperationError as exc:
        if "does not exist" in str(exc):
            return None
        raise
    finally:
        consumer.close()


def read_status(
    bootstrap: str, *, run_id: str | None = None, partitions: Iterable[int] | None = None,
    on_undecodable: Callable[[str, DecodeError], None] | None = None,
    name: str = "runledger-status",
) -> dict[str, RunStatusChanged]:
    """The newest summary per run: of ``run_id`` only (reading its one partition), of
    the runs on ``partitions``, or of every run. Raises ``KafkaOperationError`` when
    the topic does not exist; an undecodable newest value goes to ``on_undecodable``."""
    consumer = _consumer(bootstrap, name, _SETTINGS)
    try:
        parts = _partitions(consumer, [STATUS], 10.0)
        if run_id is not None:
            parts = [(STATUS, partition_for(run_id, len(parts)))]
        elif partitions is not None:
            wanted = set(partitions)
            parts = [tp for tp in parts if tp[1] in wanted]
        marks = _watermarks(consumer, parts, 10.0)
        due = {p: high for (_, p), (low, high) in marks.items() if high > low}
        if not due:
            return {}
        consumer.assign([TopicPartition(STATUS, p, marks[(STATUS, p)][0]) for p in due])
        newest = _scan(consumer, due, None if run_id is None else run_id.encode())
    finally:
        consumer.close()
    out: dict[str, RunStatusChanged] = {}
    for key, value in newest.items():
        try:
            out[key] = decode(value)
        except DecodeError as exc:
            if on_undecodable is not None:
                on_undecodable(key, exc)
    return out


def _scan(consumer: Consumer, due: dict[int, int], key: bytes | None) -> dict[str, bytes]:
    """Key -> newest value bytes, reading each partition in ``due`` up to its end offset."""
    newest: dict[str, bytes] = {}
    waited = 0.0
    while due:
        messages = consumer.consume(_BATCH, _POLL_S)
        waited = 0.0 if messages else waited + _POLL_S
        if waited > _PATIENCE_S:
            raise BrokerUnavailable(f"{STATUS}: nothing read for {_PATIENCE_S:.0f} s with "
                                    f"partitions {sorted(due)} still to read")
        for msg in messages:
            err = msg.error()
            part = msg.partition() or 0
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    due.pop(part, None)
                    continue
                if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    # Nothing is joined or committed, but librdkafka looks up the group's
                    # coordinator anyway, which an operator (no group grant) is refused.
                    continue
                raise KafkaOperationError(f"read {STATUS}[{part}]: {err.str()}")
            k = msg.key()
            if k is not None and (key is None or k == key):
                value = msg.value()
                if value is None:
                    newest.pop(k.decode(), None)  # a tombstone: the run's summary was removed
                else:
                    newest[k.decode()] = value
            if (msg.offset() or 0) + 1 >= due.get(part, 0):
                due.pop(part, None)
    return newest
