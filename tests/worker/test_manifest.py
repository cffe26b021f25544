"""The checkpoint manifest's bytes: a known manifest keeps its bytes and digest."""

from __future__ import annotations

import json

from worker.manifest import CheckpointManifest, FileEntry, digest, parse

KNOWN = CheckpointManifest(
    run_id="run-1", generation=2, step=10, world_size=2,
    files=(FileEntry("r0/__0_0.distcp", 10, 123, 0), FileEntry(".metadata", 5, 9, -1)),
    keys=("model.wé", "optim"), dataset_id="sha256:" + "ab" * 32, data={"pos": 3},
    counters={"tokens": 5}, code_version="abc")


def test_a_known_manifest_keeps_its_bytes_and_digest() -> None:
    # The log commits this digest (ManifestProposed): sorted keys, no whitespace,
    # and, unlike a spec or dataset manifest, non-ASCII text escaped.
    data = KNOWN.to_json()
    assert b'"keys":["model.w\\u00e9","optim"]' in data
    assert data.isascii() and json.loads(data)["keys"] == ["model.wé", "optim"]
    assert digest(data) == (
        "sha256:ed66944db47245316f0891920ffdb3bca2980e4f1495bf511ba16d8902f75334")
    assert parse(data, "m") == KNOWN
