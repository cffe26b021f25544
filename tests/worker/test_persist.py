"""Async checkpointing (worker.persist): immutable staged copies and the bounded
background writer, with real files and real threads."""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.worker.support import RUN, candidate, make_model, model_keys, write
from worker import storage
from worker.comm import Comm
from worker.layout import CheckpointDir, run_dir
from worker.manifest import digest
from worker.persist import Persister, Staged, StagingPool, nbytes, stage
from worker.restore import Candidate, load, verify

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


@pytest.fixture
def persister() -> Iterator[Callable[[int], Persister]]:
    made: list[Persister] = []

    def make(backlog: int) -> Persister:
        p = Persister(backlog)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def _wait(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


# -- stage -------------------------------------------------------------------------------

def test_staged_parameters_do_not_see_later_in_place_updates(tmp_path: Path) -> None:
    model = make_model(seed=3)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    staged = stage({"model": model.state_dict()})
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the next optimizer step, in place
    assert all(not torch.equal(v, before[k]) for k, v in model.state_dict().items())
    for k, v in staged["model"].items():
        assert torch.equal(v, before[k]), k

    w = write(CheckpointDir(str(tmp_path), RUN, 1, 1), staged, required=model_keys(model))
    fresh = make_model(seed=99)
    template = {"model": fresh.state_dict()}
    load(candidate(w), template, Comm.single())
    fresh.load_state_dict(template["model"])
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, before[k]), k
        assert not torch.equal(v, model.state_dict()[k]), k


class _Box:
    def __init__(self, items: list[int]) -> None:
        self.items = items


def test_stage_copies_nested_containers_and_plain_values_deeply() -> None:
    t1 = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t2 = nn.Parameter(torch.ones(4))
    view = torch.arange(20.0)[5:9]  # a view into a larger storage
    box = _Box([1, 2])
    value: dict[str, Any] = {
        "a": [t1, {"b": (t2, 3, "s", [7, 8])}],
        "plain": {"x": [1, 2], "y": None, "z": 1.5},
        "box": box,
        "view": view,
    }
    staged = stage(value)

    assert isinstance(staged["a"], list) and isinstance(staged["a"][1]["b"], tuple)
    assert staged["a"][1]["b"][1:3] == (3, "s")
    s1, s2 = staged["a"][0], staged["a"][1]["b"][0]
    assert torch.equal(s1, t1) and torch.equal(s2, t2.detach())
    assert not s2.requires_grad
    for orig, copy in ((t1, s1), (t2, s2), (view, staged["view"])):
        assert copy.device.type == "cpu"
        assert copy.untyped_storage().data_ptr() != orig.untyped_storage().data_ptr()
    assert staged["view"].untyped_storage().nbytes() == 4 * 4  # not the whole base storage
    assert nbytes(staged) == (6 + 4 + 4) * 4

    # Mutate everything in the original; the staged copy keeps its values.
    t1.add_(10)
    with torch.no_grad():
        t2.mul_(5)
    view.zero_()
    value["a"][1]["b"][3].append(9)
    value["plain"]["x"].append(3)
    value["plain"]["y"] = "changed"
    box.items.append(3)
    value["a"].append("new")

    assert torch.equal(s1, torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert torch.equal(s2, torch.ones(4))
    assert torch.equal(staged["view"], torch.arange(5.0, 9.0))
    assert staged["a"][1]["b"][3] == [7, 8]
    assert staged["plain"] == {"x": [1, 2], "y": None, "z": 1.5}
    assert staged["box"] is not box and staged["box"].items == [1, 2]
    assert len(staged["a"]) == 2


# -- StagingPool -------------------------------------------------------------------------

def _ptrs(staged: Staged) -> list[int]:
    return [t.untyped_storage().data_ptr() for t in (staged.value["w"], staged.value["b"][0])]


def test_pool_reuses_released_buffers_and_copies_the_new_values() -> None:
    pool = StagingPool(keep=2)
    w, b = torch.arange(12.0).reshape(3, 4), torch.ones(5, dtype=torch.float64)
    first = pool.stage({"w": w, "b": [b, "meta"], "step": 7})
    ptrs = _ptrs(first)
    assert torch.equal(first.value["w"], w) and first.value["step"] == 7
    pool.release(first)
    assert first.value is None and pool.free == 1  # the caller's handle is spent

    w.mul_(-1)
    b.add_(2)
    second = pool.stage({"w": w, "b": [b, "meta"], "step": 8})
    assert _ptrs(second) == ptrs  # same host memory, no fresh allocation
    assert torch.equal(second.value["w"], w) and torch.equal(second.value["b"][0], b)
    assert second.value["b"][1] == "meta" and second.value["step"] == 8
    w.zero_()  # training moves on: the staged copy does not
    assert torch.equal(second.value["w"], -torch.arange(12.0).reshape(3, 4))


def test_pool_never_hands_out_a_copy_still_being_written() -> None:
    pool = StagingPool(keep=2)
    state = {"w": torch.zeros(3, 4), "b": [torch.zeros(5)]}
    busy = pool.stage(state)
    state["w"].fill_(1.0)
    other = pool.stage(state)  # the first is not released: its write is still running
    assert set(_ptrs(busy)).isdisjoint(_ptrs(other))
    assert torch.equal(busy.value["w"], torch.zeros(3, 4))
    assert torch.equal(other.value["w"], torch.ones(3, 4))
    held = [_ptrs(busy), _ptrs(other)]
    pool.release(busy)
    pool.release(other)
    third = pool.stage({"w": torch.zeros(3, 4), "b": [torch.zeros(5)], "extra": 1})
    assert _ptrs(third) in held  # a released slot, not a new allocation
    assert pool.free == 1  # keep=2: one was taken, one is still free


def test_pool_gives_fresh_buffers_to_a_state_of_another_shape() -> None:
    pool = StagingPool(keep=1)
    first = pool.stage({"w": torch.zeros(3, 4), "b": [torch.zeros(5)]})
    ptrs = _ptrs(first)
    pool.release(first)
    wider = {"w": torch.ones(3, 8), "b": [torch.ones(5)]}
    second = pool.stage(wider)
    assert second.value["w"].shape == (3, 8) and torch.equal(second.value["w"], wider["w"])
    assert pool.free == 0  # the old slot no longer fits and is dropped
    pool.release(second)
    half = pool.stage({"w": torch.zeros(3, 8, dtype=torch.float16), "b": [torch.zeros(5)]})
    assert half.value["w"].dtype == torch.float16  # dtype is part of the match
    assert set(_ptrs(half)).isdisjoint(ptrs)


def test_pool_keeps_the_stage_contract_for_nested_and_odd_values() -> None:
    """What ``stage`` promises (deep copies, detached, no shared storage) holds pooled."""
    t2 = nn.Parameter(torch.ones(4))
    view = torch.arange(20.0)[5:9]
    sparse = torch.eye(3).to_sparse()
    value: dict[str, Any] = {"a": [t2, {"b": (view, 3, [7, 8])}], "sparse": sparse,
                             "box": _Box([1])}
    pool = StagingPool(keep=1)
    for _ in range(2):  # fresh, then reused buffers
        staged = pool.stage(value)
        s2, sv = staged.value["a"][0], staged.value["a"][1]["b"][0]
        assert not s2.requires_grad and torch.equal(s2, t2.detach())
        assert sv.untyped_storage().nbytes() == 16 and torch.equal(sv, view)
        assert torch.equal(staged.value["sparse"].to_dense(), torch.eye(3))
        value["box"].items.append(2)
        value["a"][1]["b"][2].append(9)
        assert staged.value["box"].items == [1] and staged.value["a"][1]["b"][2] == [7, 8]
        value["box"].items, value["a"][1]["b"] = [1], (view, 3, [7, 8])
        pool.release(staged)


def test_persister_returns_a_written_copy_to_its_pool_and_reuses_it(
        persister: Callable[[int], Persister]) -> None:
    p = persister(1)
    state = {"w": torch.arange(1000.0), "b": [torch.zeros(2)]}
    seen: list[float] = []
    first = p.staging.stage(state)
    ptrs = _ptrs(first)
    p.submit(lambda s=first.value: seen.append(float(s["w"].sum())), first)
    p.drain()
    assert p.staging.free == 1
    state["w"].add_(1)
    second = p.staging.stage(state)
    assert _ptrs(second) == ptrs
    p.submit(lambda s=second.value: seen.append(float(s["w"].sum())), second)
    p.drain()
    assert seen == [499500.0, 500500.0]


def test_jobs_dropped_after_a_failure_give_their_buffers_back(
        persister: Callable[[int], Persister]) -> None:
    p = persister(3)
    gate = threading.Event()

    def failing() -> None:
        gate.wait(10)
        raise OSError("disk full")

    a = p.staging.stage({"w": torch.zeros(4)})
    b = p.staging.stage({"w": torch.zeros(4)})
    p.submit(failing, a)
    p.submit(lambda: None, b)  # queued behind the failure: never runs
    gate.set()
    with pytest.raises(OSError, match="disk full"):
        p.drain()
    assert p.staging.free == 2 and a.value is None and b.value is None


# -- Persister ---------------------------------------------------------------------------

def test_backlog_bounds_pending_and_wait_for_room_blocks(
        persister: Callable[[int], Persister]) -> None:
    p = persister(2)
    ran: list[int] = []
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(p.pending)
            time.sleep(0.002)

    def job(i: int) -> Callable[[], None]:
        def run() -> None:
            time.sleep(0.2)  # injected storage latency
            ran.append(i)
        return run

    sampler = threading.Thread(target=sample)
    sampler.start()
    waits: list[float] = []
    try:
        for i in range(6):
            t0 = time.monotonic()
            p.wait_for_room()
            waits.append(time.monotonic() - t0)
            assert p.pending < 2
            p.submit(job(i))
        p.drain()
    finally:
        stop.set()
        sampler.join()

    assert ran == list(range(6))  # in submission order
    assert p.pending == 0
    assert len(samples) > 50
    assert max(samples) == 2  # the backlog was used, and never exceeded
    assert waits[0] < 0.15 and waits[1] < 0.15  # room at first
    assert all(w >= 0.1 for w in waits[2:]), waits  # then it waited for a job to finish


@pytest.mark.parametrize("surface", ["check", "submit", "drain", "wait_for_room"])
def test_a_failed_job_is_raised_on_the_callers_thread_and_drops_the_queue(
        persister: Callable[[int], Persister], surface: str) -> None:
    p = persister(10)
    gate = threading.Event()
    ran: list[str] = []
    boom = RuntimeError("disk on fire")
    threads: list[str] = []

    def first() -> None:
        gate.wait(10)
        ran.append("first")

    def failing() -> None:
        threads.append(threading.current_thread().name)
        raise boom

    p.submit(first)
    p.submit(failing)
    p.submit(lambda: ran.append("after-1"))
    p.submit(lambda: ran.append("after-2"))
    assert p.pending == 4
    gate.set()
    if surface != "drain":
        _wait(lambda: p.pending == 0)
    late: list[str] = []
    with pytest.raises(RuntimeError) as info:
        if surface == "check":
            p.check()
        elif surface == "submit":
            p.submit(lambda: late.append("late"))
        elif surface == "drain":
            p.drain()
        else:
            p.wait_for_room()
    assert info.value is boom
    assert threads == ["rl-persist"]  # it ran in the background, was raised here
    assert ran == ["first"]  # the queued jobs after it were dropped
    assert p.pending == 0

    # Raised once; the writer keeps working for later saves.
    p.check()
    p.submit(lambda: ran.append("later"))
    p.drain()
    assert ran == ["first", "later"]
    assert late == []


def test_close_finishes_queued_jobs(persister: Callable[[int], Persister]) -> None:
    p = persister(5)
    ran: list[int] = []
    def job(i: int) -> Callable[[], None]:
        def run() -> None:
            time.sleep(0.02)
            ran.append(i)
        return run

    for i in range(3):
        p.submit(job(i))
    p.close()
    assert ran == [0, 1, 2]


def test_a_finished_jobs_staged_copy_is_released(persister: Callable[[int], Persister]) -> None:
    p = persister(2)
    staged = stage({"w": torch.zeros(1000)})
    ref = weakref.ref(staged["w"])

    def job(state: dict[str, Any] = staged) -> None:
        assert state["w"].numel() == 1000

    p.submit(job)
    del staged, job
    p.drain()
    assert p.pending == 0
    gc.collect()
    assert ref() is None


# -- memory over many async saves --------------------------------------------------------

def _rss() -> int:
    gc.collect()
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1])
    return resident * os.sysconf("SC_PAGE_SIZE")


def test_host_memory_stays_bounded_over_50_async_saves(
        tmp_path: Path, persister: Callable[[int], Persister]) -> None:
    torch.manual_seed(0)
    model = nn.Linear(1000, 1000)  # ~4 MB of parameters
    copy_bytes = nbytes(model.state_dict())
    assert 3.9e6 < copy_bytes < 4.1e6
    keys = model_keys(model)
    root = str(tmp_path)
    p = persister(2)
    rss: dict[int, int] = {}
    durable: list[int] = []

    def job(step: int, state: dict[str, Any]) -> Callable[[], None]:
        def run() -> None:
            write(CheckpointDir(root, RUN, 1, step), state, required=keys)
            durable.append(step)
            for name in storage.list_names(f"{run_dir(root, RUN)}/g000001"):
                old = int(name.removeprefix("step-"))
                if old < step:
                    storage.remove_tree(f"{run_dir(root, RUN)}/g000001/{name}")
        return run

    for step in range(1, 51):
        with torch.no_grad():
            model.weight.add_(0.001)  # training moves on
        p.wait_for_room()
        staged = p.staging.stage({"model": model.state_dict()})  # as the session stages
        p.submit(job(step, staged.value), staged)
        del staged
        assert p.pending <= 2
        if step in (10, 50):
            p.drain()
            rss[step] = _rss()

    assert durable == list(range(1, 51))
    assert os.listdir(f"{run_dir(root, RUN)}/g000001") == ["step-0000000050"]
    growth = rss[50] - rss[10]
    assert growth < 3 * copy_bytes + 20 * (1 << 20), f"RSS grew {growth / 2**20:.1f} MiB"

    # The last one is a good checkpoint of the final weights.
    last = CheckpointDir(root, RUN, 1, 50)
    c = Candidate(50, last.manifest_url, digest(Path(last.manifest_url).read_bytes()))
    assert verify(c, Comm.single(), run_id=RUN, dataset_id=None).step == 50
    template = {"model": nn.Linear(1000, 1000).state_dict()}
    load(c, template, Comm.single())
    assert torch.equal(template["model"]["weight"], model.weight.detach())
