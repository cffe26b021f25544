"""The gate evidence every controller reads: all of it, from every partition. A shell.

Evidence (``events.authority.EVIDENCE``) is keyed ``spec/<hex digest>``, so it
lands on whichever partition of ``runledger.requests`` its digest hashes to,
not the partition of the run that needs it, and several controllers each own
some partitions (``controller.ownership``). So every controller reads the
evidence of the whole topic, like a global table: :class:`EvidenceReader`
reads every partition from the beginning, passes over every record not keyed
``spec/`` undecoded, and folds what it may believe into a
:class:`~controller.gates.GateBook` (``controller.gates.observe``, pure).

It is judged as the controller's door judges operator requests: the record
must be one its sender may write there (``events.authority.admit_input``: not
stray, not oversize, well named), carry a signature of the operator key
registered to the principal it names (``controller.signatures``, when the
controller requires signatures; a badly signed one is refused either way) and
be keyed by its own digest (``controller.gates.misfiled``). A refused piece is
logged here and counts for nothing; the controller that owns its partition
also records it as a ``WriteRejected`` (it judges the same signature at its
door), so the refusal is in the log once.

Tested in tests/e2e/test_gates.py and tests/controller/test_gates.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from controller import gates
from events.authority import EVIDENCE, admit_input
from events.kafka.reader import LogReader
from events.record import Record
from events.topics import REQUESTS

log = logging.getLogger("runledger.controller")

_SPEC_PREFIX = b"spec/"
_BATCH = 5_000
# A request judged by its signature: None when it may be believed, else (reason, detail).
Judge = Callable[[Record], tuple[str, str] | None]


def judged(book: gates.GateBook, record: Record, judge: Judge | None) -> gates.GateBook:
    """The book after one record of ``requests`` keyed ``spec/``, if it may be believed."""
    event = record.event
    if event.event_type not in EVIDENCE:
        return book  # another request keyed spec/: not this reader's business
    where = f"{record.topic}[{record.partition}]@{record.offset}"
    door = admit_input(record, len(record.value))
    why = door.detail if door is not None else gates.misfiled(event)
    if why is None and judge is not None:
        refusal = judge(record)
        why = refusal[1] if refusal is not None else None
    if why is not None:
        log.warning("gate evidence %s at %s not believed: %s", event.event_type, where, why)
        return book
    return gates.observe(book, event)


class EvidenceReader:
    """Reads every partition of ``requests``; keeps the gate book of what it may believe."""

    def __init__(self, bootstrap: str, name: str, judge: Judge | None) -> None:
        self.judge = judge
        self.book = gates.EMPTY
        self._reader = LogReader(bootstrap, [REQUESTS], name=f"{name}-evidence", raw=True,
                                 select=lambda m: (m.key() or b"").startswith(_SPEC_PREFIX))

    def catch_up(self) -> gates.GateBook:
        """Everything written before now (a controller decides nothing before it has it)."""
        while not self._reader.caught_up:
            self._fold(self._reader.read_records(_BATCH, 0.5, batch=True))
        return self.book

    def read(self) -> gates.GateBook:
        """Without waiting: the book after what has arrived since the last read."""
        self._fold(self._reader.read_records(_BATCH, 0.0))
        return self.book

    def _fold(self, records: list[Record]) -> None:
        for record in records:
            self.book = judged(self.book, record, self.judge)

    def close(self) -> None:
        self._reader.close()
