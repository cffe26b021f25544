"""Mutation testing of the pure core, judged by the simulation and the model's traces alone.

A *mutant* changes one thing on one line of a rule of the pure core
(``TARGETS``: the run fold, the controller's checkpoint, input, lifecycle and
liveness decisions, the agent's decision): a comparison negated (``==`` to
``!=``, ``<`` to ``>=``, ``in`` to ``not in``...), ``and`` swapped with
``or``, one operand of an ``and``/``or`` dropped, a ``not`` dropped, an
integer constant off by one, or ``True`` swapped with ``False``. The
catalogue is generated from the source (``ast``), in source order, so it
grows with the code and every mutant has a name that stays while its rule
does (``module:function:kind``, ``#n`` for the n-th of a kind there).

A mutant is applied in place: the function's code object is swapped for one
compiled from the mutated source (every caller, however it imported the
function, runs the mutant), and put back after. It is *killed* when, with it
applied:

- a replay of SPIN's traces of the model (``proof.traces``, computed once)
  disagrees with the model; or
- the deterministic simulation (``proof.sim``) breaks a property, crashes, or
  runs past its time limit, on one of its seeds.

The unit tests are not asked: the point is to measure what the proofs
find. A mutant that survives is either harmless (it changes nothing the
system promises: an equivalent mutant) or names a property or a fault the
simulation lacks; docs/verification.md lists every survivor of the CI sample.

``python -m proof.mutants`` runs the whole catalogue (``make proof``);
``--sample N`` every N-th mutant; ``--seeds``, ``--traces`` the budget of each.

Tested in tests/proof/test_mutants.py.
"""

from __future__ import annotations

import argparse
import ast
import copy
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from proof import sim
from proof.errors import ProofError
from proof.swap import ROOT, functions, swapped
from proof.traces import replay, simulate

# The pure core's rules: each module's functions are mutated, its constants are not.
TARGETS = ("events/fold.py", "controller/checkpoints.py", "controller/inputs.py",
           "controller/run_decide.py", "controller/liveness.py", "agent/decide.py")
NEGATED: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
    ast.LtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
SEEDS = 300  # simulation seeds a mutant must survive (make proof: the whole catalogue)
TRACES = 60  # SPIN traces replayed against it
LIMIT_S = 60  # a mutant that takes longer than this on one check hangs: it is killed


class Timeout(Exception):
    """A mutant ran past ``LIMIT_S``: it made the core loop or crawl."""


@dataclass(frozen=True, slots=True)
class Mutant:
    path: str  # the target file, relative to the repository
    function: str  # its qualified name in the module
    line: int
    kind: str  # what changed, e.g. "== -> !=", "and -> or", "drop operand 2", "not dropped"
    index: int  # the node's place in the function, pre-order
    variant: int  # which change of that node
    source: str  # the line as written
    nth: int = 1  # the how-manieth mutant of this kind in its function

    @property
    def module(self) -> str:
        return self.path.removesuffix(".py").replace("/", ".")

    @property
    def name(self) -> str:
        """Stable while the function's rules stay: no line number in it."""
        return f"{self.module}:{self.function}:{self.kind}" + (
            f"#{self.nth}" if self.nth > 1 else "")


def _changes(node: ast.AST) -> list[str]:
    """What can be changed at ``node``, each a kind; [] for a node left alone."""
    match node:
        case ast.Compare(ops=[op]) if type(op) in NEGATED:
            return [f"{_sym(op)} -> {_sym(NEGATED[type(op)]())}"]
        case ast.BoolOp(op=op, values=values):
            swap = "and -> or" if isinstance(op, ast.And) else "or -> and"
            return [swap, *(f"drop operand {i + 1}" for i in range(len(values)))]
        case ast.UnaryOp(op=ast.Not()):
            return ["not dropped"]
        case ast.Constant(value=bool(flag)):
            return [f"{flag} -> {not flag}"]
        case ast.Constant(value=int(n)):
            return [f"{n} -> {n + 1}"]
    return []


def _sym(op: ast.cmpop) -> str:
    return {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.GtE: ">=", ast.Gt: ">",
            ast.LtE: "<=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is",
            ast.IsNot: "is not"}[type(op)]


def _changed(node: ast.AST, variant: int) -> ast.AST:
    match node:
        case ast.Compare(ops=[op]):
            return ast.Compare(node.left, [NEGATED[type(op)]()], node.comparators)
        case ast.BoolOp(op=op, values=values) if variant == 0:
            return ast.BoolOp(ast.Or() if isinstance(op, ast.And) else ast.And(), values)
        case ast.BoolOp(op=op, values=values):
            rest = values[:variant - 1] + values[variant:]
            return rest[0] if len(rest) == 1 else ast.BoolOp(op, rest)
        case ast.UnaryOp(operand=operand):
            return operand
        case ast.Constant(value=bool(flag)):
            return ast.Constant(not flag)
        case ast.Constant(value=int(n)):
            return ast.Constant(n + 1)
    raise ProofError(f"no change {variant} for {ast.dump(node)[:80]}")


def _preorder(fn: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``fn`` in a fixed order, skipping docstrings and annotations."""
    yield fn
    for name, value in ast.iter_fields(fn):
        if name in ("returns", "annotation", "decorator_list", "type_comment"):
            continue
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST) and not _docstring(child):
                yield from _preorder(child)


def _docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
        and isinstance(node.value.value, str)


class _Swap(ast.NodeTransformer):
    def __init__(self, target: ast.AST, variant: int) -> None:
        self.target, self.variant = target, variant

    def visit(self, node: ast.AST) -> ast.AST:
        if node is self.target:
            return ast.copy_location(_changed(node, self.variant), node)
        return self.generic_visit(node)


def catalogue(targets: Sequence[str] = TARGETS) -> list[Mutant]:
    """Every mutant of ``targets``, in source order."""
    out: list[Mutant] = []
    seen: Counter[tuple[str, str, str]] = Counter()
    for path in targets:
        text = (ROOT / path).read_text(encoding="utf-8")
        lines = text.splitlines()
        for qual, fn in functions(ast.parse(text)):
            for i, node in enumerate(_preorder(fn)):
                for v, kind in enumerate(_changes(node)):
                    line = getattr(node, "lineno", fn.lineno)
                    seen[path, qual, kind] += 1
                    out.append(Mutant(path, qual, line, kind, i, v, lines[line - 1].strip(),
                                      seen[path, qual, kind]))
    return out


def applied(m: Mutant) -> AbstractContextManager[None]:
    """``m`` in place for the block; the original code back after, whatever happens."""
    tree = ast.parse((ROOT / m.path).read_text(encoding="utf-8"))
    new = copy.deepcopy(dict(functions(tree))[m.function])
    changed = _Swap(list(_preorder(new))[m.index], m.variant).visit(new)
    assert isinstance(changed, ast.FunctionDef)
    return swapped(m.path, m.function, changed)


@contextmanager
def _limit(seconds: int) -> Iterator[None]:
    def expire(_sig: int, _frame: object) -> None:
        raise Timeout(f"over {seconds} s")
    before = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


@dataclass(frozen=True, slots=True)
class Verdict:
    mutant: Mutant
    killer: str | None  # what killed it ("trace 12: ...", "sim seed 40: P1 ..."); None: survived
    seconds: float


def judge(m: Mutant, traces: Sequence[Sequence[str]], seeds: int) -> Verdict:
    """Apply ``m`` and run the traces, then the simulation's seeds, until one kills it.
    A mutant that cannot be swapped in raises :class:`ProofError`; once it is in, any
    failure of the core is the proofs seeing it (a replay's own error included)."""
    began = time.perf_counter()
    killer: str | None = None
    swap = applied(m)
    with swap:
        try:
            with _limit(LIMIT_S):
                killer = _first_kill(traces, seeds)
        except Timeout as exc:
            killer = f"hang: {exc}"
        except Exception as exc:  # the mutant broke the core: the proofs saw it fail
            killer = f"crash: {type(exc).__name__}: {exc}"
    return Verdict(m, killer, time.perf_counter() - began)


def _first_kill(traces: Sequence[Sequence[str]], seeds: int) -> str | None:
    for i, lines in enumerate(traces):
        agreement = replay(lines)
        if not agreement.agrees:
            return f"trace {i}: {agreement.disagreement}"
    for seed in range(seeds):
        o = sim.Simulation(seed).run(ettr=seed % sim.ETTR_EVERY == 0)
        if o.prop is not None:
            return f"sim seed {seed}: {o.prop} {o.detail}"
    return None


def spin_traces(count: int) -> list[list[str]]:
    """SPIN's random simulations of the model, seeds 1..count (``proof.traces``)."""
    return [simulate(seed) for seed in range(1, count + 1)]


def run(mutants: Sequence[Mutant], *, seeds: int = SEEDS, traces: int = TRACES,
        echo: Callable[[str], None] | None = None) -> list[Verdict]:
    lines = spin_traces(traces)
    out = []
    for m in mutants:
        out.append(judge(m, lines, seeds))
        if echo:
            v = out[-1]
            echo(f"{'killed' if v.killer else 'SURVIVED'}  {m.name}  (line {m.line}) {m.source}"
                 + (f"  <- {v.killer[:120]}" if v.killer else ""))
    return out


def report(verdicts: Sequence[Verdict]) -> list[tuple[str, str]]:
    """The rows ``python -m proof.mutants`` prints: the kill rate, per module and overall."""
    rows = []
    per: Counter[str] = Counter()
    dead: Counter[str] = Counter()
    for v in verdicts:
        per[v.mutant.path] += 1
        dead[v.mutant.path] += v.killer is not None
    for path in sorted(per):
        rows.append((path, f"{dead[path]}/{per[path]} killed ({dead[path] / per[path]:.0%})"))
    n, k = len(verdicts), sum(v.killer is not None for v in verdicts)
    rows.append(("all", f"{k}/{n} killed ({k / n:.1%})" if n else "no mutant"))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m proof.mutants",
                                description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--sample", type=int, default=1, metavar="N", help="every N-th mutant")
    p.add_argument("--seeds", type=int, default=SEEDS, help=f"sim seeds (default {SEEDS})")
    p.add_argument("--traces", type=int, default=TRACES, help=f"SPIN traces (default {TRACES})")
    p.add_argument("--list", action="store_true", help="print the catalogue and stop")
    p.add_argument("--goal", type=float, default=0.0, help="exit 1 below this kill rate")
    args = p.parse_args(argv)
    mutants = catalogue()[::args.sample]
    if args.list:
        print("\n".join(f"{m.name}  (line {m.line}) {m.source}" for m in mutants))
        return 0
    began = time.perf_counter()
    try:
        verdicts = run(mutants, seeds=args.seeds, traces=args.traces, echo=print)
    except ProofError as exc:
        print(f"proof: {exc}", file=sys.stderr)
        return 2
    rows = report(verdicts)
    rows.append(("seconds", f"{time.perf_counter() - began:.0f}"))
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    rate = sum(v.killer is not None for v in verdicts) / max(1, len(verdicts))
    return 1 if rate < args.goal else 0


if __name__ == "__main__":
    sys.exit(main())
