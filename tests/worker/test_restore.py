"""worker/restore.py: verification of a committed checkpoint before anything loads, and
choosing the newest one that verifies.

Loading, with world-size changes, is tested with the commit protocol in
tests/worker/test_commit.py; through a non-local store in tests/worker/test_fsspec_store.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.worker import support
from tests.worker.support import DATASET, RUN, candidate, model_keys, write
from worker.comm import Comm
from worker.commit import Written
from worker.errors import NoUsableCheckpoint, VerificationFailed
from worker.layout import DCP_METADATA, CheckpointDir
from worker.restore import Candidate, choose, verify

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


@pytest.fixture
def good(tmp_path: Path) -> Written:
    model, state = support.small_state()
    return write(CheckpointDir(str(tmp_path), RUN, 2, 20), state, required=model_keys(model))


def _verify(c: Candidate, *, run_id: str = RUN, dataset_id: str | None = DATASET) -> str:
    try:
        verify(c, Comm.single(), run_id=run_id, dataset_id=dataset_id)
    except VerificationFailed as exc:
        return exc.reason
    return "ok"


def test_a_good_candidate_verifies(good: Written) -> None:
    manifest = verify(candidate(good), Comm.single(), run_id=RUN, dataset_id=DATASET)
    assert manifest == good.manifest
    # No expectation about the dataset, or a manifest without one: both accept.
    assert _verify(candidate(good), dataset_id=None) == "ok"


def test_a_manifest_without_a_dataset_is_accepted_by_any_run(tmp_path: Path) -> None:
    _, state = support.small_state()
    w = write(CheckpointDir(str(tmp_path), RUN, 1, 3), state, dataset_id=None)
    assert _verify(candidate(w), dataset_id="anything") == "ok"


def test_missing_manifest(good: Written) -> None:
    os.remove(good.manifest_url)
    assert _verify(candidate(good)) == "manifest_missing"


def test_changed_manifest_bytes(good: Written) -> None:
    path = Path(good.manifest_url)
    doc = json.loads(path.read_bytes())
    doc["counters"]["tokens"] += 1  # still valid JSON, still the same files
    path.write_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    assert _verify(candidate(good)) == "manifest_digest"


def test_whitespace_in_the_manifest_changes_its_digest(good: Written) -> None:
    path = Path(good.manifest_url)
    path.write_bytes(path.read_bytes() + b"\n")
    assert _verify(candidate(good)) == "manifest_digest"


def test_malformed_manifest_that_matches_its_digest(good: Written) -> None:
    path = Path(good.manifest_url)
    bad = b'{"format": "something-else"}'
    path.write_bytes(bad)
    c = Candidate(good.ckdir.step, good.manifest_url, "sha256:" + hashlib.sha256(bad).hexdigest())
    assert _verify(c) == "manifest_invalid"


def test_wrong_run_and_wrong_dataset(good: Written) -> None:
    assert _verify(candidate(good), run_id="run-other") == "wrong_run"
    assert _verify(candidate(good), dataset_id="ds-other") == "wrong_dataset"


def test_step_mismatch(good: Written) -> None:
    c = Candidate(good.ckdir.step + 1, good.manifest_url, good.digest)
    assert _verify(c) == "manifest_invalid"


def test_missing_shard(good: Written) -> None:
    os.remove(good.ckdir.file("__0_0.distcp"))
    assert _verify(candidate(good)) == "shard_missing"


def test_missing_dcp_metadata(good: Written) -> None:
    os.remove(good.ckdir.file(DCP_METADATA))
    assert _verify(candidate(good)) == "shard_missing"


def test_truncated_shard(good: Written) -> None:
    path = Path(good.ckdir.file("__0_0.distcp"))
    os.truncate(path, path.stat().st_size - 1)
    assert _verify(candidate(good)) == "shard_size"


def test_bit_flip_in_a_shard(good: Written) -> None:
    path = Path(good.ckdir.file("__0_0.distcp"))
    size = path.stat().st_size
    support.flip_bit(path, size // 2)
    assert path.stat().st_size == size
    assert _verify(candidate(good)) == "shard_checksum"


def test_bit_flip_in_the_dcp_metadata(good: Written) -> None:
    support.flip_bit(Path(good.ckdir.file(DCP_METADATA)), 7)
    assert _verify(candidate(good)) == "shard_checksum"


def test_choose_falls_back_past_a_corrupt_newest(tmp_path: Path) -> None:
    model, state = support.small_state()
    older = write(CheckpointDir(str(tmp_path), RUN, 1, 10), state, required=model_keys(model))
    newer = write(CheckpointDir(str(tmp_path), RUN, 1, 20), state, required=model_keys(model))
    support.flip_bit(Path(newer.ckdir.file("__0_0.distcp")), 100)
    rejected: list[tuple[Candidate, str]] = []
    chosen, manifest, fell_back = choose(
        [candidate(newer), candidate(older)], Comm.single(), run_id=RUN, dataset_id=DATASET,
        on_rejected=lambda c, e: rejected.append((c, e.reason)))
    assert chosen == candidate(older)
    assert manifest.step == 10
    assert fell_back == 1
    assert rejected == [(candidate(newer), "shard_checksum")]

    # The good newest one is taken first, with no fallback and no rejection.
    rejected.clear()
    chosen, _, fell_back = choose([candidate(older)], Comm.single(), run_id=RUN,
                                  dataset_id=DATASET,
                                  on_rejected=lambda c, e: rejected.append((c, e.reason)))
    assert (chosen, fell_back, rejected) == (candidate(older), 0, [])


def test_choose_with_nothing_usable(tmp_path: Path) -> None:
    model, state = support.small_state()
    a = write(CheckpointDir(str(tmp_path), RUN, 1, 10), state, required=model_keys(model))
    b = write(CheckpointDir(str(tmp_path), RUN, 1, 20), state, required=model_keys(model))
    os.remove(a.manifest_url)
    os.truncate(b.ckdir.file("__0_0.distcp"), 10)
    rejected: list[str] = []
    with pytest.raises(NoUsableCheckpoint):
        choose([candidate(b), candidate(a)], Comm.single(), run_id=RUN, dataset_id=DATASET,
               on_rejected=lambda c, e: rejected.append(e.reason))
    assert rejected == ["shard_size", "manifest_missing"]
    with pytest.raises(NoUsableCheckpoint):
        choose([], Comm.single(), run_id=RUN, dataset_id=DATASET,
               on_rejected=lambda c, e: None)
