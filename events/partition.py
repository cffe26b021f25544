"""Where a key lands: Kafka's murmur2 partitioner, computed without a broker. Pure.

Every producer of ours sets ``partitioner: murmur2_random`` (``PARTITIONER``),
librdkafka's name for the partitioner of the Java client: a keyed record goes
to ``(murmur2(key) & 0x7fffffff) % partitions``. With ``requests``, ``reports``
and ``runs`` co-partitioned (the same count), a run's requests, reports and
facts therefore sit on the same partition number of each topic, and a
controller can tell from a run id alone whether the run is one of its
partitions' (docs/architecture.md §7, "One owner per run").

Tested in tests/events/test_partition.py.
"""

from __future__ import annotations

from collections.abc import Sequence

PARTITIONER = "murmur2_random"

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``, as the signed 32-bit int the Java client returns."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    body = length - length % 4
    for i in range(0, body, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[body + 2] << 16
    if tail >= 2:
        h ^= data[body + 1] << 8
    if tail >= 1:
        h ^= data[body]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """The partition a record keyed ``key`` lands on among ``partitions``."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def key_partitions(parts: Sequence[tuple[str, int]], key: str) -> list[tuple[str, int]]:
    """Of ``parts`` (topic, partition), the one per topic that records keyed ``key`` land on."""
    counts: dict[str, int] = {}
    for topic, _ in parts:
        counts[topic] = counts.get(topic, 0) + 1
    return [(t, p) for t, p in parts if p == partition_for(key, counts[t])]
