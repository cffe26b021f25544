"""The protocol model (proof/protocol.pml) under SPIN, as `python -m proof.spin`
runs it: every property holds over the whole bounded state space, the run
commits when nothing fails, and each mutant breaks the property it names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from proof import spin, traces

ROOT = Path(__file__).resolve().parents[2]


def test_every_property_holds_over_the_whole_state_space() -> None:
    r = spin.full()
    assert r.errors == 0, f"{r.violated} violated at protocol.pml:{r.line}"
    assert r.complete, "pan stopped at its memory bound or depth: the check is not exhaustive"
    # The faults were explored, not switched off: the fault-free model has ~10^3 states.
    assert r.states > 1_000_000 and r.depth > 100
    print(f"\n{r.name}: {r.states:,} states, {r.transitions:,} transitions, depth {r.depth},"
          f" {r.seconds:.0f} s")


def test_with_no_faults_the_run_commits_its_last_step() -> None:
    r = spin.live()
    assert r.errors == 0 and r.complete


@pytest.mark.parametrize("name", sorted(spin.MUTANTS))
def test_each_mutant_breaks_its_property(name: str) -> None:
    r = spin.mutant(name)
    assert r.errors > 0, f"{name} removes a rule, yet no property failed"
    assert r.violated == spin.MUTANTS[name], (
        f"{name} broke {r.violated} (protocol.pml:{r.line}), not {spin.MUTANTS[name]}")
    # The counterexample replayed against the real controller core (proof.traces): where
    # the mutant removed a controller rule, the code judges the breaking step otherwise.
    assert r.trail, "the trail printed no transitions"
    agreement = traces.replay(r.trail)
    if name in traces.CONTROLLER_RULES:
        assert agreement.disagreement is not None, f"the real code agrees with {name}"
        assert f"line {len(r.trail)} " in agreement.disagreement or \
            f"line {len(r.trail) - 1} " in agreement.disagreement, agreement.disagreement
    else:
        assert agreement.agrees, agreement.disagreement


def test_every_property_and_mutant_is_named_in_the_model() -> None:
    text = spin.MODEL.read_text(encoding="utf-8")
    asserted = set(re.findall(r"assert\(.*\);?\s*/\* (P\d) \*/", text))
    assert asserted == {f"P{i}" for i in range(1, 7)}
    for name in spin.MUTANTS:
        assert f"#ifdef {name}" in text or f"#ifndef {name}" in text, name


def test_the_readme_command_prints_the_table() -> None:
    """`python -m proof.spin --only liveness --only STOP_FIRST`, as docs/verification.md shows."""
    done = subprocess.run([sys.executable, "-m", "proof.spin", "--only", "liveness",
                           "--only", "STOP_FIRST"], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    assert re.search(r"mutant STOP_FIRST \(must break P6\).*violates P6", done.stdout)
    assert re.search(r"liveness: no faults.*holds", done.stdout)


def test_a_missing_spin_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(spin.ProofError, match=r"scripts/spin\.sh"):
        spin.full()
