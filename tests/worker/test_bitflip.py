"""worker/bitflip.py and the ``bitflip`` point of worker/faults.py: the fault parses (and
its errors name the option), a flip changes exactly one bit, the choice is a function of
(seed, step, rank), and the hooks flip the kind of tensor asked at the step asked.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.bitflip import Injector, choose, flip_bit, kind_parts
from worker.errors import WorkerError
from worker.faults import ENV, Fault, Faults, parse
from worker.sdc import raw_bits


def test_bitflip_parses_with_its_options() -> None:
    assert parse("bitflip@7") == Fault("bitflip", 7)
    assert parse("bitflip@7:rank=1:gen=2:node=gpu-3:target=optim:seed=42") == Fault(
        "bitflip", 7, rank=1, generation=2, target="optim", seed=42, node="gpu-3")
    assert parse("step@3:node=a") == Fault("step", 3, node="a")  # node arms any point
    assert parse("bitflip@4:rank=1:when=rest") == Fault("bitflip", 4, rank=1, when="rest")
    assert parse("bitflip@4:when=step:target=grad") == Fault("bitflip", 4, target="grad")


@pytest.mark.parametrize(("text", "words"), [
    ("bitflip@7:target=weights", "target='weights' is not one of param, grad, optim"),
    ("bitflip@7:seed=x", "unknown option 'seed=x'"),
    ("bitflip@7:seed=", "unknown option 'seed='"),
    ("step@7:target=grad", "unknown option 'target=grad'"),
    ("step@7:seed=1", "unknown option 'seed=1'"),
    ("bitflip@7:node=", "unknown option 'node='"),
    ("bitflip@7:rank=1:rank=2", "option 'rank' given twice"),
    ("bitflip@7:when=idle", "when='idle' is not one of step, rest"),
    ("step@7:when=rest", "unknown option 'when=rest'"),
    ("bitflip@7:target=grad:when=rest", "a gradient is computed afresh by each step"),
    ("bitflip@x", "with a point in"),
])
def test_bitflip_parse_errors_name_the_option(text: str, words: str) -> None:
    with pytest.raises(WorkerError, match=ENV) as err:
        parse(text)
    assert words in str(err.value)


def test_node_limits_where_a_fault_is_armed() -> None:
    fault = Fault("bitflip", 3, node="gpu-1")
    assert Faults(fault, 0, 1, node="gpu-1").armed("bitflip", 3)
    assert not Faults(fault, 0, 1, node="gpu-2").armed("bitflip", 3)
    assert Faults.from_env({ENV: "bitflip@3:node=b"}, 0, 1, node="b").armed("bitflip", 3)


@settings(max_examples=200, deadline=None)
@given(dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]),
       data=st.data())
def test_flip_bit_changes_exactly_one_bit_of_one_element(dtype: torch.dtype,
                                                         data: st.DataObject) -> None:
    t = torch.randn(4, 3).to(dtype)
    width = t.element_size() * 8
    element = data.draw(st.integers(0, 11))
    bit = data.draw(st.integers(0, width - 1))
    original = raw_bits(t).clone()
    before, after = flip_bit(t, element, bit)
    now = raw_bits(t)
    assert int(original[element]) == before and int(now[element]) == after
    changed = (now != original).nonzero().flatten().tolist()
    assert changed == [element]
    xor = (before ^ after) & ((1 << width) - 1)
    assert xor == 1 << bit  # one bit, the one asked


def test_flip_bit_refuses_what_it_cannot_flip() -> None:
    with pytest.raises(WorkerError, match="element 12 bit 0 is outside"):
        flip_bit(torch.zeros(3, 4), 12, 0)
    with pytest.raises(WorkerError, match="bit 32"):
        flip_bit(torch.zeros(3), 0, 32)
    with pytest.raises(WorkerError, match="not contiguous"):
        flip_bit(torch.zeros(3, 4).t(), 0, 0)


def test_choose_is_a_function_of_seed_step_and_rank() -> None:
    parts = [("param:a", torch.zeros(10)), ("param:b", torch.zeros(3, 5)),
             ("param:c", torch.zeros((), dtype=torch.float64))]
    first = choose(parts, seed=1, step=4, rank=0)
    assert choose(parts, seed=1, step=4, rank=0) == first
    picks = [choose(parts, seed=s, step=t, rank=r) for s in range(15) for t in range(10)
             for r in range(2)]
    assert len(set(picks)) > 100  # the three inputs all move the choice
    share = [sum(p[0] == i for p in picks) / len(picks) for i in range(3)]
    assert share[1] > share[0] > share[2] and share[2] < 0.1  # weighted by elements
    for index, element, bit in picks:
        assert element < parts[index][1].numel()
        assert bit < parts[index][1].element_size() * 8
    assert choose([("param:c", torch.zeros((), dtype=torch.float64))], 0, 0, 0)[2] < 64
    with pytest.raises(WorkerError, match="no tensor"):
        choose([("grad:a", torch.zeros(0))], 0, 0, 0)


def _setup() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: list[int],
           box: list[int]) -> None:
    for step in steps:
        box[0] = step
        opt.zero_grad()
        model(torch.ones(3, 4) * step).sum().backward()
        opt.step()


@pytest.mark.parametrize("target", ["param", "grad", "optim"])
def test_the_injector_flips_one_bit_of_its_kind_at_its_step(target: str) -> None:
    clean, clean_opt = _setup()
    _train(clean, clean_opt, [1, 2], [0])
    model, opt = _setup()
    box = [0]
    injector = Injector(Faults(Fault("bitflip", 2, rank=0, target=target, seed=2), 0, 1),
                        lambda: box[0])
    injector.install(model, opt)
    _train(model, opt, [1], box)
    assert injector.flips == []  # step 1: not armed
    _train(model, opt, [2], box)
    (flip,) = injector.flips
    assert (flip.step, flip.rank, flip.target) == (2, 0, target)
    assert flip.part.startswith(f"{target}:") and flip.before != flip.after
    kind = dict(kind_parts(model, opt, target))
    ref = dict(kind_parts(clean, clean_opt, target))
    differ = [n for n in kind if not torch.equal(raw_bits(kind[n]), raw_bits(ref[n]))]
    if target == "grad":
        # the update consumed the flipped gradient (seed 2 flips a sign bit, which no
        # rounding absorbs): the parameter moved differently
        assert differ == [flip.part]
        name = flip.part.removeprefix("grad:")
        assert not torch.equal(dict(model.named_parameters())[name],
                               dict(clean.named_parameters())[name])
    else:
        assert differ == [flip.part]
        assert int(raw_bits(kind[flip.part])[flip.element]) == flip.after
    injector.remove()
    assert not opt._optimizer_step_pre_hooks


@pytest.mark.parametrize("target", ["param", "optim"])
def test_at_rest_the_injector_flips_before_the_steps_first_forward_once(target: str) -> None:
    model, opt = _setup()
    box = [0]
    injector = Injector(Faults(Fault("bitflip", 3, rank=0, target=target, seed=5,
                                     when="rest"), 0, 1), lambda: box[0])
    injector.install(model, opt)
    _train(model, opt, [1, 2], box)
    assert injector.flips == []
    box[0] = 3
    at_rest = {n: raw_bits(t).clone() for n, t in kind_parts(model, opt, target)}
    model(torch.ones(1, 4))  # the step's first forward: the flip lands before it runs
    (flip,) = injector.flips
    assert (flip.step, flip.target) == (3, target) and flip.part.startswith(f"{target}:")
    now = dict(kind_parts(model, opt, target))
    assert [n for n in now if not torch.equal(raw_bits(now[n]), at_rest[n])] == [flip.part]
    model(torch.ones(1, 4))  # a second forward in the same step (accumulation): no flip
    _train(model, opt, [3, 4], box)
    assert len(injector.flips) == 1
    injector.remove()
    assert not model._forward_pre_hooks
