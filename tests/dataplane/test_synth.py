"""The synthetic corpus: byte-identical per seed, sources told apart by tokens, counts honest."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np
import pytest

from dataplane.shards import HEADER_BYTES, read_lengths, shard_info
from dataplane.synth import (
    DEFAULT_SOURCES,
    EOS_ID,
    PAD_ID,
    SynthSource,
    band_ids,
    generate,
    source_of_token,
    template,
    vocab_digest,
    write_corpus,
)


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.rltok"))}


def tokens_of(path: Path) -> list[np.ndarray]:
    header, offsets = read_lengths(str(path))
    raw = np.frombuffer(path.read_bytes()[header.tokens_at:], dtype="<u2")
    return [raw[int(a):int(b)] for a, b in itertools.pairwise(offsets)]


def test_the_same_seed_writes_the_same_bytes(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    start = time.perf_counter()
    written = write_corpus(str(a), seed=7)
    elapsed = time.perf_counter() - start
    write_corpus(str(b), seed=7)
    write_corpus(str(c), seed=8)
    assert files(a) == files(b)
    assert files(a).keys() == files(c).keys()
    assert all(files(a)[k] != files(c)[k] for k in files(a))
    assert written == {n: [f"{n}/part-{i:05d}.rltok" for i in range(s.objects)]
                       for n, s in DEFAULT_SOURCES.items()}
    assert elapsed < 2.0  # a test fixture, not a workload (about 0.1 s here)


def test_one_source_does_not_depend_on_the_others() -> None:
    alone = generate("web", DEFAULT_SOURCES["web"], seed=3, vocab_size=512)
    again = generate("web", DEFAULT_SOURCES["web"], seed=3, vocab_size=512)
    assert all(np.array_equal(x, y) for x, y in zip(alone, again, strict=True))
    other = generate("web", DEFAULT_SOURCES["web"], seed=4, vocab_size=512)
    assert not all(np.array_equal(x, y) for x, y in zip(alone, other, strict=False))


def test_sources_are_told_apart_by_tokens_and_lengths(tmp_path: Path) -> None:
    written = write_corpus(str(tmp_path))
    mean_len = {}
    for name, paths in written.items():
        docs = [d for p in paths for d in tokens_of(tmp_path / p)]
        everything = np.concatenate(docs)
        lo, hi = band_ids(DEFAULT_SOURCES[name], 512)
        assert lo >= 2 and int(everything.min()) >= lo and int(everything.max()) < hi
        assert {source_of_token(int(t)) for t in np.unique(everything)} == {name}
        assert PAD_ID not in everything and EOS_ID not in everything
        mean_len[name] = float(np.mean([d.size for d in docs]))
    assert mean_len["web"] < mean_len["code"] < mean_len["books"]
    assert source_of_token(PAD_ID) is None and source_of_token(EOS_ID) is None


def test_shard_info_counts_match_what_was_generated(tmp_path: Path) -> None:
    written = write_corpus(str(tmp_path), seed=1)
    total = 0
    for name, paths in written.items():
        docs = generate(name, DEFAULT_SOURCES[name], seed=1, vocab_size=512)
        infos = [shard_info(str(tmp_path / p)) for p in paths]
        assert sum(i.records for i in infos) == len(docs) == DEFAULT_SOURCES[name].docs
        assert sum(i.tokens for i in infos) == sum(d.size for d in docs)
        assert all(i.bytes == (tmp_path / p).stat().st_size for i, p in zip(infos, paths,
                                                                             strict=True))
        assert all(i.bytes > HEADER_BYTES for i in infos)
        total += sum(i.tokens for i in infos)
    assert 100_000 <= total <= 1_000_000


def test_custom_sources_vocab_and_fsspec_urls() -> None:
    sources = {"a": SynthSource(docs=10, objects=2, median_len=5, min_len=1, max_len=9,
                                band=(0.0, 0.5)),
               "b": SynthSource(docs=4, objects=1, median_len=50, min_len=40, max_len=60,
                                band=(0.5, 1.0))}
    url = "memory://synth-test-custom"
    written = write_corpus(url, sources=sources, vocab_size=70_000)  # 4-byte tokens
    assert written == {"a": ["a/part-00000.rltok", "a/part-00001.rltok"],
                       "b": ["b/part-00000.rltok"]}
    info = shard_info(f"{url}/b/part-00000.rltok")
    assert info.records == 4 and 160 <= info.tokens <= 240
    doc = template(url, sources=sources, vocab_size=70_000)
    assert doc["mixture"]["weights"] == {"a": 1.0, "b": 1.0}
    assert doc["tokenizer"]["vocab_digest"] == vocab_digest(70_000) != vocab_digest(512)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="band"):
        SynthSource(docs=1, objects=1, median_len=1, min_len=1, max_len=1, band=(0.5, 0.5))
    with pytest.raises(ValueError, match="objects"):
        SynthSource(docs=1, objects=2, median_len=1, min_len=1, max_len=1, band=(0.0, 1.0))
    with pytest.raises(ValueError, match="seed"):
        write_corpus("memory://synth-test-bad", seed=-1)
