"""Silent-data-corruption detectors that run inside ``Session.step`` (docs/training.md, "Silent data
corruption"), after the optimizer step and before the step is reported or checkpointed.

- Cross-replica agreement (``agreement``): data-parallel replicas must hold the same
  bits after every optimizer step. Each state tensor (parameters, gradients when
  ``grads``, optimizer state when ``optimizer``) gets a fingerprint: the wrapping int64
  sum of its raw bytes read as int64 words (the bytes left over added one by one). One
  flipped bit changes one word by +-2^k, so it changes the sum mod 2^64: no single-bit
  flip escapes. Each rank's vector of fingerprints is gathered once per step (with the
  flags below) and a rank's fingerprint string is 16 hex digits of a hash of its vector.
- Consumed state: on the same steps, each rank also fingerprints the state the step
  consumed (parameters, and optimizer state when ``optimizer``, before the update:
  what lay at rest since the step before; ``before_update``, from an optimizer
  pre-hook). Agreement after the update cannot name a rank whose parameter changed
  at rest: its gradient was averaged into every replica, so every rank's state then
  differs from a clean run. The suspicion and its replay carry these fingerprints,
  and the controller's verdict compares each rank against its own recomputation
  (``controller.sdc_verdict``).
- Full digest (``digest``): every ``full_every`` steps, sha256 of every part's bytes.
- Invariants (``nonfinite``, ``spike``): a non-finite loss or gradient norm; a value
  above the running median + ``spike_sigma`` * 1.4826 * MAD of the last
  ``spike_window`` values, once ``spike_warmup`` values were seen. A non-finite
  finding names the ranks whose values went non-finite first in the step's dataflow
  (:data:`NONFINITE_STAGES`): a rank's own loss comes before the all-reduced gradient,
  which is non-finite on every rank once one rank's gradient was.

What agreement cannot see: a flip in activations, inputs or a rank's local gradients
before the all-reduce is averaged into every replica alike, so the replicas still agree
(only ``nonfinite`` or ``spike`` may catch its consequences).

On GPUs (NCCL training) the sums run on the device and only the vector of int64s comes
to the host; the gather runs on the session's gloo control group, never the training one.
Every rank gets the same :class:`Finding` (it is decided from the gathered rows), so all
ranks stop together. Cost: one pass over the state per agreement step, one all-gather of
a few hundred bytes per step, one sha256 pass per full digest (bench/sdc_overhead.py).

Tested in tests/worker/test_sdc.py and tests/worker/test_sdc_campaign.py.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from events.sdc import deviating
from events.sdcenv import SDC, SdcEnv, SdcEnvError, SdcReplay
from worker.errors import WorkerError

Part = tuple[str, torch.Tensor]
Gather = Callable[[Any], list[Any]]
# Integer views by element width: the fingerprint sums raw bits, never values.
_INT_OF_WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
MAD_SCALE = 1.4826  # MAD -> standard deviation for normally distributed values
# Where a value can go non-finite, in the order a step computes them: the rank's own
# loss, then the gradient norm (after the all-reduce: every rank's, once one rank's
# local gradient was non-finite).
NONFINITE_STAGES = ("loss", "grad_norm")


def state_parts(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, *,
                grads: bool, optimizer_state: bool) -> list[Part]:
    """The state tensors in an order identical on every rank: ``param:<n>`` for each
    parameter, then ``grad:<n>`` (those that have one), then ``optim:<n>.<key>``."""
    named = list(model.named_parameters())
    parts: list[Part] = [(f"param:{n}", p.detach()) for n, p in named]
    if grads:
        parts += [(f"grad:{n}", p.grad.detach()) for n, p in named if p.grad is not None]
    if optimizer_state and optimizer is not None:
        for n, p in named:
            state = optimizer.state.get(p, {})
            parts += [(f"optim:{n}.{key}", value.detach()) for key, value in sorted(state.items())
                      if isinstance(value, torch.Tensor)]
    return parts


def consumed_parts(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, *,
                   optimizer_state: bool) -> list[Part]:
    """The state a step consumes and the step before left at rest: the parameters, and
    the optimizer state when it is fingerprinted (gradients are the step's own)."""
    return state_parts(model, optimizer, grads=False, optimizer_state=optimizer_state)


def raw_bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as a flat integer tensor of the same element width (no copy when
    contiguous; a 0-dim tensor is one element)."""
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    width = _INT_OF_WIDTH.get(flat.element_size())
    if width is None:  # complex128 and other odd widths: read as bytes
        return flat.view(torch.uint8)
    return flat if flat.dtype == width else flat.view(width)


def fingerprints(parts: Sequence[Part]) -> torch.Tensor:
    """One int64 per part: the wrapping sum of its raw bits (on the CPU)."""
    if not parts:
        return torch.zeros(0, dtype=torch.int64)
    sums = [_word_sum(t) for _, t in parts]
    devices = {s.device for s in sums}
    if len(devices) == 1:
        return torch.stack(sums).cpu()
    # An optimizer keeps some state on the host beside device parameters (AdamW's
    # ``step`` is a CPU scalar unless ``capturable``; torch.stack refused the mix on
    # the H200): one stack and one copy to the host per device, not one per part.
    out = torch.empty(len(sums), dtype=torch.int64)
    for device in devices:
        at = [i for i, s in enumerate(sums) if s.device == device]
        out[at] = torch.stack([sums[i] for i in at]).cpu()
    return out


def _word_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The wrapping sum of the tensor's bytes read as int64 words (the < 8 bytes left
    over added one by one). A single-bit flip changes one word by +-2**k, so it changes
    the sum mod 2**64. Native int64 words sum ~20x faster than widening each 32-bit
    element (measured on 9.5M floats: 1 ms against 23 ms)."""
    data = raw_bits(tensor).view(torch.uint8)
    whole = data.numel() // 8 * 8
    try:
        total = data[:whole].view(torch.int64).sum()
    except RuntimeError:  # a view whose storage offset is not 8-byte aligned: copy it
        total = data[:whole].clone().view(torch.int64).sum()
    if whole < data.numel():
        total = total + data[whole:].to(torch.int64).sum()
    return total


def fingerprint_hex(vector: torch.Tensor | Sequence[int]) -> str:
    """16 hex digits naming a fingerprint vector (what events carry per rank)."""
    data = torch.as_tensor(vector, dtype=torch.int64).numpy().tobytes()
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def full_digest(parts: Sequence[Part]) -> str:
    """sha256 over every part's name and bytes, in order."""
    h = hashlib.sha256()
    for name, tensor in parts:
        h.update(name.encode())
        h.update(raw_bits(tensor).cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def grad_norm(model: torch.nn.Module) -> float | None:
    """The global L2 norm of the gradients (None without any)."""
    norms = [torch.linalg.vector_norm(p.grad.detach().float()) for p in model.parameters()
             if p.grad is not None]
    if not norms:
        return None
    return float(torch.linalg.vector_norm(torch.stack(norms)))


class Spike:
    """A robust running baseline: the median and MAD of the last ``window`` finite values."""

    def __init__(self, sigma: float, window: int, warmup: int) -> None:
        self.sigma = sigma
        self.warmup = max(warmup, 1)
        self.values: deque[float] = deque(maxlen=max(window, 1))
        self.seen = 0

    def observe(self, name: str, value: float) -> str:
        """'' when ``value`` is in bounds (and joins the window), else what is out."""
        if self.sigma <= 0 or not math.isfinite(value):
            return ""
        if self.seen >= self.warmup and self.values:
            median = statistics.median(self.values)
            mad = statistics.median(abs(v - median) for v in self.values)
            # A flat history (MAD 0) must not make every rounding step a spike.
            spread = max(MAD_SCALE * mad, 1e-6 * max(abs(median), 1e-12))
            bound = median + self.sigma * spread
            if value > bound:
                return (f"{name} {value:.6g} > {bound:.6g} (median {median:.6g} + "
                        f"{self.sigma:g} * 1.4826 * MAD {mad:.6g} of {len(self.values)})")
        self.values.append(value)
        self.seen += 1
        return ""


@dataclass(frozen=True, slots=True)
class Row:
    """What one rank contributes to the step's one all-gather."""

    vector: tuple[int, ...] | None  # fingerprints, on agreement and replay steps
    digest: str | None  # full digest, every ``full_every`` steps
    nonfinite: str  # '' or what is not finite
    spike: str  # '' or what spiked
    node: str
    consumed: str = ""  # fingerprint (hex) of the state the step consumed; '' not taken
    nonfinite_at: str = ""  # the first of NONFINITE_STAGES that is not finite


@dataclass(frozen=True, slots=True)
class Finding:
    """Why a step's state is distrusted; identical on every rank."""

    detector: str
    ranks: tuple[int, ...]  # the deviating ranks; () = every rank
    fingerprints: tuple[str, ...]
    nodes: tuple[str, ...]
    part: str
    detail: str


@dataclass(frozen=True, slots=True)
class Checked:
    """The outcome of one step's check: per-rank fingerprints ('' where not taken)."""

    fingerprints: tuple[str, ...]
    nodes: tuple[str, ...]
    finding: Finding | None
    replayed: bool = False  # this is the step ``SdcReplay`` asked for
    consumed: tuple[str, ...] = ()  # per rank, the state the step consumed ('' not taken)


def _hexes(rows: Sequence[Row]) -> tuple[str, ...]:
    return tuple("" if r.vector is None else fingerprint_hex(r.vector) for r in rows)


def decide(rows: Sequence[Row], names: Sequence[str]) -> Finding | None:
    """The step's finding from every rank's row, first rule that fires:
    1. agreement: the fingerprint vectors differ (part = the first part that differs);
    2. digest: the full digests differ;
    3. nonfinite: a rank's loss or gradient norm is not finite (ranks: those
       non-finite at the earliest of NONFINITE_STAGES any rank is; part: that stage);
    4. spike: a rank's loss or gradient norm spiked."""
    hexes = _hexes(rows)
    nodes = tuple(r.node for r in rows)
    vectors = [r.vector for r in rows if r.vector is not None]
    if len(vectors) == len(rows) and len(set(vectors)) > 1:
        ranks = deviating(vectors)
        width = min(len(names), *(len(v) for v in vectors))
        split = [i for i in range(width) if len({v[i] for v in vectors}) > 1]
        # No part differs: the ranks hold different numbers of parts (a missing grad).
        part = names[split[0]] if split else f"part count {[len(v) for v in vectors]}"
        detail = (f"{len(split)} of {len(names)} parts differ, first {part}; "
                  f"fingerprints {list(hexes)}")
        return Finding("agreement", ranks, hexes, nodes, part, detail)
    digests = [r.digest for r in rows]
    if all(d is not None for d in digests) and len(set(digests)) > 1:
        short = [d[:16] for d in digests if d]
        return Finding("digest", deviating(digests), hexes, nodes, "",
                       f"full digests differ: {short}")
    bad = [(r, row.nonfinite) for r, row in enumerate(rows) if row.nonfinite]
    if bad:
        first = min(_stage(rows[r]) for r, _ in bad)
        named = [r for r, _ in bad if _stage(rows[r]) == first]
        part = NONFINITE_STAGES[first] if first < len(NONFINITE_STAGES) else ""
        detail = "; ".join(f"rank {r}: {what}" for r, what in bad)
        if part and len(named) < len(rows):
            detail += f"; first non-finite: {part} on ranks {named}"
        return Finding("nonfinite", _everyone_is_none(named, rows), hexes, nodes, part, detail)
    spiked = [(r, row.spike) for r, row in enumerate(rows) if row.spike]
    if spiked:
        detail = "; ".join(f"rank {r}: {what}" for r, what in spiked)
        return Finding("spike", _everyone_is_none([r for r, _ in spiked], rows), hexes, nodes,
                       "", detail)
    return None


def _stage(row: Row) -> int:
    """Where ``row``'s values went non-finite first; after every stage when unsaid."""
    at = row.nonfinite_at
    return NONFINITE_STAGES.index(at) if at in NONFINITE_STAGES else len(NONFINITE_STAGES)


def _everyone_is_none(ranks: Sequence[int], rows: Sequence[Row]) -> tuple[int, ...]:
    return () if len(ranks) == len(rows) else tuple(ranks)


class Detectors:
    """The configured detectors of one rank; ``check`` is collective (every rank calls it
    for every step, in order)."""

    def __init__(self, env: SdcEnv, replay: SdcReplay | None, *, rank: int, world_size: int,
                 node: str, gather: Gather) -> None:
        self.env = env
        self.replay = replay
        self.rank = rank
        self.world_size = world_size
        self.node = node
        self.gather = gather
        self.loss_spike = Spike(env.spike_sigma, env.spike_window, env.spike_warmup)
        self.norm_spike = Spike(env.spike_sigma, env.spike_window, env.spike_warmup)
        self._consumed: tuple[int, str] | None = None  # (step, fingerprint) before_update took
        self.watch: Any = None  # the optimizer hook ``worker.sdcstep.watch_consumed`` installed

    @property
    def wants_grad_norm(self) -> bool:
        return self.env.nonfinite or self.env.spike_sigma > 0

    def _every(self, every: int, step: int) -> bool:
        return self.world_size > 1 and every > 0 and step % every == 0

    def fingerprinted(self, step: int) -> bool:
        """Whether ``check`` fingerprints ``step``: agreement is due, or it is the replay."""
        replayed = self.replay is not None and step == self.replay.step
        return self._every(self.env.agreement_every, step) or replayed

    def before_update(self, step: int, parts: Sequence[Part]) -> None:
        """Fingerprint the state ``step`` consumed (``consumed_parts``, before the optimizer
        updates it) when that step is fingerprinted; ``check`` carries it in the row."""
        if self.fingerprinted(step):
            self._consumed = (step, fingerprint_hex(fingerprints(parts)))

    def check(self, step: int, loss: float | None, parts: Sequence[Part],
              norm: float | None = None) -> Checked:
        replayed = self.replay is not None and step == self.replay.step
        agree = self.fingerprinted(step)
        consumed = self._consumed[1] if self._consumed and self._consumed[0] == step else ""
        vector = tuple(fingerprints(parts).tolist()) if agree else None
        digest = full_digest(parts) if self._every(self.env.full_every, step) else None
        values = [("loss", loss), ("grad_norm", norm)]  # in NONFINITE_STAGES order
        bad = [(n, f"{n}={v}") for n, v in values
               if self.env.nonfinite and v is not None and not math.isfinite(v)]
        spiked = [what for n, v, tracker in (("loss", loss, self.loss_spike),
                                             ("grad_norm", norm, self.norm_spike))
                  if v is not None and (what := tracker.observe(n, v))]
        row = Row(vector, digest, "; ".join(w for _, w in bad), "; ".join(spiked), self.node,
                  consumed, bad[0][0] if bad else "")
        rows: list[Row] = list(self.gather(row))
        names = [name for name, _ in parts]
        finding = decide(rows, names)
        if finding is not None and any(r.vector is None for r in rows):
            # A rare second gather, on every rank alike (the finding is the same
            # everywhere): the suspicion carries every rank's fingerprint.
            mine = tuple(fingerprints(parts).tolist())
            hexes = tuple(fingerprint_hex(v) for v in self.gather(mine))
            finding = Finding(finding.detector, finding.ranks, hexes, finding.nodes,
                              finding.part, finding.detail)
        hexes = finding.fingerprints if finding is not None else _hexes(rows)
        return Checked(hexes, tuple(r.node for r in rows), finding, replayed,
                       tuple(r.consumed for r in rows))


def from_environ(environ: Mapping[str, str], *, rank: int, world_size: int, node: str,
                 gather: Gather) -> Detectors | None:
    """The detectors ``RUNLEDGER_SDC`` configures, or None when it is not set (a run
    whose spec has no ``sdc`` section pays nothing)."""
    if not environ.get(SDC):
        return None
    try:
        env, replay = SdcEnv.from_environ(environ), SdcReplay.from_environ(environ)
    except SdcEnvError as exc:
        raise WorkerError(f"{exc}; the controller writes these variables from the spec's "
                          "sdc section: check it, or unset them") from None
    return Detectors(env, replay, rank=rank, world_size=world_size, node=node, gather=gather)
