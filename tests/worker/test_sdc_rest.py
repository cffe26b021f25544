"""A parameter corrupted at rest, between steps, in a real 2-process gloo group with DDP:
the session's SDC path (``watch_consumed`` before the update, ``detect`` after it) raises
the suspicion, a replay from the last checkpoint recomputes the step, and the
controller's verdict (``controller.sdc_verdict.classify``) blames the flipped rank.

Why this needs the consumed state: rank 1's corrupted parameter fed its forward, DDP
averaged the gradient that came of it into rank 0 too, so after the update neither
rank holds what the clean replay recomputes, and what each rank *held* names nobody.
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from controller.sdc_verdict import NONDETERMINISTIC, TRANSIENT, classify
from events.fold_sdc import suspicion_of
from events.sdc import CorruptionSuspected, StepReplayed
from events.sdcenv import SdcEnv, SdcReplay
from tests.worker.support import run_ranks
from tests.worker.test_sdc import Recorder
from worker.bitflip import Injector, flip_bit
from worker.comm import Comm
from worker.errors import CorruptionDetected
from worker.faults import Faults, parse
from worker.sdc import Detectors
from worker.sdcstep import detect, watch_consumed

WORLD = 2
SUSPECT = 5  # the step that consumes the corrupted parameter
CHECKPOINT = 4  # the in-memory checkpoint the replay restores
# fp32 bit 30 is the exponent's top bit: a weight of magnitude ~0.1 becomes ~1e37. In
# the output layer (no tanh after it to saturate) rank 1's squared error overflows
# before any gradient is reduced.
EXPONENT_TOP = 30
# What each scenario injects, and the detectors it runs: "fault" flips a parameter bit
# through RUNLEDGER_FAULT's when=rest; "exponent*" flips EXPONENT_TOP of an output
# weight on rank 1 by hand, with the spec's `sdc: {}` (nonfinite alone) and with
# agreement every step.
SCENARIOS = {"fault": SdcEnv(agreement_every=1), "exponent": SdcEnv(),
             "exponent+agreement": SdcEnv(agreement_every=1)}


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)  # identical replicas
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
    ddp = DistributedDataParallel(model)
    return ddp, torch.optim.AdamW(ddp.parameters(), lr=1e-2)


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int,
                rank: int) -> float:
    gen = torch.Generator().manual_seed(step * WORLD + rank)  # each rank its own batch
    x = torch.randn(4, 8, generator=gen)
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), x.flip(1))
    loss.backward()
    opt.step()
    return float(loss.detach())


def _generation(rank: int, model: torch.nn.Module, opt: torch.optim.Optimizer,
                detectors: Detectors, steps: range, current: list[int],
                between: Any = None) -> tuple[list[Any], int | None]:
    """Train ``steps`` as ``Session.step`` checks them (``current[0]``: the step the hooks
    see); what rank 0 would report, and the step every rank stopped at (None: none)."""
    watch_consumed(detectors, model, opt, lambda: current[0])
    control, rec = Comm.new_group(), Recorder()
    for step in steps:
        current[0] = step
        if between is not None:
            between(step)
        loss = _train_step(model, opt, step, rank)
        try:
            detect(detectors, model, opt, rec, control, coordinator=rank == 0, step=step,
                   loss=loss)
        except CorruptionDetected:
            detectors.watch.remove()
            return rec.events, step
    detectors.watch.remove()
    return rec.events, None


def _rank(rank: int, world: int, port: int, out: str) -> None:
    for mode, env in SCENARIOS.items():
        _scenario(rank, world, out, mode, env)


def _scenario(rank: int, world: int, out: str, mode: str, env: SdcEnv) -> None:
    """Generation 1 trains until the detectors stop it; generation 2 restores the
    checkpoint at CHECKPOINT and replays the suspect step with what generation 1 held."""
    model, opt = _model()
    gather = Comm.new_group().all_gather
    node = f"node{rank}"
    snapshot: dict[str, Any] = {}
    faults = Faults(parse(f"bitflip@{SUSPECT}:rank=1:gen=1:when=rest:seed=3")
                    if mode == "fault" else None, rank, 1, node=node)
    current = [1]
    injector = Injector(faults, lambda: current[0])
    injector.install(model, opt)

    def between(step: int) -> None:
        if step == CHECKPOINT + 1:
            snapshot["model"] = copy.deepcopy(model.state_dict())
            snapshot["opt"] = copy.deepcopy(opt.state_dict())
        if mode.startswith("exponent") and step == SUSPECT and rank == 1:
            weight = list(model.parameters())[2]  # the output layer's weight, at rest
            flip_bit(weight.data, 0, EXPONENT_TOP)

    first = Detectors(env, None, rank=rank, world_size=world, node=node, gather=gather)
    events, stopped = _generation(rank, model, opt, first, range(1, SUSPECT + 2), current,
                                  between)
    assert stopped == SUSPECT, f"generation 1 stopped at {stopped}"
    held = [events[0] if rank == 0 else None]
    dist.broadcast_object_list(held)
    s: CorruptionSuspected = held[0]
    # Generation 2: the restart restores the checkpoint and replays the suspect step,
    # where the one-off fault (gen=1) no longer fires.
    injector.faults = Faults(faults.fault, rank, 2, node=node)
    model.load_state_dict(snapshot["model"])
    opt.load_state_dict(snapshot["opt"])
    replay = SdcReplay(step=s.step, generation=1, fingerprints=s.fingerprints, ranks=s.ranks)
    second = Detectors(env, replay, rank=rank, world_size=world, node=node, gather=gather)
    replayed, again = _generation(rank, model, opt, second, range(CHECKPOINT + 1, SUSPECT + 1),
                                  current)
    assert again is None, "the replay found corruption again"
    if rank == 0:
        Path(out, f"{mode}.pkl").write_bytes(pickle.dumps((s, replayed[0])))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, ...]]:
    where = tmp_path_factory.mktemp("rest")
    run_ranks(_rank, WORLD, (str(where),), timeout=300)
    return {mode: pickle.loads((where / f"{mode}.pkl").read_bytes()) for mode in SCENARIOS}


def test_a_parameter_flipped_at_rest_is_transient_on_the_flipped_rank(
        runs: dict[str, tuple[Any, ...]]) -> None:
    s, r = runs["fault"]
    assert isinstance(s, CorruptionSuspected) and isinstance(r, StepReplayed)
    assert (s.step, s.detector, r.step) == (SUSPECT, "agreement", SUSPECT)
    # Rank 1 consumed other state than rank 0, and than its own recomputation.
    assert s.consumed[0] == r.consumed[0] == r.consumed[1] != s.consumed[1]
    # After the update neither rank held the clean state: the averaged gradient carried
    # rank 1's corruption into rank 0, which is why what they held blames no rank.
    assert r.fingerprints[0] == r.fingerprints[1]
    assert r.fingerprints[0] not in s.fingerprints
    blind = classify(suspicion_of(replace(s, consumed=())), r)
    assert (blind.verdict, blind.ranks) == (NONDETERMINISTIC, ())
    v = classify(suspicion_of(s), r)
    assert (v.verdict, v.ranks, v.nodes) == (TRANSIENT, (1,), ("node1",)), v.detail
    assert "consumed" in v.detail


def test_a_non_finite_catch_names_the_rank_whose_own_loss_went_non_finite(
        runs: dict[str, tuple[Any, ...]]) -> None:
    s, r = runs["exponent"]
    # Rank 1's own loss overflowed; the gradient norm after the all-reduce is every
    # rank's, so it says nothing about which rank.
    assert (s.detector, s.ranks, s.part) == ("nonfinite", (1,), "loss"), s.detail
    assert "rank 1: loss=inf" in s.detail and "first non-finite: loss on ranks [1]" in s.detail
    assert s.consumed == ()  # agreement is off: the suspect step took no fingerprints
    v = classify(suspicion_of(s), r)
    assert (v.verdict, v.ranks, v.nodes) == (TRANSIENT, (1,), ("node1",)), v.detail


def test_with_agreement_the_same_flip_is_transient_on_the_rank_that_consumed_it(
        runs: dict[str, tuple[Any, ...]]) -> None:
    s, r = runs["exponent+agreement"]
    # Agreement sees the flipped weight first and cannot break the tie of two replicas.
    assert (s.detector, s.ranks) == ("agreement", (0, 1)), s.detail
    assert s.consumed[0] == r.consumed[1] != s.consumed[1]
    v = classify(suspicion_of(s), r)
    assert (v.verdict, v.ranks, v.nodes) == (TRANSIENT, (1,), ("node1",)), v.detail
