"""What an agent checks of a command before it acts on it: who signed it, and the fact log.

The broker already refuses a command from any principal but the controller's
(ACLs). The agent does not rely on that alone, because a command makes it run
code: before :mod:`agent.decide` sees a command, it must pass, in order,

1. **the signature**: the command's exact value bytes carry a signature
   (``events.signed.signing.command_message``) of a key the keys log registers to a
   principal of role ``controller`` and has not revoked
   (``events.signed.keyring.check_headers``). A badly signed command never passes;
   an unsigned one only when the agent was started with ``--trust-unsigned``
   (for a controller started ``--unsigned``, and for driving an agent without
   a controller), and then on the broker's word alone: rule 2 is skipped, as
   the broker's ACLs already say it came from the controller's principal;
2. **the fact log**, for a signed start: the run's facts (``runledger.runs``) show the
   command's generation as the run's current one and the run not ended
   (``no_such_run``, ``generation_not_current``, ``run_ended``), so a command
   replayed from an old generation, or one for a run that never existed, starts
   nothing, even if its signature is good.

The judges (:func:`judge_signature`, :func:`judge_facts`) are pure;
:class:`CommandVerifier` is the shell that follows the keys log and reads a
run's facts. A refused start is reported as the exit of each member on this
node with exit code 125 (the launcher's failure, never the worker's) and
logged with the reason; a refused stop is logged and does nothing.

Tested in tests/agent/test_verify.py.
"""

from __future__ import annotations

import logging

from events.base import Event
from events.fold import fold
from events.kafka.keys import RingReader
from events.kafka.reader import LogReader
from events.model import GroupStartCommanded
from events.record import Record
from events.signed.keyring import (
    REVOKED_KEY,
    UNKNOWN_KEY,
    UNSIGNED,
    KeyRing,
    check_headers,
)
from events.signed.signing import command_message
from events.state import RunState
from events.topics import RUNS

log = logging.getLogger("runledger.agent")

CONTROLLER_ROLE = "controller"
NO_SUCH_RUN = "no_such_run"
GENERATION_NOT_CURRENT = "generation_not_current"
RUN_ENDED = "run_ended"
FACTS_READ_S = 10.0  # how long one start waits for the run's facts before refusing


def judge_signature(ring: KeyRing, record: Record) -> str | None:
    """None when the command's signature is a live controller key's, else why not."""
    return check_headers(ring, record.headers, command_message(record.value),
                         principal=None, role=CONTROLLER_ROLE)


def judge_facts(state: RunState | None, command: Event) -> str | None:
    """None when the fact log shows the command's generation as the live run's current one."""
    if not isinstance(command, GroupStartCommanded):
        return None
    if state is None:
        return NO_SUCH_RUN
    if state.status.terminal:
        return RUN_ENDED
    if state.generation != command.generation:
        return GENERATION_NOT_CURRENT
    return None


class CommandVerifier:
    """The key ring, read from the keys log; a run's facts, read when a start asks for them."""

    def __init__(self, bootstrap: str, *, trust_unsigned: bool, name: str) -> None:
        self.bootstrap = bootstrap
        self.trust_unsigned = trust_unsigned
        self.name = name
        self._rings = RingReader(bootstrap, name=name)  # read on, not again
        self.ring = self._read_ring()

    def _read_ring(self) -> KeyRing:
        return self._rings.read()

    def judge(self, record: Record) -> str | None:
        """None when the agent may act on this command, else the reason it may not."""
        problem = judge_signature(self.ring, record)
        if problem in (UNKNOWN_KEY, REVOKED_KEY):
            # A key registered or revoked since the ring was read: read it again.
            self.ring = self._read_ring()
            problem = judge_signature(self.ring, record)
        if problem == UNSIGNED and self.trust_unsigned:
            return None
        if problem is None and isinstance(record.event, GroupStartCommanded):
            problem = judge_facts(self._run_state(record.event.run_id), record.event)
        return problem

    def _run_state(self, run_id: str) -> RunState | None:
        # Read committed: the controller writes the generation's facts and its
        # start commands in one transaction, so a command seen has its facts.
        reader = LogReader(self.bootstrap, [RUNS], key=run_id, key_partition=True,
                           bounded=True, strict=True,
                           retry_s=FACTS_READ_S, name=f"{self.name}-facts")
        try:
            events = [r.event for r in reader.records()]
        finally:
            reader.close()
        return fold(events).get(run_id)
