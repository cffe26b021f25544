"""The protocol model (proof/protocol.pml) under SPIN, as `python -m proof.spin`
runs it: every property holds over the whole bounded state space (at the model's
bounds, and at the wider ones where a revoked generation's restore can fail a
verification), the run commits when nothing fails, each mutant breaks the property
it names, and each mutant's liveness verdict is the one recorded."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
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


def test_every_property_holds_where_a_stale_verification_failure_exists() -> None:
    """Three generations and three faults (one step): a revoked second generation's
    restore reports a failed verification, which the fence must refuse."""
    r = spin.wide()
    assert r.errors == 0, f"{r.violated} violated at protocol.pml:{r.line}"
    assert r.complete, "pan stopped at its memory bound or depth: the check is not exhaustive"
    assert r.states > 1_000_000
    print(f"\n{r.name}: {r.states:,} states, {r.transitions:,} transitions, depth {r.depth},"
          f" {r.seconds:.0f} s")


def test_with_no_faults_the_run_commits_its_last_step() -> None:
    r = spin.live()
    assert r.errors == 0 and r.complete


@pytest.mark.parametrize("name", sorted(spin.MUTANTS))
def test_each_mutant_breaks_its_property(name: str) -> None:
    want = spin.MUTANTS[name].breaks
    r = spin.mutant(name)
    assert r.errors > 0, f"{name} removes a rule, yet no property failed"
    assert r.violated == want, f"{name} broke {r.violated} (protocol.pml:{r.line}), not {want}"
    assert spin.expected(name, r)
    # The counterexample replayed against the real controller core (proof.traces): where
    # the mutant removed a controller rule, the code judges the breaking step otherwise
    # (or, for a stop the mutant left out, the decision before it: one decision is its
    # line and its state line, and a lost node's three with its stop).
    assert r.trail, "the trail printed no transitions"
    agreement = traces.replay(r.trail)
    if name in traces.CONTROLLER_RULES:
        assert agreement.disagreement is not None, f"the real code agrees with {name}"
        at = re.match(r"line (\d+) ", agreement.disagreement)
        assert at is not None, agreement.disagreement
        before = 3 if name == "LOST_NOT_STOPPED" else 1
        assert len(r.trail) - before <= int(at.group(1)) <= len(r.trail), \
            agreement.disagreement
    else:
        assert agreement.agrees, agreement.disagreement


@pytest.mark.parametrize("name", sorted(spin.MUTANTS))
def test_each_mutant_under_the_liveness_claim(name: str) -> None:
    """With no faults, a mutant breaks L where it was recorded to (a proposal before
    every write is over is refused and never made again), and L holds for the rest."""
    r = spin.live(name)
    assert spin.expected(f"{name}:L", r), f"{name} under L: {r.verdict}"
    if spin.MUTANTS[name].liveness:
        assert r.violated == "L", r.verdict
    else:
        assert r.errors == 0 and r.complete, r.verdict


def test_every_property_and_mutant_is_named_in_the_model() -> None:
    text = spin.MODEL.read_text(encoding="utf-8")
    asserted = set(re.findall(r"assert\(.*\);?\s*/\* (P\d+) \*/", text))
    assert asserted == {f"P{i}" for i in range(1, 11)}
    assert {m.breaks for m in spin.MUTANTS.values()} == asserted, "a property no mutant breaks"
    for name in spin.MUTANTS:
        assert f"#ifdef {name}" in text or f"#ifndef {name}" in text, name
        assert name in text.split("*/", 1)[0], f"{name} is not in the model's header"


def test_the_readme_command_prints_the_table() -> None:
    """`python -m proof.spin --only liveness --only STOP_FIRST`, as docs/verification.md shows."""
    done = subprocess.run([sys.executable, "-m", "proof.spin", "--only", "liveness",
                           "--only", "STOP_FIRST"], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    assert re.search(r"mutant STOP_FIRST \(must break P6\).*violates P6", done.stdout)
    assert re.search(r"STOP_FIRST, liveness \(must hold\).*holds", done.stdout)
    assert re.search(r"liveness: no faults.*holds", done.stdout)
    assert "mutants caught: 1 of 1" in done.stdout


def test_a_bitstate_search_states_its_coverage() -> None:
    """The supertrace row (about 14 minutes, `make proof` only) is judged by its hash
    factor: with k = 3 bits a state and 23 bits of hash array per state stored, a
    state is missed with probability at most (1 - e^(-3/23))^3, under 0.2%."""
    r = spin.Result(name="supertrace", defines=spin.SUPERTRACE, states=740_803_460,
                    transitions=1_250_942_800, depth=327, errors=0, complete=False,
                    seconds=830.0, hash_factor=23.1909)
    assert r.coverage is not None and 0.998 < r.coverage < 0.999
    assert r.verdict == "no violation (bitstate, hash factor 23.2, coverage >= 99.82%)"
    assert spin.expected("supertrace", r)
    assert not spin.expected("supertrace", replace(r, hash_factor=4.0))
    assert not spin.expected("supertrace", replace(r, errors=1))


def test_a_missing_spin_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(spin.ProofError, match=r"scripts/spin\.sh"):
        spin.full()
