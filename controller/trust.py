"""Whom the controller believes: signed operator requests, agents' signed reports.

The controller's shell holds one :class:`Trust`. It makes the request judge
(``controller.signatures``) once the model is rebuilt, reads the key ring again
when requests arrive and every ``REFRESH_S`` (so a revocation is judged by, and
named in the facts' keys head, soon), and builds the one door of agents' reports
(``events.kafka.reportdoor``) that the input consumer and the follower share: an agent's
report believed only under its node's key, a worker's only under its run's key
certified by a node the model places the run on (``events.kafka.runkeys``). It says
at start how the controller signs and whether it believes unsigned requests:
``--trust-unsigned`` is logged as a warning, because the broker vouches only for
a role, never for the name a request types.

Tested in tests/e2e/test_controller.py, tests/e2e/test_signed.py and
tests/e2e/test_node_identity.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from controller.chains import Chains
from controller.model import Model
from controller.signatures import REFRESH_S, RequestJudge
from events.kafka.keys import RingReader
from events.kafka.reportdoor import ReportDoor
from events.model import WorkerExited
from events.record import Record
from events.topics import REQUESTS

log = logging.getLogger("controller")


class Trust:
    def __init__(self, bootstrap: str, name: str, *, require_signatures: bool,
                 model: Callable[[], Model | None]) -> None:
        self.bootstrap = bootstrap
        self.name = name  # the controller's transactional id: names its key readers
        self.require_signatures = require_signatures
        self._model = model
        self.requests: RequestJudge | None = None
        self._read_at = time.monotonic()  # of the key ring (the RequestJudge made it)

    def start(self, chains: Chains) -> RequestJudge:
        """Say how the controller signs and what it believes; the request judge."""
        if chains.key is not None:
            log.info("signing facts and commands with key %s", chains.key.key_id)
        else:
            log.warning("no signing key: facts and commands are appended unsigned")
        if not self.require_signatures:
            # The level is not in the log format: the text says it, loudly.
            log.warning("WARNING --trust-unsigned: UNSIGNED submit, cancel, resume, node and gate "
                        "requests are taken on the broker's word, which vouches only for the "
                        "role: any operator may act as any principal it names; restart "
                        "without --trust-unsigned to require signed requests")
        self.requests = RequestJudge(self.bootstrap, require=self.require_signatures,
                                     name=self.name)
        self._read_at = time.monotonic()
        return self.requests

    def refresh(self, records: list[Record]) -> None:
        """Read the key ring again when requests arrive, and every ``REFRESH_S``."""
        if self.requests is None:
            return
        if any(r.topic == REQUESTS for r in records) \
                or time.monotonic() - self._read_at >= REFRESH_S:
            self.requests.refresh()
            self._read_at = time.monotonic()

    def report_door(self) -> ReportDoor:
        """The door of agents' reports: one believed only under its node's key, by the
        input door and by the follower's node reader alike."""
        rings = RingReader(self.bootstrap, name=f"{self.name}-reports")  # read on, not again
        return ReportDoor(rings.read_or_empty, placed=self._placed, hosts=self._hosts)

    def _placed(self, exited: WorkerExited) -> str | None:
        """The node the model places the exit's member on, when the exit is of the run's
        current generation (an older one's placement is not kept)."""
        model = self._model()
        run = model.runs.get(exited.run_id) if model is not None else None
        if run is None or run.generation != exited.header.generation:
            return None
        return run.node_of(exited.logical_id)

    def _hosts(self, run_id: str, generation: int) -> frozenset[str] | None:
        """The nodes the model places the run's members on, for its current generation (a
        worker's run key must be certified by one of them); None for another generation or
        a run the model does not know (the run's own checks fence those)."""
        model = self._model()
        run = model.runs.get(run_id) if model is not None else None
        if run is None or run.generation != generation:
            return None
        return frozenset(m.node for m in run.members)
