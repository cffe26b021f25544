"""Admission gates: a spec's ``gates`` section, the gate book, and the admission rule. Pure.

A spec may require evidence that it was rehearsed before it gets its full
allocation (``gates: {require: [preflight, pilot, drill]}``). The evidence is
what operator clients record on ``runledger.requests``, keyed ``spec/<hex>``
(``events.authority.EVIDENCE``): ``PreflightCompleted``, ``PilotCompleted``
and ``DrillCompleted``. Every controller reads all of it (``controller.evidence``,
the shell) into one :class:`GateBook`, a small immutable value that
:func:`observe` updates, and the admission rule (``controller.run_decide``,
rule 2) asks :func:`blocked` whether a queued run may be admitted.

When a gate has passed, for the spec's digest exactly:

- ``preflight``: the newest ``PreflightCompleted`` has verdict ``pass``;
- ``pilot``: the newest ``PilotCompleted`` has verdict ``pass``;
- ``drill``: for every fault drilled, its newest ``DrillCompleted`` is ``pass``
  or ``skip`` (a fault the spec's topology cannot show), and at least one is
  ``pass``: a drill that skipped everything rehearsed nothing.

"Newest" is the log's order: every piece of evidence about one digest has the
same key, so it sits in one partition, in the order it was written. A failure
recorded after a pass closes the gate again (for runs not yet admitted; an
admitted run is never taken back by a gate).

Scope: only ``digest`` (the evidence must be about this exact spec). A
``code`` scope (any spec with the same code version and topology) would need
the controller to know the code version and topology of the spec each piece of
evidence names, and the evidence carries only its digest: a preflighted spec
need never have been submitted, so the log holds no spec for it. It is refused
at submit until the evidence events carry those fields.

Tested in tests/controller/test_gates.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import AfterValidator, Field, Strict, field_validator

from controller.spec.parts import Part
from events.base import spec_key
from events.model import DrillCompleted, Event, PilotCompleted, PreflightCompleted

PREFLIGHT = "preflight"
PILOT = "pilot"
DRILL = "drill"
GATE_NAMES = (PREFLIGHT, PILOT, DRILL)
SCOPES = ("digest",)
# What the operator runs to earn each gate, named in a queued run's reason.
_COMMAND = {PREFLIGHT: "runledger preflight SPEC", PILOT: "runledger pilot SPEC",
            DRILL: "runledger drill SPEC"}
_EVIDENCE_TYPE = {PREFLIGHT: "PreflightCompleted", PILOT: "PilotCompleted",
                  DRILL: "DrillCompleted"}


def _gate_name(v: str) -> str:
    if v not in GATE_NAMES:
        raise ValueError(f"unknown gate {v!r}; known: {', '.join(GATE_NAMES)}")
    return v


def _scope(v: str) -> str:
    if v == "code":
        raise ValueError(
            "scope 'code' is not supported: the evidence events carry only the spec digest, "
            "so the controller cannot tell which code version and topology they were for; "
            "use 'digest'")
    if v not in SCOPES:
        raise ValueError(f"unknown scope {v!r}; known: {', '.join(SCOPES)}")
    return v


GateName = Annotated[str, Strict(), AfterValidator(_gate_name)]


class Gates(Part):
    """The spec's ``gates`` section: which evidence must have passed before admission.

    ``require`` is a set (kept in :data:`GATE_NAMES` order, repeats dropped),
    so how it is written does not change the spec's digest.
    """

    require: Annotated[list[GateName], Field(min_length=1, max_length=len(GATE_NAMES))]
    scope: Annotated[str, Strict(), AfterValidator(_scope)] = "digest"

    @field_validator("require")
    @classmethod
    def _require(cls, v: list[str]) -> list[str]:
        return [g for g in GATE_NAMES if g in v]


# -- the gate book ----------------------------------------------------------------------

Evidence = PreflightCompleted | PilotCompleted | DrillCompleted
_GATE_OF: Mapping[type[Event], str] = {PreflightCompleted: PREFLIGHT, PilotCompleted: PILOT,
                                       DrillCompleted: DRILL}


@dataclass(frozen=True, slots=True)
class GateBook:
    """The newest verdict per (gate, spec digest) and fault (``""`` for preflight and pilot).

    Digests are kept as 64 hex, without ``sha256:``, as the evidence's key has them.
    """

    verdicts: Mapping[tuple[str, str], Mapping[str, str]] = field(default_factory=dict)

    def newest(self, gate: str, digest: str) -> Mapping[str, str]:
        return self.verdicts.get((gate, _hex(digest)), {})


EMPTY = GateBook()


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def misfiled(event: Event) -> str | None:
    """Why a piece of evidence cannot count, or None: its key must be its digest's key,
    so every piece about one spec is in one partition, in the order it was written."""
    if not isinstance(event, Evidence):
        return f"{event.event_type} is not evidence for an admission gate"
    want = spec_key(event.spec_digest)
    if event.run_id != want:
        return (f"{event.event_type} {event.header.event_id} for {event.spec_digest} is keyed "
                f"{event.run_id!r}, not {want!r}; write it with runledger.signer.send_request")
    return None


def observe(book: GateBook, event: Event) -> GateBook:
    """The book after one piece of evidence (anything else, or a misfiled one, changes nothing)."""
    if misfiled(event) is not None:
        return book
    assert isinstance(event, Evidence)
    key = (_GATE_OF[type(event)], _hex(event.spec_digest))
    fault = event.fault if isinstance(event, DrillCompleted) else ""
    faults = {**book.verdicts.get(key, {}), fault: event.verdict}
    return GateBook({**book.verdicts, key: faults})


def problem(book: GateBook, gate: str, digest: str) -> str | None:
    """Why ``gate`` has not passed for the spec ``digest``, or None when it has."""
    seen = book.newest(gate, digest)
    kind, command = _EVIDENCE_TYPE[gate], _COMMAND[gate]
    if not seen:
        return f"gate {gate}: no {kind} for this spec's digest yet; run `{command}`"
    if gate != DRILL:
        if seen[""] == "pass":
            return None
        return f"gate {gate}: the newest {kind} for this spec failed; fix it and run `{command}`"
    failed = sorted(f for f, v in seen.items() if v == "fail")
    if failed:
        return (f"gate drill: fault(s) {', '.join(failed)} failed in the newest drill of "
                f"each; fix them and run `{command}`")
    if not any(v == "pass" for v in seen.values()):
        return (f"gate drill: every drilled fault ({', '.join(sorted(seen))}) was skipped, "
                f"none passed; run `{command}` with a fault this spec can show")
    return None


def blocked(book: GateBook, required: tuple[str, ...], digest: str) -> str | None:
    """The queue reason for a run whose ``required`` gates have not all passed, or None.

    Every missing or failed gate is named, in :data:`GATE_NAMES` order.
    """
    problems = [p for p in (problem(book, g, digest) for g in required) if p is not None]
    return "; ".join(problems) if problems else None
