"""Dataset manifests: a known manifest keeps its id; invalid ones name every bad field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from dataplane.documents import canonical_json, sha256_digest
from dataplane.errors import ManifestError
from dataplane.manifest import parse_manifest

MANIFEST: dict[str, Any] = {
    "name": "tiny", "root": "/data/tiny",
    "tokenizer": {"name": "bpe", "version": "1", "vocab_size": 256,
                  "vocab_digest": "sha256:" + "cd" * 32},
    "sources": [{"name": "web", "provenance": {"note": "café"}, "objects": [
        {"path": "web/0.rltok", "digest": "sha256:" + "ef" * 32, "bytes": 100, "records": 3,
         "tokens": 30, "first": 0}]}],
    "packing": {"seq_len": 16}, "mixture": {"weights": {"web": 1}}, "access": ["/data"],
}


def test_a_known_manifest_keeps_its_id() -> None:
    # Dataset ids are recorded in specs, checkpoints and the catalog: the canonical
    # form of a manifest (defaults filled in, non-ASCII kept as UTF-8) never changes.
    m = parse_manifest(json.dumps(MANIFEST), "m.yaml")
    assert m.dataset_id == (
        "sha256:1f9e0857e895abfa7b58baad9ee313e204afc4fbb2c9d474c1425cf36df1e075")
    assert m.dataset_id == sha256_digest(canonical_json(m.model_dump(mode="json")))
    assert '"provenance":{"note":"café"}' in m.canonical_json()
    reordered = dict(reversed(list(MANIFEST.items())))
    assert parse_manifest(json.dumps(reordered), "m.yaml").dataset_id == m.dataset_id


def test_every_bad_field_is_named_at_once() -> None:
    doc = copy.deepcopy(MANIFEST)
    del doc["name"]
    doc["sources"][0]["objects"][0]["bytes"] = 0
    doc["colour"] = "blue"
    with pytest.raises(ManifestError) as info:
        parse_manifest(json.dumps(doc), "m.yaml")
    assert str(info.value) == (
        "m.yaml: invalid dataset manifest, 3 problems:\n"
        "  name: required field is missing\n"
        "  sources[0].objects[0].bytes: Input should be greater than or equal to 1 (got 0)\n"
        "  colour: unknown field (not part of the dataset manifest)")


def test_a_problem_with_the_whole_manifest() -> None:
    doc = copy.deepcopy(MANIFEST)
    doc["mixture"]["weights"] = {"other": 1}
    with pytest.raises(ManifestError) as info:
        parse_manifest(json.dumps(doc), "m.yaml")
    assert info.value.problems == [
        "(manifest): mixture.weights must name every source exactly: missing ['web']"
        " unknown ['other']"]
