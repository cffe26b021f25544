"""Operator requests judged by their signature before the controller acts on them.

A ``RunSubmitted``, ``CancelRequested``, ``ResumeRequested`` or
``NodeOperationRequested``, and a
piece of gate evidence (``PreflightCompleted``, ``PilotCompleted``,
``DrillCompleted``: it opens admission, ``controller.evidence``) names its
``principal``; that name is believed only when the request's exact value bytes carry a signature
(``events.signed.signing.request_message``) of a live key that the keys log registers
to that very principal with the operator role. So the cancel authority, and the
principal a run is recorded under, are decided on a verified identity, never on
a typed ``--principal``. A request that fails is refused with the reason
(``events.signed.keyring``: ``unsigned``, ``unknown_key``, ``bad_signature``,
``revoked_key``, ``wrong_principal``, ``wrong_role``) and recorded as a
``WriteRejected``, like any refused input; it changes nothing.

Unsigned requests are refused (``unsigned``) unless the controller was
started with ``--trust-unsigned``: then they are taken on the broker's word,
as before signatures existed, and the broker vouches only for the role, so
any operator could name any principal. A *badly* signed one is refused either
way.

:func:`judge_request` is pure; :class:`RequestJudge` keeps the ring, read
again from the keys log when a request names a key it does not know, and on
:meth:`RequestJudge.refresh` (the service calls it when requests arrive and
every :data:`REFRESH_S`), so the keys head its facts name
(``controller.chains``) follows the keys log: a revocation is in the ring
before the next request is judged.

Tested in tests/controller/test_signatures.py.
"""

from __future__ import annotations

import logging

from events.errors import KafkaOperationError
from events.kafka.keys import RingReader
from events.model import (
    CancelRequested,
    DrillCompleted,
    NodeOperationRequested,
    PilotCompleted,
    PreflightCompleted,
    ResumeRequested,
    RunSubmitted,
)
from events.record import Record
from events.signed.keyring import EMPTY, REVOKED_KEY, UNKNOWN_KEY, UNSIGNED, KeyRing, check_headers
from events.signed.signing import request_message
from events.topics import KEYS

log = logging.getLogger("runledger.controller")

OPERATOR_ROLE = "operator"
# How often, at least, the ring is read again while no request arrives: the keys
# head the facts name is then at most this old.
REFRESH_S = 30.0
# The gate evidence too: it opens admission, so it is believed only from a proven operator.
SIGNED_REQUESTS = (RunSubmitted, CancelRequested, ResumeRequested, NodeOperationRequested,
                   PreflightCompleted, PilotCompleted, DrillCompleted)


def judge_request(ring: KeyRing, record: Record, *, require: bool) -> tuple[str, str] | None:
    """None when the request may be acted on, else (reason, detail)."""
    event = record.event
    if not isinstance(event, SIGNED_REQUESTS):
        return None
    problem = check_headers(ring, record.headers, request_message(record.value),
                            principal=event.principal, role=OPERATOR_ROLE)
    if problem is None or (problem == UNSIGNED and not require):
        return None
    where = f"{record.topic}[{record.partition}]@{record.offset}"
    return problem, (f"{event.event_type} for principal {event.principal!r} at {where}: "
                     f"{_meaning(problem)}")


def _meaning(problem: str) -> str:
    return {
        UNSIGNED: "not signed, and this controller requires signed requests: send it "
                  "with runledger submit/cancel/resume/node, which sign with --key, "
                  "RUNLEDGER_KEY or the local stack's operator key",
        UNKNOWN_KEY: "signed by a key the keys log does not register",
        REVOKED_KEY: "signed by a revoked key",
    }.get(problem, "the signature does not prove this principal asked")


class RequestJudge:
    """The ring of registered keys, and the one question asked of each request."""

    def __init__(self, bootstrap: str, *, require: bool, name: str) -> None:
        self.bootstrap = bootstrap
        self.require = require
        self.name = name
        self._rings = RingReader(bootstrap, name=name)  # read on, not again
        self.ring = self._read()

    def _read(self) -> KeyRing:
        try:
            return self._rings.read()
        except KafkaOperationError:
            if self.require:  # no keys log: nothing could ever be verified
                raise
            # A cluster made before runledger.keys existed: nothing is registered,
            # so a signed request is refused (unknown_key) and an unsigned one taken.
            log.warning("no %s topic: no request signature can be verified", KEYS)
            return EMPTY

    def refresh(self) -> None:
        """Read the ring again; keep the one held when the keys log cannot be read now."""
        try:
            self.ring = self._rings.read()
        except KafkaOperationError as exc:
            log.warning("could not read %s again (%s); judging by the ring read before",
                        KEYS, exc)

    def judge(self, record: Record) -> tuple[str, str] | None:
        refusal = judge_request(self.ring, record, require=self.require)
        if refusal is not None and refusal[0] in (UNKNOWN_KEY, REVOKED_KEY):
            # A key registered or revoked since the ring was read: read it again.
            self.ring = self._read()
            refusal = judge_request(self.ring, record, require=self.require)
        return refusal
