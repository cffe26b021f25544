"""The dataset manifest: an immutable description of what a run may read.

The manifest names every object (with its digest, size, record count and the
logical range of sample indices it holds), how samples are identified, what
the tokenizer was, and the order-affecting policies: transforms, packing and
the mixture. Its id is the SHA-256 of its canonical JSON, so one changed value
is a different dataset, and a loader state recorded against one id is refused
against any other (see :mod:`dataplane.state`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from functools import cached_property
from typing import Annotated, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from dataplane.documents import canonical_json, sha256_digest
from dataplane.errors import ManifestError

SCHEMA_VERSION = 1
SAMPLE_ID_RULE = "source/index"
FORMATS = ("rltok-v1",)
UNITS = ("documents", "samples", "packed_sequences", "tokens", "loss_tokens")
EXHAUSTION = ("stop", "repeat", "renormalize", "error")

PosInt = Annotated[int, Strict(), Field(ge=1)]
NonNegInt = Annotated[int, Strict(), Field(ge=0)]
Text = Annotated[str, Strict(), Field(min_length=1)]
Weight = Annotated[Annotated[int, Strict()] | Annotated[float, Strict()], Field(ge=0)]

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def _digest(v: str) -> str:
    if not _DIGEST.fullmatch(v):
        raise ValueError("must be sha256:<64 lowercase hex>")
    return v


def join_url(root: str, path: str) -> str:
    """``path`` under ``root`` unless it is already a URL or an absolute path."""
    if "://" in path or path.startswith("/"):
        return path
    return root.rstrip("/") + "/" + path


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False,
                              protected_namespaces=())


class ObjectEntry(Part):
    """One immutable stored object; its records hold source indices ``[first, first + records)``."""

    path: Text
    digest: Text
    version: Text | None = None  # the store's object version (an S3 VersionId), when it has one
    bytes: PosInt
    records: NonNegInt
    tokens: NonNegInt
    first: NonNegInt

    _check_digest = field_validator("digest")(_digest)


class Filter(Part):
    """A metadata-level filter: decided from a record's token count, so resume stays exact."""

    kind: Literal["min_tokens", "max_tokens"]
    value: PosInt


class Source(Part):
    name: Text
    format: Literal["rltok-v1"] = "rltok-v1"
    compression: Literal["none"] = "none"
    split: Text = "train"
    objects: Annotated[list[ObjectEntry], Field(min_length=1)]
    filters: list[Filter] = Field(default_factory=list)
    # What was done upstream, recorded for provenance; the loader does not redo it.
    dedup: Text | None = None
    provenance: dict[str, Annotated[str, Strict()]] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.fullmatch(v):
            raise ValueError("must be 1-63 letters, digits, '.', '_' or '-', starting alphanumeric")
        return v

    @field_validator("objects")
    @classmethod
    def _contiguous(cls, v: list[ObjectEntry]) -> list[ObjectEntry]:
        expected = 0
        for i, obj in enumerate(v):
            if obj.first != expected:
                raise ValueError(
                    f"objects[{i}] ({obj.path}) starts its logical range at {obj.first};"
                    f" the ranges must be contiguous from 0, so it must start at {expected}"
                )
            expected += obj.records
        if expected == 0:
            raise ValueError("the source holds no records")
        return v

    @property
    def records(self) -> int:
        return sum(o.records for o in self.objects)

    @property
    def tokens(self) -> int:
        return sum(o.tokens for o in self.objects)


class Tokenizer(Part):
    name: Text
    version: Text
    vocab_size: PosInt
    vocab_digest: Text
    eos_id: NonNegInt | None = None

    _check_digest = field_validator("vocab_digest")(_digest)


class Transform(Part):
    """``crop``: keep at most ``max_tokens`` of a record, from its head or from an
    offset drawn from the sample's identity (never from arrival order)."""

    kind: Literal["crop"]
    max_tokens: PosInt
    mode: Literal["head", "random"] = "head"


class Packing(Part):
    """``concat`` packs records end to end into ``seq_len`` sequences, splitting a
    record across sequences; ``none`` makes one padded sequence per record."""

    mode: Literal["none", "concat"] = "concat"
    seq_len: PosInt
    pad_id: NonNegInt = 0


class Mixture(Part):
    """How sources are blended. Weights are sampling weights in ``unit``, not loss weights."""

    mode: Literal["expected", "exact"] = "exact"
    weights: dict[str, Weight]
    replacement: Annotated[bool, Strict()] = False
    exhaustion: Literal["stop", "repeat", "renormalize", "error"] = "repeat"
    unit: Literal["documents", "samples", "packed_sequences", "tokens", "loss_tokens"] = "samples"

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: dict[str, float | int]) -> dict[str, float | int]:
        if not v:
            raise ValueError("must name at least one source")
        if sum(v.values()) <= 0:
            raise ValueError("at least one weight must be positive")
        return v

    def fractions(self) -> dict[str, Fraction]:
        """Exact normalized weights: 0.1 is 1/10, not the nearest binary float."""
        raw = {k: Fraction(repr(w)) if isinstance(w, float) else Fraction(w)
               for k, w in self.weights.items()}
        total = sum(raw.values())
        return {k: w / total for k, w in raw.items()}


class DatasetManifest(Part):
    schema_version: Literal[1] = 1
    name: Text
    root: Text
    sample_id_rule: Literal["source/index"] = "source/index"
    tokenizer: Tokenizer
    sources: Annotated[list[Source], Field(min_length=1)]
    transforms: list[Transform] = Field(default_factory=list)
    packing: Packing
    mixture: Mixture
    # URL prefixes every object must lie under; checked here and again at read time.
    access: Annotated[list[Text], Field(min_length=1)]

    @field_validator("sources")
    @classmethod
    def _unique(cls, v: list[Source]) -> list[Source]:
        seen: set[str] = set()
        for s in v:
            if s.name in seen:
                raise ValueError(f"source {s.name!r} is named twice")
            seen.add(s.name)
        return v

    @model_validator(mode="after")
    def _cross(self) -> DatasetManifest:
        names = [s.name for s in self.sources]
        weights = self.mixture.weights
        missing = [n for n in names if n not in weights]
        extra = [n for n in weights if n not in names]
        if missing or extra:
            raise ValueError(
                "mixture.weights must name every source exactly:"
                + (f" missing {missing}" if missing else "")
                + (f" unknown {extra}" if extra else "")
            )
        for s in self.sources:
            for i, o in enumerate(s.objects):
                url = join_url(self.root, o.path)
                if not in_scope(url, self.access):
                    raise ValueError(
                        f"source {s.name!r} objects[{i}] {url} is outside the access scope"
                        f" {self.access}"
                    )
        return self

    def canonical_json(self) -> str:
        return canonical_json(self.model_dump(mode="json"))

    @cached_property
    def dataset_id(self) -> str:
        return sha256_digest(self.canonical_json())

    def source(self, name: str) -> Source:
        for s in self.sources:
            if s.name == name:
                return s
        raise KeyError(name)

    def url(self, obj: ObjectEntry) -> str:
        return join_url(self.root, obj.path)


def in_scope(url: str, access: list[str]) -> bool:
    """Prefix match on whole path segments, after refusing ``..`` tricks."""
    if "/../" in url or url.endswith("/..") or "/./" in url:
        return False
    for prefix in access:
        p = prefix.rstrip("/")
        if url == p or url.startswith(p + "/"):
            return True
    return False


def parse_manifest(text: str, source: str) -> DatasetManifest:
    """A manifest from YAML or JSON text; ``source`` names it in errors."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ManifestError(source, [f"not valid YAML/JSON: {exc}"]) from None
    if not isinstance(data, dict):
        raise ManifestError(source, ["(manifest): must be a mapping of fields"])
    return _validate(lambda: DatasetManifest.model_validate(data), source)


def _validate(build: Callable[[], DatasetManifest], source: str) -> DatasetManifest:
    try:
        return build()
    except ValidationError as exc:
        raise ManifestError.from_validation(source, exc) from None
