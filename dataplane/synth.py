"""A deterministic synthetic multi-source corpus, for tests and the demo.

:func:`write_corpus` writes rltok-v1 shards for a few sources that differ the
way real ones do: ``web`` has many short documents, ``code`` medium ones,
``books`` a few long ones. Each source draws its tokens from its own band of
the vocabulary (disjoint bands), so a test can tell which source a sample came
from by its tokens alone (:func:`source_of_token`). Ids 0 and 1 are reserved
(pad and end-of-document) and never appear inside a document.

This is a generator, not a fold: randomness is fine, but the output is
byte-identical for one ``(seed, sources, vocab_size)``, because each source
gets its own numpy Generator seeded from the seed and a stable hash of its name
(never Python's salted ``hash``). :func:`template` is the matching manifest
template that ``runledger dataset build`` turns into a manifest.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dataplane.documents import canonical_json, sha256_digest
from dataplane.manifest import join_url
from dataplane.shards import itemsize_for, write_shard

PAD_ID = 0
EOS_ID = 1
RESERVED = 2  # ids below this are special tokens, outside every source's band
TOKENIZER_NAME = "synth"
TOKENIZER_VERSION = "1"
SUFFIX = ".rltok"


@dataclass(frozen=True, slots=True)
class SynthSource:
    """One source: ``docs`` documents over ``objects`` shards.

    Lengths are log-normal around ``median_len`` (spread ``sigma``), clipped to
    ``[min_len, max_len]``. Tokens come from the band ``[lo, hi)`` of the
    usable ids (fractions of ``vocab_size - RESERVED``), Zipf-skewed with
    exponent ``zipf`` so a few ids are common, as in real text.
    """

    docs: int
    objects: int
    median_len: float
    min_len: int
    max_len: int
    band: tuple[float, float]
    sigma: float = 0.6
    zipf: float = 1.1

    def __post_init__(self) -> None:
        lo, hi = self.band
        if not 0.0 <= lo < hi <= 1.0:
            raise ValueError(f"band {self.band} must satisfy 0 <= lo < hi <= 1")
        if not 1 <= self.objects <= self.docs:
            raise ValueError(f"objects {self.objects} must be between 1 and docs {self.docs}")
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"lengths need 1 <= min_len {self.min_len} <= max_len {self.max_len}")


DEFAULT_SOURCES: dict[str, SynthSource] = {
    "web": SynthSource(docs=3000, objects=3, median_len=60, min_len=8, max_len=512,
                       band=(0.0, 0.5)),
    "code": SynthSource(docs=600, objects=2, median_len=300, min_len=32, max_len=2048,
                        band=(0.5, 0.8), sigma=0.5),
    "books": SynthSource(docs=40, objects=2, median_len=3000, min_len=1024, max_len=12000,
                         band=(0.8, 1.0), sigma=0.4),
}
DEFAULT_WEIGHTS: dict[str, float] = {"web": 0.5, "code": 0.3, "books": 0.2}


def band_ids(spec: SynthSource, vocab_size: int) -> tuple[int, int]:
    """The token ids ``[lo, hi)`` a source draws from."""
    usable = vocab_size - RESERVED
    lo = RESERVED + int(spec.band[0] * usable)
    hi = RESERVED + int(spec.band[1] * usable)
    if hi <= lo:
        raise ValueError(f"vocab_size {vocab_size} leaves band {spec.band} empty")
    return lo, hi


def source_of_token(token: int, vocab_size: int = 512,
                    sources: dict[str, SynthSource] | None = None) -> str | None:
    """The source whose band holds ``token``; None for special tokens and gaps."""
    for name, spec in (sources or DEFAULT_SOURCES).items():
        lo, hi = band_ids(spec, vocab_size)
        if lo <= token < hi:
            return name
    return None


def vocab_digest(vocab_size: int) -> str:
    """Digest of a canonical description of the synthetic vocabulary (id n is piece "<n>")."""
    doc = {"tokenizer": TOKENIZER_NAME, "version": TOKENIZER_VERSION, "vocab_size": vocab_size,
           "pad_id": PAD_ID, "eos_id": EOS_ID, "pieces": "<id>"}
    return sha256_digest(canonical_json(doc))


def _rng(seed: int, name: str) -> np.random.Generator:
    # A stable 64-bit value from the name: one source's stream does not depend
    # on which other sources exist or on their order.
    tag = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return np.random.default_rng(np.random.SeedSequence([seed, tag]))


def generate(name: str, spec: SynthSource, *, seed: int, vocab_size: int
             ) -> list[npt.NDArray[np.int64]]:
    """The documents of one source, in order (the same list for the same arguments)."""
    rng = _rng(seed, name)
    raw = rng.lognormal(np.log(spec.median_len), spec.sigma, size=spec.docs)
    lengths = np.clip(np.rint(raw), spec.min_len, spec.max_len).astype(np.int64)
    lo, hi = band_ids(spec, vocab_size)
    ranks = np.arange(1, hi - lo + 1, dtype=np.float64)
    weights = ranks ** -spec.zipf
    # A fixed shuffle of the band, so the frequent ids are not simply the lowest ones.
    ids = lo + rng.permutation(hi - lo)
    drawn = rng.choice(hi - lo, size=int(lengths.sum()), p=weights / weights.sum())
    tokens = ids[drawn].astype(np.int64)
    cuts = np.cumsum(lengths)[:-1]
    return list(np.split(tokens, cuts))


def object_path(name: str, index: int) -> str:
    return f"{name}/part-{index:05d}{SUFFIX}"


def write_corpus(root_url: str, *, seed: int = 0, sources: dict[str, SynthSource] | None = None,
                 vocab_size: int = 512) -> dict[str, list[str]]:
    """Write every source's shards under ``root_url``; source name → object paths (relative)."""
    if seed < 0:
        raise ValueError(f"seed {seed} must be non-negative")
    if vocab_size <= RESERVED:
        raise ValueError(f"vocab_size {vocab_size} must exceed the {RESERVED} reserved ids")
    itemsize = itemsize_for(vocab_size)
    written: dict[str, list[str]] = {}
    for name, spec in (sources or DEFAULT_SOURCES).items():
        docs = generate(name, spec, seed=seed, vocab_size=vocab_size)
        bounds = np.linspace(0, len(docs), spec.objects + 1).round().astype(int)
        paths = []
        for i in range(spec.objects):
            path = object_path(name, i)
            write_shard(join_url(root_url, path), docs[bounds[i]:bounds[i + 1]], itemsize)
            paths.append(path)
        written[name] = paths
    return written


def template(root_url: str, *, seed: int = 0, sources: dict[str, SynthSource] | None = None,
             vocab_size: int = 512, weights: dict[str, float] | None = None,
             seq_len: int = 128) -> dict[str, Any]:
    """A manifest template for the corpus: object globs, ready for ``dataset build``."""
    names = list(sources or DEFAULT_SOURCES)
    mix = weights if weights is not None else (
        DEFAULT_WEIGHTS if sources is None else {n: 1.0 for n in names})
    return {
        "name": "synth",
        "root": root_url,
        "tokenizer": {"name": TOKENIZER_NAME, "version": TOKENIZER_VERSION,
                      "vocab_size": vocab_size, "vocab_digest": vocab_digest(vocab_size),
                      "eos_id": EOS_ID},
        "sources": [{"name": n, "objects": [f"{n}/*{SUFFIX}"],
                     "provenance": {"generator": "dataplane.synth", "seed": str(seed)}}
                    for n in names],
        "packing": {"mode": "concat", "seq_len": seq_len, "pad_id": PAD_ID},
        "mixture": {"mode": "exact", "weights": dict(mix), "exhaustion": "repeat",
                    "unit": "samples"},
        "access": [root_url],
    }
