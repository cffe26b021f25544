"""The loader's state dict: small, versioned, strict.

A state is the input of the pure order function, not a buffer dump: it says
which dataset, algorithm, seed and batch size the order belongs to, which
global batch comes next, and the planner's :class:`~dataplane.order.OrderState`
(per-source draws, counts in the mixture's unit, the packer's residue).
Prefetched samples are never in it: they are rebuilt on resume. Loading a
state against another dataset id, algorithm or seed is refused, naming both.

Tested in tests/dataplane/test_loader.py and tests/dataplane/test_order.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataplane.errors import StateError
from dataplane.order import OrderState, Span

STATE_VERSION = 1
_TOP = ("version", "algorithm", "dataset_id", "seed", "global_batch_size", "batch", "epoch",
        "position", "draws_total", "sources", "packer", "finished")
_SOURCE = ("draws", "units", "base_units", "active", "epoch")
_SPAN = ("source", "index", "epoch", "origin", "start", "stop")


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where the stream stands after a global batch; what a checkpoint commits."""

    dataset_id: str
    algorithm: str
    seed: int
    global_batch_size: int
    batch: int  # the next global batch to serve
    epoch: int
    order: OrderState
    names: tuple[str, ...]
    records: tuple[int, ...]

    @property
    def position(self) -> int:
        return self.order.position

    def source_counts(self) -> dict[str, int]:
        """Per-source counts in the mixture's unit, as ``CursorAdvanced`` carries them."""
        return dict(zip(self.names, self.order.units, strict=True))

    def state_dict(self) -> dict[str, Any]:
        o = self.order
        sources = {
            name: {"draws": o.draws[i], "units": o.units[i], "base_units": o.base_units[i],
                   "active": o.active[i], "epoch": o.draws[i] // self.records[i]}
            for i, name in enumerate(self.names)
        }
        packer = None
        if o.residue is not None:
            r = o.residue
            packer = {"source": self.names[r.source], "index": r.index, "epoch": r.epoch,
                      "origin": r.origin, "start": r.start, "stop": r.stop}
        return {
            "version": STATE_VERSION, "algorithm": self.algorithm, "dataset_id": self.dataset_id,
            "seed": self.seed, "global_batch_size": self.global_batch_size, "batch": self.batch,
            "epoch": self.epoch, "position": o.position, "draws_total": o.draws_total,
            "sources": sources, "packer": packer, "finished": o.finished,
        }


def load_cursor(state: Any, *, dataset_id: str, algorithm: str, seed: int,
                global_batch_size: int, names: tuple[str, ...],
                records: tuple[int, ...]) -> Cursor:
    """Check a state dict against this loader and rebuild its cursor; refuse anything off."""
    if not isinstance(state, dict):
        raise StateError(f"a loader state must be a mapping, got {type(state).__name__}")
    _keys(state, _TOP, "state")
    if state["version"] != STATE_VERSION:
        raise StateError(f"state version {state['version']!r} is not {STATE_VERSION}; no upcaster"
                         " exists for it")
    for key, mine in (("dataset_id", dataset_id), ("algorithm", algorithm), ("seed", seed),
                      ("global_batch_size", global_batch_size)):
        if state[key] != mine:
            raise StateError(
                f"state.{key} is {state[key]!r} but this loader's is {mine!r}: the state belongs"
                " to another order and resuming from it would serve different samples")
    for key in ("batch", "epoch", "position", "draws_total"):
        _count(state[key], f"state.{key}")
    if state["batch"] * global_batch_size != state["position"]:
        raise StateError(f"state.position {state['position']} is not batch {state['batch']}"
                         f" times the global batch size {global_batch_size}")
    sources = state["sources"]
    if not isinstance(sources, dict) or set(sources) != set(names):
        got = sorted(sources) if isinstance(sources, dict) else type(sources).__name__
        raise StateError(f"state.sources names {got}, this dataset's sources are {list(names)}")
    per = [sources[n] for n in names]
    for name, entry in zip(names, per, strict=True):
        _keys(entry, _SOURCE, f"state.sources.{name}")
        for key in ("draws", "units", "base_units", "epoch"):
            _count(entry[key], f"state.sources.{name}.{key}")
        if not isinstance(entry["active"], bool):
            raise StateError(f"state.sources.{name}.active must be true or false")
    if sum(e["draws"] for e in per) != state["draws_total"]:
        raise StateError("state.draws_total is not the sum of the per-source draws")
    residue = None
    packer = state["packer"]
    if packer is not None:
        _keys(packer, _SPAN, "state.packer")
        if packer["source"] not in names:
            raise StateError(f"state.packer.source {packer['source']!r} is not a source")
        for key in _SPAN[1:]:
            _count(packer[key], f"state.packer.{key}")
        if not packer["origin"] <= packer["start"] < packer["stop"]:
            raise StateError("state.packer must satisfy origin <= start < stop")
        residue = Span(names.index(packer["source"]), packer["index"], packer["epoch"],
                       packer["origin"], packer["start"], packer["stop"])
    if not isinstance(state["finished"], bool):
        raise StateError("state.finished must be true or false")
    order = OrderState(
        position=state["position"], draws_total=state["draws_total"],
        draws=tuple(e["draws"] for e in per), units=tuple(e["units"] for e in per),
        base_units=tuple(e["base_units"] for e in per),
        active=tuple(e["active"] for e in per), residue=residue, finished=state["finished"])
    return Cursor(dataset_id=dataset_id, algorithm=algorithm, seed=seed,
                  global_batch_size=global_batch_size, batch=state["batch"],
                  epoch=state["epoch"], order=order, names=names, records=records)


def _keys(value: Any, expected: tuple[str, ...], where: str) -> None:
    if not isinstance(value, dict):
        raise StateError(f"{where} must be a mapping")
    missing = [k for k in expected if k not in value]
    extra = [k for k in value if k not in expected]
    if missing or extra:
        raise StateError(f"{where}: " + "; ".join(
            p for p in (f"missing {missing}" if missing else "",
                        f"unknown {extra}" if extra else "") if p))


def _count(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StateError(f"{where} must be a non-negative integer, got {value!r}")
