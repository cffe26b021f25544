"""Run SPIN over ``proof/protocol.pml``: the exhaustive safety check, the liveness
claim, and the mutants, each of which must break the property it names.

``python -m proof.spin`` prints one table (what docs/verification.md's "The protocol,
model-checked" shows); ``--only NAME`` runs one of its rows. Needs ``spin`` and
``gcc`` on PATH (``scripts/spin.sh`` installs Debian's spin; ``make test`` runs it).

Tested in tests/proof/test_spin.py.
"""

from __future__ import annotations

import argparse
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

# Each mutant removes one rule of the protocol (a -D flag of the model) and must
# break this property; the model's header says what each property states.
MUTANTS: dict[str, str] = {
    "NO_GEN_CHECK": "P1",
    "NO_SHARD_CHECK": "P2",
    "NO_CURSOR_RESET": "P3",
    "NO_VERIFY": "P4",
    "NO_STEP_CHECK": "P5",
    "LATEST_STAYS": "P5",
    "STOP_FIRST": "P6",
}

# pan's memory bound and search depth: a run that reaches either is incomplete.
MEMLIM_MB = 4096
DEPTH = 20_000
SAFETY_CC = ("-DSAFETY", "-DNOCLAIM", "-DCOLLAPSE", f"-DMEMLIM={MEMLIM_MB}")
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
    violated: str | None = None  # the property (P1..P6) whose assertion failed
    line: int | None = None  # its line in the model
    # The counterexample's transitions (proof.traces' lines), when there is one.
    trail: tuple[str, ...] = ()


def _stat(pattern: str, text: str) -> int:
    m = re.search(pattern, text)
    return int(float(m.group(1))) if m else 0


def _property_at(line: int) -> str | None:
    """The property an assertion on ``line`` of the model checks (its ``/* Pn */``)."""
    lines = MODEL.read_text(encoding="utf-8").splitlines()
    m = re.search(r"/\* (P\d) \*/", lines[line - 1]) if 0 < line <= len(lines) else None
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


def verify(name: str, defines: Sequence[str] = (), *, liveness: str | None = None) -> Result:
    """Generate, compile and run pan for the model with ``defines`` (``-DNAME``);
    with ``liveness``, check that ltl claim under weak fairness instead of safety."""
    tools()
    flags = tuple(f"-D{d}" for d in defines)
    with tempfile.TemporaryDirectory(prefix="rl-spin-") as tmp:
        work = Path(tmp)
        shutil.copy(MODEL, work / MODEL.name)
        started = time.perf_counter()
        _run(["spin", "-a", *flags, MODEL.name], work)
        cc = LIVENESS_CC if liveness else SAFETY_CC
        _run(["gcc", "-O2", "-w", *cc, "-o", "pan", "pan.c"], work)
        args = ["-a", "-f", "-N", liveness] if liveness else []
        out = _run(["./pan", f"-m{DEPTH}", *args], work)
        seconds = time.perf_counter() - started
        if "errors:" not in out:
            raise ProofError(f"pan ended without a verdict:\n{out[-2000:]}")
        errors = _stat(r"errors: (\d+)", out)
        line, trace = None, ""
        if errors:
            trace = _run(["spin", "-t", "-T", *flags, MODEL.name], work)
            m = re.search(r"protocol\.pml:(\d+), Error: assertion violated", trace)
            line = int(m.group(1)) if m else None
    incomplete = "reached -DMEMLIM bound" in out or "max search depth too small" in out
    return Result(name=name, defines=tuple(defines),
                  states=_stat(r"([\d.e+]+) states, stored", out),
                  transitions=_stat(r"([\d.e+]+) transitions", out),
                  depth=_stat(r"depth reached (\d+)", out), errors=errors,
                  complete=not incomplete, seconds=seconds,
                  violated=_property_at(line) if line else None, line=line,
                  trail=tuple(x.strip() for x in trace.splitlines() if x.strip().startswith("@")))


def full() -> Result:
    """Every property, every interleaving, up to the model's fault bound."""
    return verify("safety: P1-P6, faults <= 2")


def live() -> Result:
    """With no faults, the run eventually commits its last step (weak fairness)."""
    return verify("liveness: no faults, <> latest == S", ("NOFAULTS",), liveness="commits")


def mutant(name: str) -> Result:
    return verify(f"mutant {name} (must break {MUTANTS[name]})", (name,))


def _row(r: Result) -> list[str]:
    verdict = (f"violates {r.violated} (line {r.line})" if r.errors
               else "holds" if r.complete else "INCOMPLETE")
    return [r.name, f"{r.states:,}", f"{r.transitions:,}", str(r.depth), verdict,
            f"{r.seconds:.1f}"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--only", choices=["safety", "liveness", *MUTANTS], action="append",
                        help="run only these rows (repeatable)")
    args = parser.parse_args(argv)
    todo = args.only or ["safety", "liveness", *MUTANTS]
    rows = []
    failed = []
    try:
        for name in todo:
            r = full() if name == "safety" else live() if name == "liveness" else mutant(name)
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
    if failed:
        print(f"proof: not as expected: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def expected(name: str, r: Result) -> bool:
    """A check holds completely; a mutant breaks exactly the property it names."""
    if name in MUTANTS:
        return r.errors > 0 and r.violated == MUTANTS[name]
    return r.errors == 0 and r.complete


if __name__ == "__main__":
    raise SystemExit(main())
