"""The loader over real shard files and real threads: resume, elasticity, commit, faults."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

from dataplane.errors import DataFault, StateError
from dataplane.loader import Batch, DataLoader, LoaderConfig
from dataplane.manifest import DatasetManifest
from dataplane.order import Span
from dataplane.store import ObjectStore
from tests.dataplane.corpus import doc_tokens, lengths_for, write_dataset

MIX = {"weights": {"a": 0.5, "b": 0.3, "c": 0.2}, "unit": "tokens", "mode": "exact"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> DatasetManifest:
    rng = np.random.default_rng(3)
    objects = lengths_for(rng, {"a": (2, 30, 40), "b": (1, 20, 100), "c": (3, 10, 12)})
    return write_dataset(tmp_path_factory.mktemp("corpus"), objects, mixture=MIX,
                         packing={"mode": "concat", "seq_len": 16},
                         transforms=[{"kind": "crop", "max_tokens": 60, "mode": "random"}])


def key(batch: Batch) -> tuple[int, tuple[Any, ...], bytes]:
    return batch.index, batch.samples, batch.tokens.tobytes()


def check_tokens(batch: Batch) -> None:
    for row, plan in zip(batch.tokens, batch.samples, strict=True):
        at = 0
        for span in plan:
            want = doc_tokens(span.source, span.index, span.stop)[span.start:span.stop]
            assert (row[at:at + span.size] == want).all()
            at += span.size


def uninterrupted(manifest: DatasetManifest, batches: int, size: int) -> list[Any]:
    with DataLoader(manifest, LoaderConfig(seed=5, global_batch_size=size)) as dl:
        out = []
        for b in dl:
            check_tokens(b)
            out.append(key(b))
            if len(out) == batches:
                return out
    raise AssertionError("the stream ended early")


def test_a_thousand_stops_with_reads_in_flight_resume_exactly(corpus: DatasetManifest) -> None:
    size = 4
    whole = uninterrupted(corpus, 5000, size)
    rnd = random.Random(11)
    config = LoaderConfig(seed=5, global_batch_size=size, workers=3, max_items=24,
                          verify="size")
    state: dict[str, Any] | None = None
    committed: list[Any] = []  # what committed steps consumed, in order
    stops = resumes_in_a_row = max_in_a_row = 0
    epochs_crossed = set()
    while stops < 1000:
        dl = DataLoader(corpus, config)
        if state is not None:
            dl.load_state_dict(json.loads(json.dumps(state)))  # as a checkpoint stores it
        handed = []
        for b in dl:
            handed.append(b)
            if b.index + 1 >= len(whole) or rnd.random() < 0.15:
                break
        # commit some prefix of what was handed out (maybe nothing): the step boundary
        cut = rnd.randint(0, len(handed))
        if cut:
            dl.commit(handed[cut - 1].cursor)
        committed.extend(key(b) for b in handed[:cut])
        resumes_in_a_row = 0 if cut else resumes_in_a_row + 1
        max_in_a_row = max(max_in_a_row, resumes_in_a_row)
        assert dl.stats()["queue_depth"] > 0 or handed[-1].index + 1 >= len(whole)
        state = dl.state_dict()
        epochs_crossed.add(state["epoch"])
        dl.close()  # the crash: prefetched reads are dropped, never trusted
        stops += 1
    assert committed == whole[:len(committed)]  # 0 duplicates, 0 skips, same order
    assert len(committed) > 1000 and max_in_a_row >= 3 and len(epochs_crossed) >= 3


def test_replicas_4_2_3_keep_every_global_batch(corpus: DatasetManifest) -> None:
    size = 12
    whole = uninterrupted(corpus, 30, size)
    state: dict[str, Any] | None = None
    got: list[Any] = []
    for replicas, steps in ((4, 10), (2, 7), (3, 13)):
        loaders = [DataLoader(corpus, LoaderConfig(seed=5, global_batch_size=size),
                              replica=r, replicas=replicas) for r in range(replicas)]
        if state is not None:
            for dl in loaders:
                dl.load_state_dict(state)
        for _ in range(steps):
            parts = [next(dl) for dl in loaders]
            assert len({p.index for p in parts}) == 1
            for p in parts:
                check_tokens(p)
            merged = (parts[0].index, sum((p.samples for p in parts), ()),
                      b"".join(p.tokens.tobytes() for p in parts))
            got.append(merged)
            for dl, p in zip(loaders, parts, strict=True):
                dl.commit(p.cursor)
        states = [dl.state_dict() for dl in loaders]
        assert all(s == states[0] for s in states)  # the cursor is global, not per replica
        state = states[0]
        for dl in loaders:
            dl.close()
    assert got == whole


def test_state_dict_is_the_durable_cursor_not_the_prefetch(corpus: DatasetManifest) -> None:
    with DataLoader(corpus, LoaderConfig(seed=5, global_batch_size=2)) as dl:
        first = dl.state_dict()
        a = next(dl)
        b = next(dl)
        assert dl.state_dict() == first  # nothing committed yet
        dl.commit(a.cursor)
        assert dl.state_dict()["batch"] == 1
        with (pytest.raises(StateError, match="behind"),
              DataLoader(corpus, LoaderConfig(seed=5, global_batch_size=2)) as other):
            other.load_state_dict(b.cursor.state_dict())
            other.commit(a.cursor)
        with pytest.raises(StateError, match="handed out"):
            ahead = DataLoader(corpus, LoaderConfig(seed=5, global_batch_size=2))
            try:
                ahead.commit(b.cursor)
            finally:
                ahead.close()
        dl.commit(b.cursor)
        assert dl.state_dict() == b.cursor.state_dict()
        sources = dl.state_dict()["sources"]
        assert b.cursor.source_counts() == {s: sources[s]["units"] for s in "abc"}


def test_states_of_other_orders_are_refused(corpus: DatasetManifest, tmp_path: Path) -> None:
    with DataLoader(corpus, LoaderConfig(seed=5, global_batch_size=2)) as dl:
        dl.commit(next(dl).cursor)
        good = dl.state_dict()
    # one changed manifest byte is another dataset, and its id differs
    text = corpus.canonical_json()
    changed_text = text.replace('"seq_len":16', '"seq_len":17')
    assert changed_text != text
    changed = DatasetManifest.model_validate_json(changed_text)
    assert changed.dataset_id != corpus.dataset_id
    with (DataLoader(changed, LoaderConfig(seed=5, global_batch_size=2)) as other,
          pytest.raises(StateError, match="dataset_id")):
        other.load_state_dict(good)
    cases: list[tuple[dict[str, Any], str]] = [
        ({**good, "seed": 6}, "seed"),
        ({**good, "algorithm": "rl-feistel-v0"}, "algorithm"),
        ({**good, "global_batch_size": 4}, "global_batch_size"),
        ({**good, "version": 2}, "version"),
        ({k: v for k, v in good.items() if k != "packer"}, "missing"),
        ({**good, "extra": 1}, "unknown"),
        ({**good, "position": 3}, "position"),
        ({**good, "draws_total": True}, "draws_total"),
        ({**good, "sources": {**good["sources"], "a": {**good["sources"]["a"], "draws": -1}}},
         "sources.a.draws"),
        ({**good, "sources": {"a": good["sources"]["a"]}}, "sources"),
    ]
    with DataLoader(corpus, LoaderConfig(seed=5, global_batch_size=2)) as dl:
        for state, where in cases:
            with pytest.raises(StateError, match=where):
                dl.load_state_dict(state)
        dl.load_state_dict(good)  # and the good one still loads
        assert next(dl).index == 1


def _copy(corpus: DatasetManifest, dest: Path) -> DatasetManifest:
    dest.mkdir()
    for s in corpus.sources:
        (dest / s.name).mkdir()
        for o in s.objects:
            (dest / o.path).write_bytes(Path(corpus.url(o)).read_bytes())
    return DatasetManifest.model_validate(
        {**corpus.model_dump(), "root": str(dest), "access": [str(dest)]})


@pytest.mark.parametrize("damage,match", [
    ("delete", "missing"), ("append", "size mismatch"), ("flip", "digest mismatch")])
def test_damaged_objects_are_data_faults(corpus: DatasetManifest, tmp_path: Path,
                                         damage: str, match: str) -> None:
    m = _copy(corpus, tmp_path / "copy")
    victim = Path(m.url(m.sources[1].objects[0]))
    if damage == "delete":
        victim.unlink()
    elif damage == "append":
        victim.write_bytes(victim.read_bytes() + b"\0")
    else:
        data = bytearray(victim.read_bytes())
        data[-1] ^= 0x01
        victim.write_bytes(bytes(data))
    with (DataLoader(m, LoaderConfig(seed=5, global_batch_size=2)) as dl,
          pytest.raises(DataFault, match=match) as info):
        for _ in range(50):
            next(dl)
    assert info.value.source == "b" and info.value.object == "b/part-000.rltok"


def test_out_of_range_reads_are_data_faults(corpus: DatasetManifest) -> None:
    store = ObjectStore(corpus)
    n = corpus.sources[0].records
    with pytest.raises(DataFault, match=f"logical index {n}"):
        store.length(0, n)
    size = store.length(0, 0)
    with pytest.raises(DataFault, match="record 0"):
        store.read(Span(0, 0, 0, 0, 0, size + 1))


def test_a_slow_object_shows_backpressure_not_memory_growth(corpus: DatasetManifest) -> None:
    release = threading.Event()

    class SlowStore(ObjectStore):
        def _slice(self, opened: Any, span: Span, k: int, r: int, view: bool) -> Any:
            if span.source == 1:  # every read of source b waits
                release.wait(10)
            return super()._slice(opened, span, k, r, view)

    bound = 6
    config = LoaderConfig(seed=5, global_batch_size=2, workers=3, max_items=bound)
    dl = DataLoader(corpus, config, store=SlowStore(corpus))
    out: list[Batch] = []
    worker = threading.Thread(target=lambda: out.extend(next(dl) for _ in range(20)))
    worker.start()
    depths = []
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:
        depths.append(dl.metrics.depth)
        time.sleep(0.005)
    stalled, handed_out = dl.metrics.fetched, len(out)
    release.set()
    worker.join(10)
    dl.close()
    assert len(out) == 20
    assert max(depths) <= bound and dl.metrics.max_depth <= bound
    # No reads were issued past the bound while the head waited: whatever was
    # fetched is in the buffer or in batches already handed out (rows of a-only
    # batches before the head reached a slow read legitimately free room).
    assert stalled - handed_out * config.global_batch_size <= bound
    assert dl.metrics.input_wait_s >= 0.4


def test_the_byte_bound_holds_too(corpus: DatasetManifest) -> None:
    per_seq = 16 * 17
    config = LoaderConfig(seed=5, global_batch_size=4, max_items=64, max_bytes=3 * per_seq)
    with DataLoader(corpus, config) as dl:
        for _ in range(30):
            next(dl)
        assert dl.metrics.max_bytes <= 3 * per_seq and dl.metrics.max_depth <= 3


def test_range_reads_through_fsspec_retry_transient_errors(corpus: DatasetManifest) -> None:
    fs = fsspec.filesystem("memory")
    root = "memory://rl-loader-test"
    for s in corpus.sources:
        for o in s.objects:
            fs.pipe(f"{root}/{o.path}", Path(corpus.url(o)).read_bytes())
    m = DatasetManifest.model_validate({**corpus.model_dump(), "root": root, "access": [root]})
    failures = {"left": 3}

    class FlakyStore(ObjectStore):
        def _range(self, source: int, k: int, start: int, end: int) -> bytes:
            if failures["left"]:
                failures["left"] -= 1
                raise ConnectionResetError("injected")
            return super()._range(source, k, start, end)

    store = FlakyStore(m, retry_backoff_s=0.001)
    with DataLoader(m, LoaderConfig(seed=5, global_batch_size=4), store=store) as dl:
        for _ in range(10):
            check_tokens(next(dl))  # the tokens the plan names, read by byte range
        stats = dl.stats()
    assert stats["retries"] == 3 and stats["bytes_read"] > 0 and stats["cache_hits"] > 0
    assert stats["fetch_p99_s"] >= stats["fetch_p50_s"] > 0


def test_worker_count_and_buffer_size_never_change_the_order(corpus: DatasetManifest) -> None:
    runs = []
    for workers, items in ((1, 1), (4, 64), (2, 5)):
        config = LoaderConfig(seed=5, global_batch_size=4, workers=workers, max_items=items)
        with DataLoader(corpus, config) as dl:
            runs.append([key(next(dl)) for _ in range(25)])
    assert runs[0] == runs[1] == runs[2]


def test_ranks_of_one_replica_share_its_samples(corpus: DatasetManifest) -> None:
    # tensor/pipeline ranks of one data-parallel replica pass the same replica id
    config = LoaderConfig(seed=5, global_batch_size=6)
    with (DataLoader(corpus, config, replica=1, replicas=3) as tp0,
          DataLoader(corpus, config, replica=1, replicas=3) as tp1):
        for _ in range(5):
            a, b = next(tp0), next(tp1)
            assert key(a) == key(b) and a.tokens.shape == (2, 16)


def test_bad_loader_configs_are_refused_before_reading(corpus: DatasetManifest) -> None:
    from dataplane.errors import ConfigError
    with pytest.raises(ConfigError, match="global_batch_size"):
        LoaderConfig(seed=0, global_batch_size=0)
    with pytest.raises(ConfigError, match="seed"):
        LoaderConfig(seed=-1, global_batch_size=2)
    with pytest.raises(ConfigError, match="replicas"):
        DataLoader(corpus, LoaderConfig(seed=0, global_batch_size=2), replicas=3)
    with pytest.raises(ConfigError, match="replica must"):
        DataLoader(corpus, LoaderConfig(seed=0, global_batch_size=2), replica=2, replicas=2)


def expected_columns(batch: Batch, seq_len: int, pad: int) -> list[np.ndarray[Any, Any]]:
    """Each row's segment ids, positions, loss mask and padding, spelled out span by span."""
    k = len(batch.samples)
    segments = np.zeros((k, seq_len), np.int32)
    positions = np.zeros((k, seq_len), np.int32)
    mask = np.zeros((k, seq_len), np.bool_)
    tokens = np.full((k, seq_len), pad, np.int64)
    for r, plan in enumerate(batch.samples):
        at = 0
        for j, span in enumerate(plan):
            segments[r, at:at + span.size] = j + 1
            positions[r, at:at + span.size] = range(span.start - span.origin,
                                                    span.stop - span.origin)
            mask[r, at:at + span.size - 1] = True
            tokens[r, at:at + span.size] = batch.tokens[r, at:at + span.size]
            at += span.size
    return [segments, positions, mask, tokens]


def test_rows_assembled_in_chunks_match_rows_assembled_alone(corpus: DatasetManifest) -> None:
    # replica 1 of 2 holds 4 rows of 7; max_items bounds the chunk: 1 row, 3 + 1 rows, all 4
    runs = []
    for items in (1, 3, 64):
        config = LoaderConfig(seed=5, global_batch_size=7, workers=2, max_items=items)
        with DataLoader(corpus, config, replica=1, replicas=2) as dl:
            got = []
            for _ in range(12):
                b = next(dl)
                want = expected_columns(b, corpus.packing.seq_len, corpus.packing.pad_id)
                for have, ref in zip((b.segment_ids, b.positions, b.loss_mask, b.tokens), want,
                                     strict=True):
                    assert have.dtype == ref.dtype and (have == ref).all()
                check_tokens(b)
                got.append((key(b), b.segment_ids.tobytes(), b.loss_mask.tobytes()))
            runs.append(got)
    assert runs[0] == runs[1] == runs[2]
