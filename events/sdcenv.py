"""The silent-data-corruption settings a worker gets from its environment.

Declared once here, written by the controller (the spec's ``sdc`` section, and
the open suspicion a restarted generation must replay) and read by the worker
session (``worker.sdc``):

- ``RUNLEDGER_SDC``: JSON of :class:`SdcEnv`, which detectors run and how often.
- ``RUNLEDGER_SDC_REPLAY``: JSON of :class:`SdcReplay`, set only while a
  suspicion is open: the step to recompute and what each rank held there.

Tested in tests/events/test_sdcenv.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from events.errors import InvalidEvent

SDC = "RUNLEDGER_SDC"
SDC_REPLAY = "RUNLEDGER_SDC_REPLAY"


class SdcEnvError(InvalidEvent):
    """A ``RUNLEDGER_SDC*`` variable that does not parse; names the variable."""


@dataclass(frozen=True, slots=True)
class SdcEnv:
    """Which detectors run. ``agreement_every`` 0 turns cross-replica agreement off;
    ``full_every`` 0 never takes the full digest; ``spike_sigma`` 0 turns spikes off."""

    agreement_every: int = 0
    full_every: int = 0
    grads: bool = True
    optimizer: bool = True
    nonfinite: bool = True
    spike_sigma: float = 0.0
    spike_window: int = 32
    spike_warmup: int = 8

    def __post_init__(self) -> None:
        for name in ("agreement_every", "full_every", "spike_window", "spike_warmup"):
            if getattr(self, name) < 0:
                raise SdcEnvError(f"{SDC}: {name} must be >= 0, got {getattr(self, name)}")
        if self.spike_sigma < 0:
            raise SdcEnvError(f"{SDC}: spike_sigma must be >= 0, got {self.spike_sigma}")

    def to_environ(self) -> dict[str, str]:
        return {SDC: json.dumps(asdict(self), sort_keys=True)}

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> SdcEnv:
        raw = env.get(SDC)
        if not raw:
            return cls()
        return cls(**_fields(cls, SDC, raw))


@dataclass(frozen=True, slots=True)
class SdcReplay:
    """An open suspicion the next generation recomputes: ``step`` of ``generation``,
    with the fingerprint each rank held there (rank order) and the suspect ``ranks``."""

    step: int
    generation: int
    fingerprints: tuple[str, ...]
    ranks: tuple[int, ...] = ()

    def to_environ(self) -> dict[str, str]:
        return {SDC_REPLAY: json.dumps(asdict(self), sort_keys=True)}

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> SdcReplay | None:
        raw = env.get(SDC_REPLAY)
        if not raw:
            return None
        fields = _fields(cls, SDC_REPLAY, raw)
        try:
            return cls(step=int(fields["step"]), generation=int(fields["generation"]),
                       fingerprints=tuple(str(f) for f in fields["fingerprints"]),
                       ranks=tuple(int(r) for r in fields.get("ranks", ())))
        except (KeyError, TypeError, ValueError) as exc:
            raise SdcEnvError(f"{SDC_REPLAY}={raw!r}: {exc!r}") from None


def _fields(cls: type, var: str, raw: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise SdcEnvError(f"{var} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SdcEnvError(f"{var} must be a JSON object, got {raw!r}")
    known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    unknown = sorted(set(data) - known)
    if unknown:
        raise SdcEnvError(f"{var}: unknown keys {unknown}; known: {sorted(known)}")
    return data
