"""Building manifests from templates, and the catalog that keeps them by id and alias."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dataplane.catalog import Catalog, build_manifest, default_catalog_url
from dataplane.documents import sha256_digest
from dataplane.errors import CatalogError, ManifestError
from dataplane.shards import shard_info
from dataplane.synth import DEFAULT_SOURCES, template, write_corpus


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    root = tmp_path / "corpus"
    write_corpus(str(root), seed=0)
    return root, template(str(root), seed=0)


def test_build_fills_every_object_from_the_store(corpus: tuple[Path, dict[str, Any]]) -> None:
    root, doc = corpus
    before = copy.deepcopy(doc)
    m = build_manifest(doc, str(root))
    assert doc == before  # the caller's template is left alone
    assert [s.name for s in m.sources] == ["web", "code", "books"]
    for s in m.sources:
        spec = DEFAULT_SOURCES[s.name]
        assert [o.path for o in s.objects] == [f"{s.name}/part-{i:05d}.rltok"
                                               for i in range(spec.objects)]
        assert s.records == spec.docs
        first = 0
        for o in s.objects:
            info = shard_info(str(root / o.path))
            assert (o.digest, o.bytes, o.records, o.tokens) == (
                info.digest, info.bytes, info.records, info.tokens)
            assert o.first == first
            first += o.records
    assert m.root == str(root) and m.access == [str(root)]


def test_ids_are_stable_across_rebuilds_and_catalogs(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, doc = corpus
    a = Catalog(str(tmp_path / "cat-a"))
    b = Catalog(str(tmp_path / "cat-b"))
    first = a.put(build_manifest(doc, str(root)))
    text = yaml.safe_dump(doc, sort_keys=True)  # another spelling of the same template
    second = b.put(build_manifest(text, str(root)))
    assert first == second == build_manifest(doc, str(root)).dataset_id
    stored = tmp_path / "cat-a" / "manifests" / f"{first.removeprefix('sha256:')}.json"
    assert sha256_digest(stored.read_bytes()) == first
    assert stored.read_bytes() == build_manifest(doc, str(root)).canonical_json().encode()
    mtime = stored.stat().st_mtime_ns
    assert a.put(build_manifest(doc, str(root))) == first  # idempotent: not rewritten
    assert stored.stat().st_mtime_ns == mtime
    assert a.get(first) == build_manifest(doc, str(root))
    assert a.ids() == [first]


def test_a_relative_root_is_taken_against_the_base(corpus: tuple[Path, dict[str, Any]]) -> None:
    root, doc = corpus
    relative = doc | {"root": "corpus", "access": ["corpus"]}
    m = build_manifest(relative, str(root.parent))
    assert m.root == str(root) and m.dataset_id == build_manifest(doc, str(root)).dataset_id
    defaulted = {k: v for k, v in doc.items() if k not in ("root", "access")}
    assert build_manifest(defaulted, str(root)).dataset_id == m.dataset_id


def test_one_changed_value_is_another_dataset(corpus: tuple[Path, dict[str, Any]]) -> None:
    root, doc = corpus
    base = build_manifest(doc, str(root)).dataset_id
    reweighted = copy.deepcopy(doc)
    reweighted["mixture"]["weights"]["web"] = 0.51
    assert build_manifest(reweighted, str(root)).dataset_id != base
    shard = root / "code" / "part-00001.rltok"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1  # one token of one document: still a well-formed shard
    shard.write_bytes(bytes(data))
    assert build_manifest(doc, str(root)).dataset_id != base


def test_an_altered_stored_manifest_is_refused(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, doc = corpus
    catalog = Catalog(str(tmp_path / "cat"))
    m = build_manifest(doc, str(root))
    mid = catalog.put(m)
    stored = tmp_path / "cat" / "manifests" / f"{mid.removeprefix('sha256:')}.json"
    stored.write_bytes(stored.read_bytes().replace(b'"web":0.5', b'"web":0.6'))
    with pytest.raises(CatalogError, match="altered"):
        catalog.get(mid)
    with pytest.raises(CatalogError, match="altered"):
        catalog.put(m)  # never overwrites the evidence


def test_unknown_ids_name_the_catalog_and_the_list_command(tmp_path: Path) -> None:
    catalog = Catalog(str(tmp_path / "empty"))
    unknown = "sha256:" + "ab" * 32
    with pytest.raises(CatalogError, match=r"holds 0 manifests.*runledger dataset list"):
        catalog.get(unknown)
    with pytest.raises(CatalogError, match="unknown dataset manifest"):
        catalog.resolve(unknown)
    with pytest.raises(CatalogError, match="not a dataset manifest id"):
        catalog.get("sha256:1234")
    assert catalog.ids() == [] and catalog.aliases() == {} and not catalog.exists()


def test_a_glob_with_no_match_is_named(corpus: tuple[Path, dict[str, Any]]) -> None:
    root, doc = corpus
    bad = copy.deepcopy(doc)
    bad["sources"][1]["objects"] = ["code/*.rltok", "kode/*.rltok"]
    with pytest.raises(ManifestError) as info:
        build_manifest(bad, str(root), source="t.yaml")
    assert info.value.source == "t.yaml"
    [problem] = info.value.problems
    assert "sources[code].objects[1]" in problem and "'kode/*.rltok'" in problem
    assert "matches no object" in problem


def test_missing_objects_and_non_shards_are_named(corpus: tuple[Path, dict[str, Any]]) -> None:
    root, doc = corpus
    (root / "web" / "zz-notes.rltok").write_text("not a shard\n" * 10)
    bad = copy.deepcopy(doc)
    bad["sources"][2]["objects"] = ["books/part-00000.rltok", "books/part-00009.rltok"]
    with pytest.raises(ManifestError) as info:
        build_manifest(bad, str(root))
    problems = info.value.problems
    assert len(problems) == 2
    assert "sources[web].objects[0] web/zz-notes.rltok: not an rltok-v1 shard" in problems[0]
    assert "sources[books].objects[1] books/part-00009.rltok: no such object" in problems[1]


def test_objects_outside_the_access_scope_are_refused(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, doc = corpus
    narrow = copy.deepcopy(doc) | {"access": [str(root / "web")]}
    with pytest.raises(ManifestError) as info:
        build_manifest(narrow, str(root))
    assert all("outside the access scope" in p for p in info.value.problems)
    assert {p.split(".objects")[0] for p in info.value.problems} == {
        "sources[code]", "sources[books]"}
    outside = tmp_path / "elsewhere.rltok"
    outside.write_bytes((root / "web" / "part-00000.rltok").read_bytes())
    sneaky = copy.deepcopy(doc)
    sneaky["sources"][0]["objects"] = ["web/*.rltok", "../elsewhere.rltok", str(outside)]
    with pytest.raises(ManifestError) as info:
        build_manifest(sneaky, str(root))
    assert len(info.value.problems) == 2
    assert all("outside the access scope" in p for p in info.value.problems)


def test_given_fields_must_agree_with_the_object(corpus: tuple[Path, dict[str, Any]]) -> None:
    root, doc = corpus
    info = shard_info(str(root / "books" / "part-00000.rltok"))
    pinned = copy.deepcopy(doc)
    pinned["sources"][2]["objects"] = [{"path": "books/part-00000.rltok",
                                        "digest": info.digest, "version": "v1"},
                                       "books/part-00001.rltok"]
    m = build_manifest(pinned, str(root))
    assert m.source("books").objects[0].version == "v1"
    pinned["sources"][2]["objects"][0]["records"] = info.records + 1
    with pytest.raises(ManifestError, match=r"records is 21 in the template but 20"):
        build_manifest(pinned, str(root))


def test_other_template_problems_come_from_the_model(
    corpus: tuple[Path, dict[str, Any]]
) -> None:
    root, doc = corpus
    bad = copy.deepcopy(doc)
    bad["packing"]["seq_len"] = 0
    bad["colour"] = "blue"
    with pytest.raises(ManifestError) as info:
        build_manifest(bad, str(root))
    assert sorted(p.split(":")[0] for p in info.value.problems) == ["colour", "packing.seq_len"]
    bad = copy.deepcopy(doc)
    bad["mixture"]["weights"] = {"web": 1}
    with pytest.raises(ManifestError, match=r"missing \['code', 'books'\]"):
        build_manifest(bad, str(root))
    with pytest.raises(ManifestError, match="not valid YAML"):
        build_manifest("a: [", str(root))


def test_aliases_name_stored_manifests(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, doc = corpus
    catalog = Catalog(str(tmp_path / "cat"))
    one = catalog.put(build_manifest(doc, str(root)))
    changed = copy.deepcopy(doc)
    changed["packing"]["seq_len"] = 256
    two = catalog.put(build_manifest(changed, str(root)))
    assert catalog.set_alias("corpus/latest", one) is None
    assert catalog.set_alias("corpus/latest", two) == one
    assert catalog.set_alias("v1.0_rc-1", one) is None
    assert catalog.resolve("corpus/latest") == two
    assert catalog.resolve(one) == one
    assert catalog.aliases() == {"corpus/latest": two, "v1.0_rc-1": one}
    assert catalog.ids() == sorted([one, two]) and catalog.exists()
    record = json.loads((tmp_path / "cat" / "aliases" / "corpus" / "latest.json").read_text())
    assert record == {"alias": "corpus/latest", "id": two, "previous": one}
    with pytest.raises(CatalogError, match=r"unknown dataset alias 'corpus/old'.*"
                                           r"known aliases: corpus/latest, v1\.0_rc-1"):
        catalog.resolve("corpus/old")
    with pytest.raises(CatalogError, match="unknown dataset manifest"):
        catalog.set_alias("corpus/next", "sha256:" + "0" * 64)
    for bad in ("../escape", "corpus/../x", "corpus/./x", "a b", "/abs", "corpus/", ""):
        with pytest.raises(CatalogError, match="not a dataset alias"):
            catalog.set_alias(bad, one)
        with pytest.raises(CatalogError, match="not a dataset alias"):
            catalog.resolve(bad)
    assert not (tmp_path / "escape.json").exists()


def test_a_damaged_alias_file_is_refused(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, doc = corpus
    catalog = Catalog(str(tmp_path / "cat"))
    catalog.set_alias("x", catalog.put(build_manifest(doc, str(root))))
    (tmp_path / "cat" / "aliases" / "x.json").write_text('{"alias": "y", "id": "nope"}')
    with pytest.raises(CatalogError, match="damaged"):
        catalog.resolve("x")


def test_any_fsspec_store_works() -> None:
    root = "memory://catalog-test/corpus"
    write_corpus(root, seed=2)
    m = build_manifest(template(root, seed=2), "memory://catalog-test")
    assert m.source("web").objects[0].path == "web/part-00000.rltok"
    catalog = Catalog("memory://catalog-test/cat")
    mid = catalog.put(m)
    catalog.set_alias("corpus/latest", mid)
    assert catalog.get(catalog.resolve("corpus/latest")) == m
    with pytest.raises(CatalogError, match="cannot open"):
        Catalog("nosuchprotocol://x")


def test_the_default_catalog_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RUNLEDGER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RUNLEDGER_DATASETS", "memory://elsewhere")
    assert default_catalog_url() == "memory://elsewhere"
    monkeypatch.delenv("RUNLEDGER_DATASETS")
    # Under RUNLEDGER_HOME, never a directory every stack and user would share.
    assert default_catalog_url() == str(tmp_path / "home" / "datasets")
    monkeypatch.delenv("RUNLEDGER_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert default_catalog_url() == str(tmp_path / "user" / ".local/state/runledger/datasets")
