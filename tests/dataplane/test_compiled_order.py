"""The planner's loop in compiled code (``runledger_native.OrderCore``) against the pure
Python planner, side by side: the same batches, the same states, the same errors.

``dataplane.order.Planner.plan_batch`` runs compiled whenever the crate is built, so
tests/dataplane/test_order.py checks its properties too; this holds it to the Python
steps themselves on drawn manifests (every mode, unit, exhaustion policy, packing,
crop and filter the strategy there draws), including ``error`` exhaustion and
sources whose every record is filtered out.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.errors import DataPlaneError
from dataplane.order import Planner
from tests.dataplane.corpus import lengths_fn, write_dataset
from tests.dataplane.test_order import ROOT, configs


def both(cfg: dict[str, Any]) -> tuple[Planner, Planner]:
    objects, seed = cfg.pop("objects"), cfg.pop("seed")
    manifest = write_dataset(ROOT, objects, write=False, **cfg)
    return (Planner(manifest, seed, lengths_fn(objects)),
            Planner(manifest, seed, lengths_fn(objects), compiled=False))


def outcome(p: Planner, batches: int, size: int) -> list[Any]:
    """Each batch with its state, then how the stream ended (None, or the error)."""
    out: list[Any] = []
    st_ = p.initial()
    try:
        for _ in range(batches):
            planned = p.plan_batch(st_, size)
            if planned is None:
                return [*out, None]
            out.append(planned)
            st_ = planned[1]
    except DataPlaneError as exc:
        return [*out, (type(exc).__name__, str(exc), getattr(exc, "epoch", None))]
    return out


def test_the_compiled_loop_is_built_and_used() -> None:
    compiled, python = both({"objects": {"a": [[3, 4]]}, "seed": 1})
    assert compiled._core is not None and python._core is None


@settings(max_examples=400, deadline=None)
@given(configs(), st.integers(min_value=1, max_value=5),
       st.sampled_from(["repeat", "renormalize", "stop", "error"]))
def test_compiled_and_python_plan_the_same_batches_and_end_the_same_way(
        cfg: dict[str, Any], size: int, exhaustion: str) -> None:
    cfg["mixture"] = {**cfg["mixture"], "exhaustion": exhaustion}
    try:
        compiled, python = both(dict(cfg))
    except DataPlaneError:
        return  # refused at construction (a weighted source with no tokens): no loop
    assert outcome(compiled, 40, size) == outcome(python, 40, size)


def test_a_long_stream_over_many_epochs_is_the_same() -> None:
    objects = {"a": [[5, 0, 9, 30, 2] * 20], "b": [[7] * 300, [1, 2, 3] * 50],
               "c": [[40, 1] * 3]}
    cfg = {"objects": objects, "seed": 77,
           "mixture": {"weights": {"a": 3, "b": 5, "c": 1}, "unit": "tokens", "mode": "exact"},
           "packing": {"mode": "concat", "seq_len": 64},
           "transforms": [{"kind": "crop", "max_tokens": 20, "mode": "random"}],
           "filters": {"a": [{"kind": "min_tokens", "value": 2}],
                       "b": [{"kind": "max_tokens", "value": 2}]}}
    compiled, python = both(dict(cfg))
    assert outcome(compiled, 300, 16) == outcome(python, 300, 16)
