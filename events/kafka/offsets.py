"""Where a group-less reader starts in each partition, and the gap it finds below the log's start.

A reader that resumes from stored offsets (the projector) may find one below
its partition's low watermark: retention or ``delete_records`` removed records
it never read. Kafka's clients would then jump to the beginning or the end as
``auto.offset.reset`` says, and either is a silent skip or a silent re-read. A
``LogReader`` sets it to ``error`` instead and says so: :class:`LogGap` names the
topic, the partition, the offset the reader needed, the low watermark and how
many offsets are gone, whether it finds the gap when it starts
(:func:`gap_at_start`) or while it reads (the client's offset-reset error,
when deletion overtakes a reader that lags). What to do next is the caller's
to say: only it knows how it rebuilds (``projectors.projector``).

Tested in tests/events/kafka/test_offsets.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from confluent_kafka import OFFSET_BEGINNING

from events.errors import EventsError

Partition = tuple[str, int]
BEGINNING: Literal["beginning"] = "beginning"
END: Literal["end"] = "end"
# Where reading starts: every partition's first record, its end (only what is
# appended from now on), or stored next offsets (partitions not named: the beginning).
Start = Literal["beginning", "end"] | Mapping[Partition, int]


class LogGap(EventsError):
    """Records a reader needed were deleted before it read them (names where and how many);
    or its offset is past the partition's end (``high``), which a log only shows after it
    was truncated or its topic recreated."""

    def __init__(self, topic: str, partition: int, offset: int, low: int,
                 high: int | None = None) -> None:
        self.topic, self.partition, self.offset, self.low = topic, partition, offset, low
        self.lost = max(low - offset, 0)
        if high is not None and offset > high:
            super().__init__(
                f"{topic}[{partition}]: the next offset to read, {offset}, is past the "
                f"partition's end {high}: the log was truncated or the topic recreated "
                "since it was read")
            return
        super().__init__(
            f"{topic}[{partition}]: the next offset to read, {offset}, is below the "
            f"partition's low watermark {low}: offsets {offset}..{low - 1} (up to "
            f"{self.lost} records) were deleted (retention or delete_records) before they "
            "were read")


def first_offset(start: Start, tp: Partition, low: int, high: int) -> int:
    """The offset a reader assigns ``tp`` at, given its watermarks now."""
    if start == BEGINNING:
        return int(OFFSET_BEGINNING)
    if start == END:
        # The end as of now, not "whatever the end is once assigned": a record
        # appended in between must not be missed.
        return high
    assert not isinstance(start, str)
    return start.get(tp, int(OFFSET_BEGINNING))


def gap_at_start(start: Start, marks: Mapping[Partition, tuple[int, int]]) -> LogGap | None:
    """The first partition whose stored offset lies below its low watermark (or past its
    end), or None. Only stored offsets can: the beginning and the end are always in range.
    """
    if isinstance(start, str):
        return None
    for tp, (low, high) in sorted(marks.items()):
        offset = start.get(tp)
        if offset is not None and (0 <= offset < low or offset > high):
            return LogGap(tp[0], tp[1], offset, low, high)
    return None
