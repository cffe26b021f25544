"""User documents: canonical JSON, SHA-256 digests, and the problems of an invalid one.

A run spec and a dataset manifest are both YAML a person writes, validated by
pydantic models and identified by the digest of their canonical JSON; this is
the one place that form, the digest and the wording of a failed validation are
defined. It lives in ``dataplane`` (the leaf package) so that ``controller``,
``worker`` and ``dataplane`` can all import it.

Both identities are recorded in the log (``RunSubmitted.spec_digest``, dataset
ids in specs and checkpoints), so the canonical form never changes:
``tests/dataplane/test_documents.py`` pins known digests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Self

if TYPE_CHECKING:  # annotations only: every error module imports this one, pydantic is slow
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 as is; NaN and infinity are refused."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def sha256_digest(data: bytes | str) -> str:
    """``sha256:<64 lowercase hex>`` of ``data`` (text is hashed as its UTF-8 bytes)."""
    raw = data.encode() if isinstance(data, str) else data
    return "sha256:" + hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True, slots=True)
class DocumentKind:
    """How one kind of document is named in the problems found in it."""

    name: str  # "run spec": "<source>: invalid run spec, ..." and "not part of the run spec"
    root: str  # the field path of a problem with the document as a whole: "(spec)"
    # Discriminated unions by field name and their tags. pydantic puts the tag in
    # the path (membership.elastic.max), a level the author never wrote: dropped.
    union_tags: Mapping[str, frozenset[str]] = field(default_factory=dict)


class InvalidDocument(Exception):
    """A document that cannot be accepted; never raised itself.

    ``problems`` holds one ``field.path: problem`` line per bad field, so a user
    fixes every mistake in one round instead of one per attempt. Each package's
    leaf (``dataplane.errors.ManifestError``, ``controller.errors.SpecError``)
    derives from this and from its own package's root, and names its ``kind``.
    """

    kind: ClassVar[DocumentKind]

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"{source}: invalid {self.kind.name}, {count} {noun}:\n{lines}")

    @classmethod
    def from_validation(cls, source: str, exc: ValidationError) -> Self:
        return cls(source, validation_problems(exc, cls.kind))


def validation_problems(exc: ValidationError, kind: DocumentKind) -> list[str]:
    """One ``field.path: problem`` line per error pydantic found, in its order."""
    return [_problem(e, kind) for e in exc.errors()]


def _field_path(loc: tuple[int | str, ...], kind: DocumentKind) -> str:
    parts = list(loc)
    key = bool(parts) and parts[-1] == "[key]"  # pydantic's marker for a bad mapping key
    if key:
        parts.pop()
    if len(parts) >= 2 and parts[1] in kind.union_tags.get(str(parts[0]), ()):
        del parts[1]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return (out or kind.root) + (" (the key)" if key else "")


def _problem(error: ErrorDetails, kind: DocumentKind) -> str:
    code, msg, given = error["type"], error["msg"], error.get("input")
    ctx = error.get("ctx") or {}
    if code == "missing":
        msg = "required field is missing"
    elif code == "extra_forbidden":
        msg = f"unknown field (not part of the {kind.name})"
    elif code == "union_tag_not_found":
        msg = f"needs {ctx.get('discriminator', 'a kind')}"
    elif code == "union_tag_invalid":
        msg = (f"{str(ctx.get('discriminator')).strip(chr(39))} must be one of"
               f" {ctx.get('expected_tags')} (got {ctx.get('tag')!r})")
    elif code == "too_short" and ctx.get("actual_length") == 0:
        msg = "must not be empty"
    elif code == "value_error":
        msg = msg.removeprefix("Value error, ")
    elif code in ("float_type", "int_type") and isinstance(given, str) and _numeric(given):
        # YAML 1.1 reads 1e-3 (no dot) as text; say so instead of only "not a number".
        msg += f" (got the text {given!r}; write exponents with a dot, 1.0e-3, and no quotes)"
    elif isinstance(given, Hashable) and not isinstance(given, dict | list):
        msg += f" (got {given!r:.60})"
    return f"{_field_path(error['loc'], kind)}: {msg}"


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
