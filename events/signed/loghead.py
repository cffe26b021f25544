"""The signed heads a copy of the log carries: where each chain ended when it was exported. Pure.

A run's facts and the keys log are hash chains (``events.signed.audit``): a record
removed from the middle breaks a link, but a chain cut at its *end* is still
a valid, shorter chain. ``runledger audit export`` therefore writes, beside
the records, the head of every chain it copied (:func:`heads_of`: per run its
last genuine fact's digest and its number of facts, and the keys log's head
and number of records), signed by the exporter's key (:func:`sign`:
``events.signed.signing.heads_message`` over the canonical JSON of :class:`Heads`).

``runledger audit verify --from`` takes them back (:func:`parse`) and
:func:`check` judges them against the copy, with no state kept elsewhere:

- the signature must be a key that is live at the end of the copy's own keys
  log (``events.signed.keyring.check``, any role): :data:`HEADS_UNSIGNED` and the
  ring's reasons prefixed ``heads_`` (``heads_unknown_key``, ...);
- the keys log must reach its signed head (:data:`TRUNCATED`: key records cut
  from its end, a trailing revocation say);
- each run's chain must reach its signed head: :func:`run_heads` hands them to
  ``events.signed.audit.verify`` as its ``heads``, which reports ``truncated``.

What it cannot see: records removed from the live log *before* the export
(the heads are of what was read), and a copy re-exported or re-signed by
whoever holds the exporter's key (or any live key of the keys log).

Tested in tests/events/signed/test_loghead.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from events.signed import keyring
from events.signed.audit import TRUNCATED, AuditReport, Problem
from events.signed.keyring import KeyRing
from events.signed.signing import GENESIS, SigningKey, heads_message, is_digest, is_key_id
from events.topics import KEYS

FORMAT = "runledger-log-heads"
VERSION = 1
WHERE = "heads"  # a problem of the signed heads themselves
HEADS_UNSIGNED = "heads_unsigned"


class HeadsError(ValueError):
    """A heads document that is not one (names the field)."""


@dataclass(frozen=True, slots=True)
class Head:
    records: int
    head: str


@dataclass(frozen=True, slots=True)
class Heads:
    """The keys log's head and each run's, as exported."""

    keys: Head
    runs: Mapping[str, Head]

    def body(self) -> bytes:
        """The canonical bytes signed: sorted keys, no spaces, ASCII."""
        doc = {"format": FORMAT, "version": VERSION,
               "keys": {"records": self.keys.records, "head": self.keys.head},
               "runs": {run: {"records": h.records, "head": h.head}
                        for run, h in sorted(self.runs.items())}}
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("ascii")


@dataclass(frozen=True, slots=True)
class Signed:
    heads: Heads
    key_id: str
    signature: bytes


def heads_of(report: AuditReport, keys_records: int) -> Heads:
    """The heads of what was read: the keys log's, and each run's last genuine fact."""
    return Heads(Head(keys_records, report.ring.head),
                 {v.run_id: Head(v.records, v.head) for v in report.runs})


def sign(key: SigningKey, heads: Heads) -> dict[str, Any]:
    """The heads document an export writes: the heads, the signer's key id, the signature."""
    return {**json.loads(heads.body()), "key_id": key.key_id,
            "signature": key.sign(heads_message(heads.body())).hex()}


def parse(doc: object) -> Signed:
    """A heads document read back; a :class:`HeadsError` naming what is wrong."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise HeadsError(f"not a {FORMAT} document")
    if doc.get("version") != VERSION:
        raise HeadsError(f"version {doc.get('version')!r}; this runledger reads {VERSION}")
    runs = doc.get("runs")
    if not isinstance(runs, dict):
        raise HeadsError("runs is not an object of run ids")
    heads = Heads(_head(doc.get("keys"), "keys"),
                  {run: _head(h, f"runs.{run}") for run, h in runs.items()})
    key_id, signature = doc.get("key_id"), doc.get("signature")
    if not isinstance(key_id, str) or not is_key_id(key_id):
        raise HeadsError("key_id is not a key id (16 lowercase hex characters)")
    try:
        raw = bytes.fromhex(signature) if isinstance(signature, str) else None
    except ValueError:
        raw = None
    if raw is None:
        raise HeadsError("signature is not hex")
    return Signed(heads, key_id, raw)


def _head(value: object, field: str) -> Head:
    if not isinstance(value, dict):
        raise HeadsError(f"{field} is not an object")
    records, head = value.get("records"), value.get("head")
    if not isinstance(records, int) or isinstance(records, bool) or records < 0:
        raise HeadsError(f"{field}.records is not a count")
    if not isinstance(head, str) or not is_digest(head):
        raise HeadsError(f"{field}.head is not a 64-hex digest")
    return Head(records, head)


def run_heads(signed: Signed) -> dict[str, str]:
    """The run heads to hand ``audit.verify`` (a run with no genuine fact has none)."""
    return {run: h.head for run, h in signed.heads.runs.items() if h.head != GENESIS}


def check(signed: Signed, ring: KeyRing) -> list[Problem]:
    """The problems of the heads against the copy's keys log (its ring, folded)."""
    why = keyring.check(ring, principal=None, key_id=signed.key_id,
                        message=heads_message(signed.heads.body()),
                        signature=signed.signature or None)
    if why is not None:
        reason = HEADS_UNSIGNED if why == keyring.UNSIGNED else f"heads_{why}"
        return [Problem(WHERE, "", reason,
                        f"the exported heads are signed by {signed.key_id}, which is no live "
                        "key of the copy's keys log that verifies them: the heads (or the keys "
                        "log) were altered; nothing in this copy can be checked for a cut end")]
    keys = signed.heads.keys
    if keys.head != GENESIS and keys.head not in ring.heads:
        return [Problem(f"{KEYS}@end", "", TRUNCATED,
                        f"the keys log never reaches the head the export signed ({keys.records}"
                        f" records, head {keys.head[:16]}); it has {ring.records}: key records "
                        "were removed from its end")]
    return []
