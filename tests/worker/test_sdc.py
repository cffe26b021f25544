"""worker/sdc.py and worker/sdcstep.py: fingerprints that no single-bit flip escapes, the
spike baseline, the majority rule, and what a finding puts on the log.

The detectors across real processes are tests/worker/test_sdc_campaign.py.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from events.base import Event, Header
from events.sdc import CorruptionSuspected, StepReplayed
from events.sdcenv import SDC, SdcEnv, SdcReplay
from worker.bitflip import flip_bit
from worker.comm import Comm
from worker.errors import EXIT_CORRUPTION, CorruptionDetected, NonFiniteState, WorkerError
from worker.sdc import (
    Checked,
    Detectors,
    Row,
    Spike,
    consumed_parts,
    decide,
    deviating,
    fingerprint_hex,
    fingerprints,
    from_environ,
    full_digest,
    state_parts,
)
from worker.sdcstep import detect, watch_consumed

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
          torch.int32, torch.uint8, torch.bool]


@settings(max_examples=300, deadline=None)
@given(dtype=st.sampled_from(DTYPES), n=st.integers(1, 9), data=st.data())
def test_every_single_bit_flip_changes_the_fingerprint_and_the_digest(
        dtype: torch.dtype, n: int, data: st.DataObject) -> None:
    torch.manual_seed(n)
    t = (torch.randn(n) * 100).to(dtype) if dtype != torch.bool else torch.rand(n) > 0.5
    element = data.draw(st.integers(0, n - 1))
    bit = data.draw(st.integers(0, t.element_size() * 8 - 1))
    if dtype == torch.bool:
        bit = 0  # a bool keeps 0 or 1 in its byte; any other bit is not a bool
    before, digest = fingerprints([("t", t)]), full_digest([("t", t)])
    flip_bit(t, element, bit)
    assert not torch.equal(fingerprints([("t", t)]), before)
    assert full_digest([("t", t)]) != digest
    flip_bit(t, element, bit)
    assert torch.equal(fingerprints([("t", t)]), before)


@given(st.integers(0, 7), st.integers(1, 40), st.data())
def test_a_view_at_any_byte_offset_is_summed_and_every_flip_changes_it(
        offset: int, n: int, data: st.DataObject) -> None:
    # A half-precision view that starts off an 8-byte boundary and ends mid-word:
    # the int64 words are read from a copy, the leftover bytes one by one.
    base = torch.randn(offset + n).to(torch.float16)
    view = base[offset:]
    element = data.draw(st.integers(0, n - 1))
    bit = data.draw(st.integers(0, 15))
    before = fingerprints([("v", view)])
    assert torch.equal(before, fingerprints([("v", view.clone())]))
    flip_bit(view, element, bit)
    assert not torch.equal(fingerprints([("v", view)]), before)


def test_a_zero_dim_tensor_is_one_element_and_fingerprints_are_int64() -> None:
    step = torch.tensor(3.0)
    vector = fingerprints([("s", step), ("w", torch.ones(2, 2))])
    assert vector.dtype == torch.int64 and vector.shape == (2,)
    flip_bit(step, 0, 31)
    assert step.item() == -3.0  # the sign bit of a float32
    assert fingerprints([("s", step)])[0] != vector[0]
    assert len(fingerprint_hex(vector)) == 16
    assert fingerprint_hex(vector) != fingerprint_hex(fingerprints([("s", step)]))


def _trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    return model, opt


def test_state_parts_are_named_and_ordered_params_grads_optimizer_state() -> None:
    model, opt = _trained()
    names = [n for n, _ in state_parts(model, opt, grads=True, optimizer_state=True)]
    params = ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert names[:4] == [f"param:{p}" for p in params]
    assert names[4:8] == [f"grad:{p}" for p in params]
    assert names[8:11] == ["optim:0.weight.exp_avg", "optim:0.weight.exp_avg_sq",
                           "optim:0.weight.step"]
    assert len(names) == 4 + 4 + 4 * 3
    bare = [n for n, _ in state_parts(model, opt, grads=False, optimizer_state=False)]
    assert bare == names[:4]


def test_spike_needs_its_warmup_and_ignores_noise_and_non_finite_values() -> None:
    spike = Spike(sigma=6.0, window=8, warmup=4)
    assert spike.observe("loss", 100.0) == ""  # warmup: nothing is a spike yet
    for v in (2.0, 2.1, 1.9, 2.05, 1.95):
        assert spike.observe("loss", v) == ""
    assert spike.observe("loss", float("nan")) == ""
    out = spike.observe("loss", 50.0)
    assert out.startswith("loss 50 >") and "MAD" in out
    assert spike.observe("loss", 2.2) == ""  # the spike never joined the window
    assert 50.0 not in spike.values and len(spike.values) == 7
    flat = Spike(sigma=3.0, window=4, warmup=2)
    for _ in range(4):
        assert flat.observe("g", 1.0) == ""
    assert flat.observe("g", 1.0 + 1e-9) == ""  # MAD 0 is not a hair trigger
    assert Spike(sigma=0.0, window=4, warmup=0).observe("g", 1e30) == ""  # off


@pytest.mark.parametrize(("keys", "ranks"), [
    (["a", "a"], ()), (["a", "b"], (0, 1)), (["a", "a", "b"], (2,)), (["b", "a", "a"], (0,)),
    (["a", "b", "c"], (0, 1, 2)), (["a", "a", "b", "b"], (0, 1, 2, 3)),
    (["a", "a", "a", "b", "c"], (3, 4)),
])
def test_deviating_ranks_are_the_minority_and_a_tie_lists_every_rank(
        keys: list[str], ranks: tuple[int, ...]) -> None:
    assert deviating(keys) == ranks


def _row(vector: tuple[int, ...] | None = (1, 2, 3), digest: str | None = None,
         nonfinite: str = "", spike: str = "", node: str = "n", at: str = "") -> Row:
    return Row(vector, digest, nonfinite, spike, node, nonfinite_at=at)


def test_decide_applies_its_rules_in_order() -> None:
    names = ["param:a", "grad:a", "optim:a.exp_avg"]
    assert decide([_row(), _row()], names) is None
    split = decide([_row(node="n0"), _row((1, 9, 9), nonfinite="loss=nan", node="n1"),
                    _row(node="n2")], names)
    assert split is not None and split.detector == "agreement"  # rule 1 before rule 3
    assert (split.ranks, split.part, split.nodes) == ((1,), "grad:a", ("n0", "n1", "n2"))
    assert "2 of 3 parts differ" in split.detail
    assert split.fingerprints[0] == split.fingerprints[2] != split.fingerprints[1]
    digest = decide([_row(None, "aa"), _row(None, "bb")], names)
    assert digest is not None and (digest.detector, digest.ranks) == ("digest", (0, 1))
    assert digest.fingerprints == ("", "")
    nan = decide([_row(nonfinite="loss=nan"), _row(nonfinite="loss=nan")], names)
    assert nan is not None and (nan.detector, nan.ranks) == ("nonfinite", ())  # every rank
    spiked = decide([_row(), _row(spike="grad_norm 9 > 2")], names)
    assert spiked is not None and (spiked.detector, spiked.ranks) == ("spike", (1,))
    assert spiked.detail == "rank 1: grad_norm 9 > 2"
    uneven = decide([_row((1, 2, 3)), _row((1, 2))], names)
    assert uneven is not None and uneven.part == "part count [3, 2]"


@pytest.mark.parametrize(("stages", "ranks", "part"), [
    # Rank 1's own loss first; the all-reduced gradient norm is every rank's after it.
    (["grad_norm", "loss", "grad_norm"], (1,), "loss"),
    (["loss", "loss", "grad_norm"], (0, 1), "loss"),
    (["grad_norm", "grad_norm"], (), "grad_norm"),  # no rank went first: every rank
    (["", "grad_norm", ""], (1,), "grad_norm"),
    (["loss", "loss"], (), "loss"),
])
def test_a_non_finite_finding_names_the_ranks_at_the_earliest_stage(
        stages: list[str], ranks: tuple[int, ...], part: str) -> None:
    rows = [_row(nonfinite="loss=nan; grad_norm=nan" if at == "loss" else
                 f"{at}=inf" if at else "", at=at) for at in stages]
    found = decide(rows, ["param:a"])
    assert found is not None and (found.detector, found.ranks, found.part) == (
        "nonfinite", ranks, part)
    assert ("first non-finite" in found.detail) == bool(ranks)
    # A row that says what is not finite but not where counts after every stage.
    unsaid = decide([_row(nonfinite="x=nan"), _row(nonfinite="loss=nan", at="loss")],
                    ["param:a"])
    assert unsaid is not None and (unsaid.ranks, unsaid.part) == ((1,), "loss")


def test_the_state_a_step_consumed_travels_in_its_row_on_fingerprinted_steps() -> None:
    ex = Exchange(2)
    out: list[list[Checked]] = [[], []]
    w = torch.ones(4)
    before = [[("param:w", w)], [("param:w", w.clone())]]
    flip_bit(before[1][0][1], 2, 7)  # rank 1's parameter changed at rest

    def rank(r: int) -> None:
        d = Detectors(SdcEnv(agreement_every=2), None, rank=r, world_size=2, node=f"n{r}",
                      gather=ex.gather(r))
        for step in (1, 2):
            assert d.fingerprinted(step) == (step == 2)
            d.before_update(step, before[r])
            out[r].append(d.check(step, 1.0, [("param:w", w)], None))

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    (skipped, taken), other = out
    assert other == out[0] and skipped.consumed == ("", "")
    assert taken.consumed == (fingerprint_hex(fingerprints(before[0])),
                              fingerprint_hex(fingerprints(before[1])))
    assert taken.consumed[0] != taken.consumed[1] and taken.finding is None


class Exchange:
    """An all-gather between threads: what ``Comm.all_gather`` does between processes."""

    def __init__(self, n: int) -> None:
        self.box: list[Any] = [None] * n
        self.barrier = threading.Barrier(n)

    def gather(self, rank: int) -> Any:
        def all_gather(obj: Any) -> list[Any]:
            self.box[rank] = obj
            self.barrier.wait(30)
            out = list(self.box)
            self.barrier.wait(30)
            return out
        return all_gather


def _two_ranks(env: SdcEnv, steps: list[tuple[int, float, list[Any]]],
               replay: SdcReplay | None = None) -> list[list[Checked]]:
    """Run ``Detectors.check`` on two threads; ``steps``: (step, loss, parts per rank)."""
    ex = Exchange(2)
    out: list[list[Checked]] = [[], []]

    def rank(r: int) -> None:
        d = Detectors(env, replay, rank=r, world_size=2, node=f"node{r}", gather=ex.gather(r))
        for step, loss, parts in steps:
            out[r].append(d.check(step, loss, parts[r], None))

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_two_ranks_get_the_same_finding_at_the_flipped_step_only() -> None:
    a, b = torch.arange(6, dtype=torch.float32), torch.arange(6, dtype=torch.float32)
    flipped = b.clone()
    flip_bit(flipped, 4, 3)
    same = [[("param:w", a)], [("param:w", b)]]
    steps = [(1, 1.0, same), (2, 1.0, [[("param:w", a)], [("param:w", flipped)]]),
             (3, 1.0, same), (4, math.inf, same)]
    env = SdcEnv(agreement_every=2)
    r0, r1 = _two_ranks(env, steps)
    assert r0 == r1
    assert r0[0].finding is None and r0[0].fingerprints == ("", "")  # not an agreement step
    found = r0[1].finding
    assert found is not None and (found.detector, found.ranks, found.part) == (
        "agreement", (0, 1), "param:w")
    assert found.nodes == ("node0", "node1")
    assert r0[2].finding is None
    late = r0[3].finding  # a nonfinite loss on a step that took no fingerprints
    assert late is not None and late.detector == "nonfinite" and all(late.fingerprints)


def test_the_replay_step_is_fingerprinted_even_when_agreement_is_off() -> None:
    t = torch.ones(3)
    steps = [(6, 1.0, [[("param:w", t)], [("param:w", t)]]),
             (7, 1.0, [[("param:w", t)], [("param:w", t)]])]
    replay = SdcReplay(step=7, generation=2, fingerprints=("x", "y"), ranks=(1,))
    r0, _ = _two_ranks(SdcEnv(), steps, replay)
    assert not r0[0].replayed and r0[0].fingerprints == ("", "")
    assert r0[1].replayed and r0[1].finding is None
    assert r0[1].fingerprints == (fingerprint_hex(fingerprints([("param:w", t)])),) * 2


class Recorder:
    """Stands in for ``worker.reporter.Reporter``: keeps what would go to the log."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.flushed = 0

    def header(self, key: str, causation_id: str | None = None) -> Header:
        return Header(event_id=key, run_id="r1", generation=2, occurred_at=0,
                      producer="worker/0", causation_id=causation_id)

    def report(self, event: Event) -> None:
        self.events.append(event)

    def flush(self, timeout_s: float = 30.0) -> None:
        self.flushed += 1


def test_detect_reports_the_replay_then_the_suspicion_and_stops_with_exit_87() -> None:
    model, opt = _trained()
    replay = SdcReplay(step=5, generation=1, fingerprints=("x",))
    detectors = Detectors(SdcEnv(), replay, rank=0, world_size=1, node="n0",
                          gather=Comm.single().all_gather)
    rec = Recorder()
    detect(detectors, model, opt, rec, Comm.single(), coordinator=True, step=4, loss=1.0)
    assert rec.events == []
    with pytest.raises(CorruptionDetected) as err:
        detect(detectors, model, opt, rec, Comm.single(), coordinator=True, step=5,
               loss=float("nan"))
    assert err.value.exit_code == EXIT_CORRUPTION == 87 and "nonfinite" in str(err.value)
    replayed, suspected = rec.events
    assert isinstance(replayed, StepReplayed) and replayed.step == 5
    assert replayed.suspected_generation == 1 and len(replayed.fingerprints[0]) == 16
    assert isinstance(suspected, CorruptionSuspected) and suspected.detector == "nonfinite"
    assert suspected.ranks == () and "loss=nan" in suspected.detail and rec.flushed == 1
    assert suspected.part == "loss" and replayed.consumed == suspected.consumed == ()


def test_the_optimizer_hook_fingerprints_what_the_step_consumes_and_reports_it() -> None:
    model, opt = _trained()
    replay = SdcReplay(step=2, generation=1, fingerprints=("x",))
    detectors = Detectors(SdcEnv(), replay, rank=0, world_size=1, node="n0",
                          gather=Comm.single().all_gather)
    watch_consumed(detectors, model, opt, lambda: 2)
    watch_consumed(detectors, model, opt, lambda: 2)  # a second attach replaces the hook
    assert len(opt._optimizer_step_pre_hooks) == 1
    at_rest = fingerprint_hex(fingerprints(consumed_parts(model, opt, optimizer_state=True)))
    model(torch.randn(5, 3)).sum().backward()
    opt.step()  # the hook runs before the update
    after = fingerprint_hex(fingerprints(consumed_parts(model, opt, optimizer_state=True)))
    detectors.watch.remove()
    rec = Recorder()
    detect(detectors, model, opt, rec, Comm.single(), coordinator=True, step=2, loss=1.0)
    (replayed,) = rec.events
    assert isinstance(replayed, StepReplayed) and replayed.consumed == (at_rest,) != (after,)


@pytest.mark.parametrize("loss", [float("nan"), 1e9])
def test_a_replay_that_recomputes_the_same_state_is_the_jobs_own_numerics(loss: float) -> None:
    model, opt = _trained()
    env = SdcEnv(spike_sigma=3.0, spike_warmup=2, spike_window=8)
    parts = state_parts(model, opt, grads=env.grads, optimizer_state=env.optimizer)
    held = (fingerprint_hex(fingerprints(parts)),)  # what the suspect generation held
    detectors = Detectors(env, SdcReplay(step=5, generation=1, fingerprints=held), rank=0,
                          world_size=1, node="n0", gather=Comm.single().all_gather)
    rec = Recorder()
    for step in (1, 2, 3, 4):
        detect(detectors, model, opt, rec, Comm.single(), coordinator=True, step=step,
               loss=1.0 + step / 100)
    if loss != loss:  # NaN again, bit for bit: stop as the job's divergence, exit 86
        with pytest.raises(NonFiniteState) as err:
            detect(detectors, model, opt, rec, Comm.single(), coordinator=True, step=5,
                   loss=loss)
        assert err.value.exit_code == 86 and "numerics diverged" in str(err.value)
    else:  # the same spike again: the job's real spike, training goes on
        detect(detectors, model, opt, rec, Comm.single(), coordinator=True, step=5, loss=loss)
    (replayed,) = rec.events
    assert isinstance(replayed, StepReplayed) and replayed.fingerprints == held


def test_detectors_run_only_when_the_environment_asks() -> None:
    gather = Comm.single().all_gather
    assert from_environ({}, rank=0, world_size=1, node="n", gather=gather) is None
    env = SdcEnv(agreement_every=1, spike_sigma=4.0)
    d = from_environ(env.to_environ(), rank=1, world_size=2, node="n", gather=gather)
    assert d is not None and d.env == env and d.replay is None and d.wants_grad_norm
    assert SDC in env.to_environ()
    with pytest.raises(WorkerError, match="RUNLEDGER_SDC: unknown keys \\['every'\\]"):
        from_environ({SDC: '{"every": 1}'}, rank=0, world_size=1, node="n", gather=gather)
