"""The model tied to the code (proof.traces): a thousand SPIN traces of protocol.pml replayed
against the real controller core agree, transition by transition. (The mutants'
counterexamples, which must not agree, are replayed in tests/proof/test_spin.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from proof import traces

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("first", [1, 501])
def test_a_thousand_model_traces_agree_with_the_real_core(first: int) -> None:
    """`python -m proof.traces --seeds 1000`, as docs/verification.md shows, in two halves."""
    done = subprocess.run([sys.executable, "-m", "proof.traces", "--first", str(first),
                           "--seeds", "500"], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^500 traces, \d+ lines, 0 disagreements$", done.stdout, re.M)
    tally = dict(re.findall(r"(\w+[+-]?) (\d+)", done.stdout.splitlines()[-2]))
    # Every kind of decision is exercised, accepted and refused.
    for kind in ("SHARD+", "SHARD-", "PROPOSE+", "PROPOSE-", "VFAIL+", "LOST", "GEN", "CANCEL",
                 "STOP"):
        assert int(tally.get(kind, 0)) > 0, f"no {kind} in {tally}"


def test_a_wrong_verdict_or_state_is_a_disagreement_that_names_the_line() -> None:
    ok = ["@SHARD 1 1 0 1", "@= 0 0", "@SHARD 1 1 1 1", "@PROPOSE 1 1 0 1", "@= 1 1"]
    assert traces.replay(ok).agrees
    wrong = traces.replay([*ok[:3], "@PROPOSE 1 1 0 0"])
    assert wrong.disagreement == ("line 4 '@PROPOSE 1 1 0 0': the code accepts: "
                                  "ManifestCommitted, CursorAdvanced")
    assert "line 5 '@= 1 0': latest, cursor are (1, 1)" in str(
        traces.replay([*ok[:4], "@= 1 0"]).disagreement)
    # A restart: the real controller stops the lost generation, then starts the next from
    # the latest committed step; the stale generation's shard is then refused.
    restart = [*ok, "@LOST 1", "@STOP 1", "@= 1 1", "@GEN 2 1", "@SHARD 1 2 0 0",
               "@SHARD 2 2 0 1"]
    assert traces.replay(restart).agrees
    assert "resumes from 1" in str(traces.replay([*ok, "@LOST 1", "@STOP 1", "@GEN 2 0"])
                                   .disagreement)
    # The stops are matched too: one the model left out, or one the code never commanded.
    assert traces.replay([*ok, "@LOST 1", "@= 1 1"]).disagreement == (
        "line 7 '@= 1 1': the code also stops g1")
    assert traces.replay([*ok, "@STOP 1"]).disagreement == (
        "line 6 '@STOP 1': the code commands no stop of g1 here")


def test_every_model_decision_prints_a_trace_line() -> None:
    text = traces.MODEL.read_text(encoding="utf-8")
    for kind in ("@%e", "@LOST", "@GEN", "@CANCEL", "@STOP", "@="):
        assert f'printf("{kind}' in text, kind
