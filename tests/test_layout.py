"""The shape of the code: the dependency rule, no import cycles, small modules and functions,
and a test file for every module.

The dependency rule is docs/architecture.md §2. Imports are read with ``ast`` from the
source, so an import inside a function or under ``TYPE_CHECKING`` counts too:
it is still a dependency a reader has to follow.

A test of ``x/y.py`` lives in ``tests/x/test_y.py``; a module tested elsewhere (through
the command line, end to end, or with its neighbours) says so in its docstring, as
``Tested in tests/....py`` naming one or more test files.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Package -> the project packages it may import (besides itself).
ALLOWED: dict[str, frozenset[str]] = {
    "events": frozenset(),
    "schemas": frozenset(),
    "dataplane": frozenset(),
    "agent": frozenset({"events"}),
    "worker": frozenset({"events", "dataplane"}),
    "controller": frozenset({"events", "dataplane"}),
    "projectors": frozenset({"events"}),
    "queries": frozenset({"projectors", "events"}),
    "runledger": frozenset({"events", "schemas", "dataplane", "agent", "worker", "controller",
                            "projectors", "queries"}),
    # The simulator and the trace replay run the real pure core against a model.
    "proof": frozenset({"events", "agent", "controller", "projectors", "queries"}),
}
PACKAGES = tuple(ALLOWED)

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
# The fold's per-event ``match`` tables read best whole: one case per event type.
LONG_FUNCTIONS_ALLOWED = {("events/fold.py", "_check"), ("events/fold.py", "_advance")}


def _modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            name = ".".join(rel.with_suffix("").parts)
            yield name.removesuffix(".__init__"), path


def _imports(path: Path, module: str, modules: set[str]) -> set[str]:
    """Every module named by an import in ``path``, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base)
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            # ``from pkg import mod`` depends on the module pkg.mod; ``from pkg import
            # name`` on pkg itself. The caller keeps the names that are modules.
            out.update(f"{target}.{alias.name}" for alias in node.names)
            if not all(f"{target}.{alias.name}" in modules for alias in node.names):
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = dict(_modules())
    names = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {m for m in _imports(path, name, names) if m in modules and m != name}
    return graph


def test_every_package_imports_only_what_the_dependency_rule_allows() -> None:
    violations = []
    names = {name for name, _ in _modules()}
    for name, path in _modules():
        package = name.split(".")[0]
        for target in sorted(_imports(path, name, names)):
            top = target.split(".")[0]
            if top in ALLOWED and top != package and top not in ALLOWED[package]:
                violations.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not violations, "\n".join(violations)


def test_no_module_import_cycle() -> None:
    graph = _graph()
    cycles = _cycles(graph)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_production_module_is_over_the_limit() -> None:
    long = []
    for _, path in _modules():
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not long, "\n".join(long)


def test_no_function_is_over_the_limit() -> None:
    long = []
    for _, path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and (rel, node.name) not in LONG_FUNCTIONS_ALLOWED:
                    long.append(f"{rel}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "\n".join(long)


# "Tested in tests/a/test_b.py, tests/c/test_d.py and tests/e/test_f.py." ends at the
# first full stop that does not start ".py".
TESTED_IN = re.compile(r"Tested in (.+?)\.(?!py\b)", re.S)
TEST_PATH = re.compile(r"tests/[\w/]+\.py")


def _tested_in(doc: str) -> list[str]:
    found = TESTED_IN.search(doc)
    return TEST_PATH.findall(found.group(1)) if found else []


def test_every_module_has_its_test_file_or_names_the_ones_that_test_it() -> None:
    """A test of ``x/y.py`` is ``tests/x/test_y.py``; a module tested elsewhere says where."""
    lost = []
    for _, path in _modules():
        rel = path.relative_to(ROOT)
        if path.name == "__init__.py":
            continue
        if (ROOT / "tests" / rel.parent / f"test_{path.name}").is_file():
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        named = _tested_in(doc)
        missing = [p for p in named if not (ROOT / p).is_file()]
        if not named:
            lost.append(f"{rel}: no tests/{rel.parent}/test_{path.name} and no 'Tested in' line")
        elif missing:
            lost.append(f"{rel}: 'Tested in' names missing files: {', '.join(missing)}")
    assert not lost, "\n".join(lost)


def test_the_tested_in_reader() -> None:
    doc = "Pure.\n\nTested in tests/a/test_b.py, tests/c/test_d.py and\ntests/e/test_f.py. More."
    assert _tested_in(doc) == ["tests/a/test_b.py", "tests/c/test_d.py", "tests/e/test_f.py"]
    assert _tested_in("Tested in tests/a/test_b.py.") == ["tests/a/test_b.py"]
    assert _tested_in("Tested in the field.") == []
    assert _tested_in("No line at all; tests/a/test_b.py is only mentioned.") == []


def test_every_test_file_says_what_it_covers() -> None:
    bare = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").rglob("test_*.py"))
            if not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))]
    assert not bare, "test files without a docstring:\n" + "\n".join(bare)
