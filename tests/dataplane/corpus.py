"""Small real corpora for the data plane tests: rltok-v1 shards on disk and their manifest.

Each record's tokens are a pure function of (source, logical index), so a test
can check that every token a loader hands out is the token the plan names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dataplane.manifest import DatasetManifest
from dataplane.shards import write_shard

VOCAB = 65_000


def doc_tokens(source: int, index: int, length: int) -> np.ndarray:
    j = np.arange(length, dtype=np.int64)
    return (j * 31 + source * 7_919 + index * 104_729) % VOCAB


def write_dataset(root: Path, objects: dict[str, list[list[int]]], *,
                  mixture: dict[str, Any] | None = None, packing: dict[str, Any] | None = None,
                  transforms: list[dict[str, Any]] | None = None,
                  filters: dict[str, list[dict[str, Any]]] | None = None,
                  name: str = "test", write: bool = True) -> DatasetManifest:
    """``objects``: per source, per object, the token count of each record.

    ``write=False`` makes the manifest only (placeholder digests), for the pure
    planner tests, which never read tokens.
    """
    if write:
        root.mkdir(parents=True, exist_ok=True)
    sources = []
    for s, (src, objs) in enumerate(objects.items()):
        entries = []
        first = 0
        for k, lengths in enumerate(objs):
            path = f"{src}/part-{k:03d}.rltok"
            if write:
                (root / src).mkdir(exist_ok=True)
                docs = [doc_tokens(s, first + r, n) for r, n in enumerate(lengths)]
                info = write_shard(str(root / path), docs, 2)
                entry = {"digest": info.digest, "bytes": info.bytes, "records": info.records,
                         "tokens": info.tokens}
            else:
                entry = {"digest": "sha256:" + "1" * 64, "bytes": 64, "records": len(lengths),
                         "tokens": sum(lengths)}
            entries.append({"path": path, "first": first, **entry})
            first += len(lengths)
        sources.append({"name": src, "objects": entries,
                        "filters": (filters or {}).get(src, [])})
    weights = {src: 1 for src in objects}
    doc = {
        "name": name, "root": str(root),
        "tokenizer": {"name": "test", "version": "1", "vocab_size": VOCAB,
                      "vocab_digest": "sha256:" + "0" * 64},
        "sources": sources,
        "transforms": transforms or [],
        "packing": packing or {"mode": "concat", "seq_len": 16},
        "mixture": {"weights": weights, **(mixture or {})},
        "access": [str(root)],
    }
    return DatasetManifest.model_validate(doc)


def lengths_for(rng: np.random.Generator, sources: dict[str, tuple[int, int, int]]
                ) -> dict[str, list[list[int]]]:
    """Random record lengths: per source ``(objects, records per object, max length)``."""
    return {name: [[int(x) for x in rng.integers(0, mx + 1, size=per)] for _ in range(k)]
            for name, (k, per, mx) in sources.items()}


def lengths_fn(objects: dict[str, list[list[int]]]) -> Callable[[int, int], int]:
    """The planner's record-length lookup over the same description, without files."""
    flat = [[n for obj in objs for n in obj] for objs in objects.values()]
    return lambda source, index: flat[source][index]
