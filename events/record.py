"""A record as a reader hands it out: the decoded event with its place in the log, or
where an undecodable one sat and why. Pure: the Kafka edge (``events.kafka``) makes
them; the kernel (the controller's door in ``events.authority``) judges them
without importing a Kafka client.

Tested in tests/events/kafka/test_clients.py and tests/events/kafka/test_reader.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events.model import Event


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded event with its position in the log."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    event: Event
    writer_version: int
    writer: str = ""  # the WRITER_HEADER of a controller record; "" on any other
    # On the quarantine topic: where the record came from and why it was kept
    # there (the ``QUARANTINE_HEADERS`` of ``Quarantine.keep``); empty elsewhere.
    origin: tuple[tuple[str, str], ...] = ()
    # The record as stored, for a reader that judges or carries signatures
    # (``raw=True``): the exact value bytes, and every header in log order
    # (a null header as b""). Empty for every other reader.
    value: bytes = field(default=b"", repr=False, compare=False)
    headers: tuple[tuple[str, bytes], ...] = field(default=(), repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A record that could not be decoded: where it was, and why."""

    topic: str
    partition: int
    offset: int
    reason: str
    detail: str
    key: str | None = None  # the record key, which is the run id when the writer was ours
    value: bytes | None = field(default=None, repr=False)  # the raw bytes, as they were

    def __str__(self) -> str:
        return (
            f"quarantined {self.topic}[{self.partition}]@{self.offset}: "
            f"{self.reason}: {self.detail}"
        )
