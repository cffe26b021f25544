"""Run SPIN over ``proof/protocol.pml``: the safety checks, the liveness claim, and
the mutants, each of which must break the property it names.

The rows of the table:

- ``safety``: P1-P10 over the whole state space at the model's bounds (two
  generations, two checkpoint steps, two faults);
- ``wide``: P1-P10 over the whole state space at three generations, three
  faults and one step (``WIDE``), where a revoked generation's restore can
  report a verification failure;
- ``liveness``: with no faults the run commits its last step (ltl, weak fairness);
- each mutant twice: its safety run must violate exactly the property it names
  (``Mutant.breaks``), and its liveness run (no faults) must break L or hold as
  recorded (``Mutant.liveness``); a mutant is caught when either breaks;
- ``supertrace``: P1-P10 at three generations, two steps and three faults, which
  no exhaustive search here holds: a bitstate search, its coverage estimated from
  its hash factor (about 14 minutes; ``make proof`` runs it, ``make test`` not).

``python -m proof.spin`` prints the table (what docs/verification.md's "The protocol,
model-checked" shows); ``--only NAME`` runs one of its rows (a mutant's name runs
both of its rows), ``--quick`` every row but the bitstate search. Needs ``spin``
and ``gcc`` on PATH (``scripts/spin.sh`` installs Debian's spin; ``make test`` runs it).

Tested in tests/proof/test_spin.py.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from proof.errors import ProofError

MODEL = Path(__file__).with_name("protocol.pml")

# The bounds at which a stale verification failure exists: a third generation (the
# second one revoked while its coordinator restores) and three faults (a torn shard
# and two lost nodes). With one checkpoint step the whole state space fits (1.8*10^7
# states); with two it does not (past 3*10^8 states and 16 GB), so `make proof` also
# searches it with a bitstate hash (SUPERTRACE): about 7.4*10^8 states, 14 minutes.
WIDE = ("G=3", "MAXF=3", "S=1")
SUPERTRACE = ("G=3", "MAXF=3")
BITSTATE_W = 34  # 2^34 bits (2 GiB) of hash array
BITSTATE_K = 3  # bits set per state


@dataclass(frozen=True, slots=True)
class Mutant:
    """A ``-D`` flag of the model that removes or weakens one rule."""

    breaks: str  # the safety property (P1..P10) its counterexample must violate
    # "L" when the liveness claim (no faults) must fail too; None: it must hold.
    liveness: str | None = None
    bounds: tuple[str, ...] = ()  # defines beyond the model's own bounds it needs


# Each mutant removes one rule of the protocol (a -D flag of the model) and must
# break this property; the model's header says what each property states.
MUTANTS: dict[str, Mutant] = {
    "NO_GEN_CHECK": Mutant("P1"),
    "NO_SHARD_CHECK": Mutant("P2"),
    "NO_CURSOR_RESET": Mutant("P3"),
    "NO_VERIFY": Mutant("P4"),
    "NO_STEP_CHECK": Mutant("P5"),
    "LATEST_STAYS": Mutant("P5"),
    "STOP_FIRST": Mutant("P6"),
    "START_AFTER_CANCEL": Mutant("P7"),
    "LOST_NOT_STOPPED": Mutant("P8"),
    "UNFENCED_START": Mutant("P8"),
    "RESUME_OTHER": Mutant("P9"),
    "PROPOSE_OWN_WRITE": Mutant("P10", liveness="L"),
    "VFAIL_ANY_GEN": Mutant("P1", bounds=WIDE),
}

# pan's memory bound and search depth: a run that reaches either is incomplete.
MEMLIM_MB = 4096
DEPTH = 20_000
SAFETY_CC = ("-DSAFETY", "-DNOCLAIM", "-DCOLLAPSE", f"-DMEMLIM={MEMLIM_MB}")
BITSTATE_CC = ("-DSAFETY", "-DNOCLAIM", "-DBITSTATE")
LIVENESS_CC = ("-DCOLLAPSE", "-DNFAIR=3", f"-DMEMLIM={MEMLIM_MB}")


@dataclass(frozen=True, slots=True)
class Result:
    """One pan run: the state space it explored and what it found."""

    name: str
    defines: tuple[str, ...]
    states: int
    transitions: int
    depth: int
    errors: int
    complete: bool  # the whole state space, within the memory bound and depth
    seconds: float
    # The property whose assertion failed (P1..P10), or "L" for an acceptance cycle.
    violated: str | None = None
    line: int | None = None  # the failed assertion's line in the model
    # The counterexample's transitions (proof.traces' lines), when there is one.
    trail: tuple[str, ...] = ()
    # A bitstate search: its hash factor (bits of hash array per state stored).
    hash_factor: float | None = None

    @property
    def coverage(self) -> float | None:
        """A bitstate search's coverage, by the usual estimate: at its end, a new
        state is taken for a visited one with probability (1 - e^(-k/hf))^k, so at
        least 1 minus that of the states were searched."""
        if self.hash_factor is None:
            return None
        return 1 - (1 - math.exp(-BITSTATE_K / self.hash_factor)) ** BITSTATE_K

    @property
    def verdict(self) -> str:
        if self.errors:
            where = f" (line {self.line})" if self.line else ""
            return f"violates {self.violated}{where}"
        if self.coverage is not None:
            return (f"no violation (bitstate, hash factor {self.hash_factor:.1f}, "
                    f"coverage >= {self.coverage:.2%})")
        return "holds" if self.complete else "INCOMPLETE"


def _stat(pattern: str, text: str) -> int:
    m = re.search(pattern, text)
    return int(float(m.group(1))) if m else 0


def _property_at(line: int) -> str | None:
    """The property an assertion on ``line`` of the model checks (its ``/* Pn */``)."""
    lines = MODEL.read_text(encoding="utf-8").splitlines()
    m = re.search(r"/\* (P\d+) \*/", lines[line - 1]) if 0 < line <= len(lines) else None
    return m.group(1) if m else None


def _run(cmd: Sequence[str], cwd: Path) -> str:
    done = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0 and cmd[0] != "./pan":
        raise ProofError(f"{' '.join(cmd)} failed ({done.returncode}): "
                         f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout + done.stderr


def tools() -> None:
    """Raise unless spin and gcc are on PATH, saying how to get them."""
    missing = [t for t in ("spin", "gcc") if shutil.which(t) is None]
    if missing:
        raise ProofError(f"{' and '.join(missing)} not found: run scripts/spin.sh (as root; "
                         "`make test` does), or apt-get install spin gcc")


def verify(name: str, defines: Sequence[str] = (), *, liveness: str | None = None,
           bitstate: bool = False) -> Result:
    """Generate, compile and run pan for the model with ``defines`` (``-DNAME``);
    with ``liveness``, check that ltl claim under weak fairness instead of safety
    (assertions off, ``pan -A``: the verdict is the claim's alone); with ``bitstate``,
    search for safety with a bitstate hash, which may miss states (``coverage``)."""
    tools()
    flags = tuple(f"-D{d}" for d in defines)
    with tempfile.TemporaryDirectory(prefix="rl-spin-") as tmp:
        work = Path(tmp)
        shutil.copy(MODEL, work / MODEL.name)
        started = time.perf_counter()
        _run(["spin", "-a", *flags, MODEL.name], work)
        cc = LIVENESS_CC if liveness else BITSTATE_CC if bitstate else SAFETY_CC
        _run(["gcc", "-O2", "-w", *cc, "-o", "pan", "pan.c"], work)
        args = (["-a", "-f", "-A", "-N", liveness] if liveness
                else [f"-w{BITSTATE_W}", f"-k{BITSTATE_K}"] if bitstate else [])
        out = _run(["./pan", f"-m{DEPTH}", *args], work)
        seconds = time.perf_counter() - started
        if "errors:" not in out:
            raise ProofError(f"pan ended without a verdict:\n{out[-2000:]}")
        errors = _stat(r"errors: (\d+)", out)
        line, trace, violated = None, "", None
        if errors:
            trace = _run(["spin", "-t", "-T", *flags, MODEL.name], work)
            m = re.search(r"protocol\.pml:(\d+), Error: assertion violated", trace)
            if "acceptance cycle" in out:
                violated = "L"  # (the trail's replay checks assertions: no line of one)
            elif m:
                line = int(m.group(1))
                violated = _property_at(line)
    incomplete = bitstate or "reached -DMEMLIM bound" in out or \
        "max search depth too small" in out
    hf = re.search(r"hash factor: ([\d.e+]+)", out) if bitstate else None
    return Result(name=name, defines=tuple(defines),
                  states=_stat(r"([\d.e+]+) states, stored", out),
                  transitions=_stat(r"([\d.e+]+) transitions", out),
                  depth=_stat(r"depth reached (\d+)", out), errors=errors,
                  complete=not incomplete, seconds=seconds, violated=violated, line=line,
                  trail=tuple(x.strip() for x in trace.splitlines() if x.strip().startswith("@")),
                  hash_factor=float(hf.group(1)) if hf else None)


def full() -> Result:
    """Every property, every interleaving, up to the model's bounds: two generations,
    two checkpoint steps, two faults."""
    return verify("safety: P1-P10, G=2 S=2, faults <= 2")


def wide() -> Result:
    """Every property, every interleaving, at the bounds where a revoked generation's
    restore can fail a verification (``WIDE``: three generations, three faults, one
    checkpoint step)."""
    return verify("safety: P1-P10, G=3 S=1, faults <= 3", WIDE)


def supertrace() -> Result:
    """Every property at three generations, two checkpoint steps and three faults,
    which do not fit an exhaustive search: a bitstate search, with its coverage."""
    return verify("safety: P1-P10, G=3 S=2, faults <= 3", SUPERTRACE, bitstate=True)


def live(name: str | None = None) -> Result:
    """With no faults, the run eventually commits its last step (weak fairness); with
    ``name``, under that mutant."""
    if name is None:
        return verify("liveness: no faults, <> latest == S", ("NOFAULTS",), liveness="commits")
    m = MUTANTS[name]
    return verify(f"  {name}, liveness (must {'break L' if m.liveness else 'hold'})",
                  (name, "NOFAULTS", *m.bounds), liveness="commits")


def mutant(name: str) -> Result:
    m = MUTANTS[name]
    at = f", {' '.join(m.bounds)}" if m.bounds else ""
    return verify(f"mutant {name} (must break {m.breaks}{at})", (name, *m.bounds))


def expected(name: str, r: Result) -> bool:
    """A check holds completely; a mutant's safety run breaks exactly the property it
    names, and its liveness run (``name`` ``NAME:L``) breaks L or holds, as recorded.
    A bitstate search finds no violation, with a hash factor of at least 10."""
    if r.hash_factor is not None:
        return r.errors == 0 and r.hash_factor >= 10
    mutated, _, claim = name.partition(":")
    if mutated in MUTANTS:
        want = MUTANTS[mutated].liveness if claim else MUTANTS[mutated].breaks
        if want is None:
            return r.errors == 0 and r.complete
        return r.errors > 0 and r.violated == want
    return r.errors == 0 and r.complete


def caught(safety: Result, liveness: Result) -> bool:
    """A mutant is caught when either of its runs breaks a property."""
    return safety.errors > 0 or liveness.errors > 0


def _row(r: Result) -> list[str]:
    return [r.name, f"{r.states:,}", f"{r.transitions:,}", str(r.depth), r.verdict,
            f"{r.seconds:.1f}"]


CHECKS = ("safety", "wide", "supertrace", "liveness")


def _check(name: str) -> Result:
    if name in CHECKS:
        return {"safety": full, "wide": wide, "supertrace": supertrace, "liveness": live}[name]()
    mutated, _, claim = name.partition(":")
    return live(mutated) if claim else mutant(mutated)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--only", choices=[*CHECKS, *MUTANTS], action="append",
                        help="run only these rows (repeatable; a mutant: both of its rows)")
    parser.add_argument("--quick", action="store_true",
                        help="every row but the bitstate search (supertrace)")
    args = parser.parse_args(argv)
    # The long bitstate search last, so the rest of the table comes first.
    every = ["safety", "wide", "liveness", *MUTANTS, *(() if args.quick else ("supertrace",))]
    todo = [x for name in (args.only or every)
            for x in ((name,) if name in CHECKS else (name, f"{name}:L"))]
    rows, failed, results = [], [], {}
    try:
        for name in todo:
            r = results[name] = _check(name)
            rows.append(_row(r))
            print("  ".join(rows[-1]), flush=True)
            if not expected(name, r):
                failed.append(name)
    except ProofError as exc:
        print(f"proof: {exc}", file=sys.stderr)
        return 2
    head = ["check", "states", "transitions", "depth", "verdict", "s"]
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    print()
    for line in (head, ["-" * w for w in widths], *rows):
        print("  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)))
    names = [n for n in MUTANTS if n in results]
    if names:
        n_caught = sum(caught(results[n], results[f"{n}:L"]) for n in names)
        print(f"\nmutants caught: {n_caught} of {len(names)} (by safety "
              f"{sum(results[n].errors > 0 for n in names)}, by liveness "
              f"{sum(results[f'{n}:L'].errors > 0 for n in names)})")
    if failed:
        print(f"proof: not as expected: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
