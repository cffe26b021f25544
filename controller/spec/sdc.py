"""The ``sdc`` section of a run spec: which silent-data-corruption detectors the
worker session runs, and how often (docs/run-spec.md, "Silent data corruption").

```yaml
sdc:
  agreement: {every: 1, full_every: 0, grads: true, optimizer: true}
  invariants: {nonfinite: true, spike_sigma: 0, window: 32, warmup: 8}
```

- ``agreement``: cross-replica agreement of a fingerprint of the parameters
  (and the reduced gradients, ``grads``, and the optimizer state,
  ``optimizer``) every ``every`` steps, and a full digest every ``full_every``
  steps (0: never). Absent: no agreement check.
- ``invariants``: a non-finite loss or gradient norm (``nonfinite``); a spike
  above the running median + ``spike_sigma`` robust standard deviations of the
  last ``window`` steps after ``warmup`` steps (``spike_sigma`` 0: off).

A spec without the section runs no detector and pays nothing: its start
commands carry no ``RUNLEDGER_SDC`` (and it keeps the digest it had). With the
section, :func:`sdc_env` turns it into the ``RUNLEDGER_SDC`` value every start
command carries; ``invariants`` then defaults to the non-finite check alone.

Tested in tests/controller/spec/test_sdc.py.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Strict

from controller.spec import bounds as b
from controller.spec.parts import Part
from events.sdcenv import SdcEnv

Flag = Annotated[bool, Strict()]
_DEFAULT = SdcEnv()


class SdcAgreement(Part):
    every: Annotated[int, Strict(), AfterValidator(b.STEPS)] = 1
    full_every: Annotated[int, Strict(), AfterValidator(b.STEPS_OR_OFF)] = 0
    grads: Flag = True
    optimizer: Flag = True


class SdcInvariants(Part):
    nonfinite: Flag = True
    spike_sigma: Annotated[float, Strict(), AfterValidator(b.SIGMA_OR_OFF)] = 0.0
    window: Annotated[int, Strict(), AfterValidator(b.SPIKE_WINDOW)] = _DEFAULT.spike_window
    warmup: Annotated[int, Strict(), AfterValidator(b.STEPS_OR_OFF)] = _DEFAULT.spike_warmup


class SdcPolicy(Part):
    agreement: SdcAgreement | None = None
    invariants: SdcInvariants = SdcInvariants()


def sdc_env(policy: SdcPolicy | None) -> SdcEnv | None:
    """What the worker session is told (``RUNLEDGER_SDC``); None: no section, no detector."""
    if policy is None:
        return None
    a, i = policy.agreement, policy.invariants
    return SdcEnv(agreement_every=a.every if a else 0, full_every=a.full_every if a else 0,
                  grads=a.grads if a else True, optimizer=a.optimizer if a else True,
                  nonfinite=i.nonfinite, spike_sigma=i.spike_sigma, spike_window=i.window,
                  spike_warmup=i.warmup)
