"""Reading ``runledger.status``: the newest summary of one run, of some partitions, or all.

The topic is compacted, so a partition holds about one record per run plus
what the cleaner has not reached yet (the active segment, ``segment.ms``).
A bounded, undecoded ``events.kafka.reader.LogReader`` assigns itself the partitions
needed (one, for one run: the murmur2 partition of its id, ``events.partition``),
reads them from the start to the end they had (``read_committed``: a summary whose
transaction has not committed is not there yet), compares keys before decoding
anything, and decodes only the newest value of each key it keeps. Nothing is
committed and no group is joined.

:func:`status_partitions` says whether the topic exists at all: a cluster set
up by an older runledger has none, and callers then fold ``runs`` instead.

Tested in tests/events/kafka/test_statuslog.py, tests/e2e/test_controller.py (through
`runledger status`) and tests/e2e/test_own_job.py (as the operator, who may join no
group).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from events.errors import DecodeError, KafkaOperationError
from events.kafka.reader import LogReader, topic_partitions
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
    try:
        return len(topic_partitions(bootstrap, [STATUS], name=name))
    except KafkaOperationError as exc:
        if "does not exist" in str(exc):
            return None
        raise


def read_status(
    bootstrap: str, *, run_id: str | None = None, partitions: Iterable[int] | None = None,
    on_undecodable: Callable[[str, DecodeError], None] | None = None,
    name: str = "runledger-status",
) -> dict[str, RunStatusChanged]:
    """The newest summary per run: of ``run_id`` only (reading its one partition), of
    the runs on ``partitions``, or of every run. Raises ``KafkaOperationError`` when
    the topic does not exist; an undecodable newest value goes to ``on_undecodable``."""
    # Not patient with a broker that fails (callers retry), but never stuck on one
    # that goes silent mid-read.
    with LogReader(bootstrap, [STATUS], name=name, config=_SETTINGS, bounded=True,
                   strict=True, patience_s=_PATIENCE_S, key=run_id,
                   key_partition=run_id is not None,
                   partitions=partitions if run_id is None else None) as reader:
        newest = _scan(reader)
    out: dict[str, RunStatusChanged] = {}
    for key, value in newest.items():
        try:
            out[key] = decode(value)
        except DecodeError as exc:
            if on_undecodable is not None:
                on_undecodable(key, exc)
    return out


def _scan(reader: LogReader) -> dict[str, bytes]:
    """Key -> newest value bytes, up to each partition's end when reading started (the
    reader compared the keys already, when it reads one run's)."""
    newest: dict[bytes, bytes] = {}
    while not reader.caught_up:
        for msg in reader.read_messages(_BATCH, _POLL_S):
            k = msg.key()
            if k is None:
                continue
            value = msg.value()
            if value is None:
                newest.pop(k, None)  # a tombstone: the run's summary was removed
            else:
                newest[k] = value
    return {k.decode(): value for k, value in newest.items()}
