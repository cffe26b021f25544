"""The SDC environment contract round-trips and names what is wrong."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.sdcenv import SDC, SDC_REPLAY, SdcEnv, SdcEnvError, SdcReplay


@given(st.builds(SdcEnv, agreement_every=st.integers(0, 100), full_every=st.integers(0, 100),
                 grads=st.booleans(), optimizer=st.booleans(), nonfinite=st.booleans(),
                 spike_sigma=st.floats(0, 50), spike_window=st.integers(0, 64),
                 spike_warmup=st.integers(0, 64)))
def test_settings_round_trip(env: SdcEnv) -> None:
    assert SdcEnv.from_environ(env.to_environ()) == env


def test_absent_settings_are_the_defaults_and_replay_is_none() -> None:
    assert SdcEnv.from_environ({}) == SdcEnv()
    assert SdcReplay.from_environ({}) is None


def test_replay_round_trips() -> None:
    replay = SdcReplay(step=7, generation=2, fingerprints=("a1", "b2"), ranks=(1,))
    assert SdcReplay.from_environ(replay.to_environ()) == replay


@pytest.mark.parametrize(("var", "raw", "words"), [
    (SDC, "{", "not JSON"),
    (SDC, "[1]", "JSON object"),
    (SDC, '{"every": 1}', "unknown keys ['every']"),
    (SDC, '{"agreement_every": -1}', "agreement_every must be >= 0"),
    (SDC_REPLAY, '{"step": 3}', "RUNLEDGER_SDC_REPLAY"),
])
def test_bad_values_name_the_variable_and_the_key(var: str, raw: str, words: str) -> None:
    with pytest.raises(SdcEnvError, match=words.replace("[", r"\[").replace("]", r"\]")):
        if var == SDC:
            SdcEnv.from_environ({var: raw})
        else:
            SdcReplay.from_environ({var: raw})
