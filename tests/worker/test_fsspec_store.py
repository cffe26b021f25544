"""The commit protocol through a non-local fsspec store (``memory://``): DCP's
FsspecWriter/Reader, range reads for checksums, write-once manifests."""

from __future__ import annotations

import fsspec
import pytest
import torch

from worker.comm import Comm
from worker.commit import ManifestFields, write_checkpoint
from worker.errors import StorageFault
from worker.faults import Faults
from worker.layout import CheckpointDir
from worker.restore import Candidate, choose, load

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_save_verify_load_through_memory_fsspec() -> None:
    torch.manual_seed(3)
    model = torch.nn.Linear(4, 3)
    state = {"model": {"w": model.weight.detach().clone(), "b": model.bias.detach().clone()}}
    ckdir = CheckpointDir("memory://rl-worker-test", "run-m", 1, 3)
    written = write_checkpoint(ckdir, state, Comm.single(), required_keys=["model.w"],
                               fields=ManifestFields(None, None, {"step": 3}, "v", None),
                               faults=Faults(None, 0, 1), on_shard=lambda _: None)
    fs = fsspec.filesystem("memory")
    assert fs.exists("/rl-worker-test/run-m/g000001/step-0000000003/manifest.json")
    chosen, manifest, fell_back = choose(
        [Candidate(3, written.manifest_url, written.digest)], Comm.single(), run_id="run-m",
        dataset_id=None, on_rejected=lambda c, e: None)
    assert fell_back == 0 and manifest.counters == {"step": 3}
    target = {"model": {"w": torch.zeros(3, 4), "b": torch.zeros(3)}}
    load(chosen, target, Comm.single())
    assert torch.equal(target["model"]["w"], model.weight)
    assert torch.equal(target["model"]["b"], model.bias)
    with pytest.raises(StorageFault):  # the step is written; its manifest is immutable
        write_checkpoint(ckdir, state, Comm.single(), required_keys=["model.w"],
                         fields=ManifestFields(None, None, {}, "v", None),
                         faults=Faults(None, 0, 1), on_shard=lambda _: None)
