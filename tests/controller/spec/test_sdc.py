"""The spec's ``sdc`` section: parsed and bounded, named when wrong, sent as RUNLEDGER_SDC."""

from __future__ import annotations

import json

from controller.runplan import plan_from_submission
from controller.spec.sdc import SdcPolicy, sdc_env
from events.codec import default_codec
from events.sdcenv import SDC, SdcEnv
from tests.controller.spec.test_runspec import MINIMAL, problems_of, spec_of, with_
from tests.controller.test_reconcile import Sim, types
from tests.events.builders import Ev

FULL = {"agreement": {"every": 2, "full_every": 50, "grads": False, "optimizer": True},
        "invariants": {"nonfinite": True, "spike_sigma": 6.0, "window": 64, "warmup": 16}}


def test_absent_no_detector_runs_and_the_digest_is_unchanged() -> None:
    spec = spec_of(MINIMAL)
    assert spec.sdc is None and "sdc" not in json.loads(spec.canonical_json())
    assert sdc_env(spec.sdc) is None  # no RUNLEDGER_SDC: the worker pays nothing
    # An empty section turns on the defaults: the non-finite check alone.
    assert sdc_env(spec_of(with_("sdc", {})).sdc) == SdcEnv(agreement_every=0, nonfinite=True)


def test_the_section_becomes_the_workers_settings() -> None:
    spec = spec_of(with_("sdc", FULL))
    assert sdc_env(spec.sdc) == SdcEnv(agreement_every=2, full_every=50, grads=False,
                                       optimizer=True, nonfinite=True, spike_sigma=6.0,
                                       spike_window=64, spike_warmup=16)
    # agreement: {} turns agreement on every step with the defaults.
    on = sdc_env(SdcPolicy.model_validate({"agreement": {}}))
    assert (on.agreement_every, on.full_every, on.grads, on.optimizer) == (1, 0, True, True)
    assert spec.digest() != spec_of(MINIMAL).digest()


def test_unknown_keys_and_bad_values_are_named() -> None:
    problems = problems_of(with_("sdc", {"agreement": {"every": 0, "grads": "yes"},
                                         "invariants": {"spike_sigma": -1.0, "window": 2},
                                         "replay": True}))
    text = "\n".join(problems)
    assert "sdc.agreement.every: 0 is out of range: must be >= 1" in text
    assert "sdc.agreement.grads" in text
    assert "sdc.invariants.spike_sigma: -1.0 is out of range" in text
    assert "sdc.invariants.window: 2 is out of range: must be >= 4 and <= 4096" in text
    assert "sdc.replay" in text
    assert any(p.startswith("sdc.agreement.every_steps") for p in problems_of(
        with_("sdc.agreement.every_steps", 3)))


def test_every_start_command_carries_the_runs_settings() -> None:
    spec = spec_of(with_("sdc", FULL))
    plan = plan_from_submission(Ev("sdc").submitted(spec_json=spec.canonical_json(),
                                                    world_size=spec.world_size))
    assert plan.invalid == "" and plan.sdc == sdc_env(spec.sdc)
    sim = Sim(plan=plan)
    sim.agent("n1", spec.world_size)
    sim.submit()
    out = sim.tick()
    starts = [e for _, e in out if e.event_type == "GroupStartCommanded"]
    assert starts and "GenerationStarted" in types(out)
    for start in starts:
        assert SdcEnv.from_environ(start.env) == plan.sdc  # type: ignore[attr-defined]
        assert json.loads(start.env[SDC])["agreement_every"] == 2  # type: ignore[attr-defined]
        default_codec().encode(start)
