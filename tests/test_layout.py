"""The shape of the code: the dependency rule, no import cycles, no private names across
modules, small modules and functions, and a test file for every module.

The dependency rule is docs/architecture.md §2. Imports are read with ``ast`` from the
source, so an import inside a function or under ``TYPE_CHECKING`` counts too:
it is still a dependency a reader has to follow.

A ``_name`` (one leading underscore, not a dunder) belongs to its module: no other
project module imports it or reaches it as ``module._name``; a third-party package's
private names are not the project's to police. A module's size is its lines of code:
blank lines, comment-only lines and docstrings (module, class, function) do not count,
so explaining a module never costs it its budget.

A test of ``x/y.py`` lives in ``tests/x/test_y.py``; a module tested elsewhere (through
the command line, end to end, or with its neighbours) says so in its docstring, as
``Tested in tests/....py`` naming one or more test files.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
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
LONG_FUNCTIONS_ALLOWED = {("events/fold.py", "_check"), ("events/fold.py", "advance")}


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


# Below the package line (docs/architecture.md §2): places inside a package that may not
# import named places of the same package. The CLI's commands sit above every place
# beside them: a view, a rehearsal or the live view that needed a command's code
# would tie itself to Typer and to that command's options.
FORBIDDEN_WITHIN: dict[str, tuple[str, ...]] = {
    "runledger.views": ("runledger.commands", "runledger.app", "runledger.cli",
                        "runledger.rehearse", "runledger.ui", "runledger.demo"),
    "runledger.rehearse": ("runledger.commands", "runledger.app", "runledger.cli",
                           "runledger.ui", "runledger.demo"),
    "runledger.ui": ("runledger.commands", "runledger.app", "runledger.cli",
                     "runledger.rehearse", "runledger.demo"),
    "runledger.stack": ("runledger.commands", "runledger.app", "runledger.cli",
                        "runledger.rehearse", "runledger.views", "runledger.ui",
                        "runledger.demo"),
    # The kernel of events is pure: it judges records and folds facts without a Kafka
    # client or a signature library; the signing side verifies a copy of the log in
    # files, so it needs no broker either.
    "events.signed": ("events.kafka",),
    # The spec is read by the core; it reads the core's parsers of its sections
    # (alerts, gates, policy), never the process shell around them.
    "controller.spec": ("controller.service", "controller.reconcile", "controller.model",
                        "controller.inputs", "controller.emitter"),
}


# The kernel: every module directly in ``events``. Its edges, and the libraries only
# they may load.
EVENTS_EDGES = ("events.kafka", "events.signed")
EDGE_LIBRARIES = ("confluent_kafka", "cryptography", "nacl")


def test_the_events_kernel_imports_neither_edge_nor_their_libraries() -> None:
    violations = []
    names = {name for name, _ in _modules()}
    for name, path in _modules():
        if not name.startswith("events.") or any(_under(name, e) for e in EVENTS_EDGES):
            continue
        for target in sorted(_imports(path, name, names)):
            if any(_under(target, e) for e in (*EVENTS_EDGES, *EDGE_LIBRARIES)):
                violations.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not violations, "\n".join(violations)


def _under(name: str, place: str) -> bool:
    return name == place or name.startswith(place + ".")


def test_places_within_a_package_import_only_what_their_rule_allows() -> None:
    violations = []
    names = {name for name, _ in _modules()}
    for name, path in _modules():
        for place, forbidden in FORBIDDEN_WITHIN.items():
            if not _under(name, place):
                continue
            for target in sorted(_imports(path, name, names)):
                if any(_under(target, f) for f in forbidden):
                    violations.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not violations, "\n".join(violations)


def test_every_place_the_rule_names_exists() -> None:
    names = {name for name, _ in _modules()}
    places = {*FORBIDDEN_WITHIN, *(f for fs in FORBIDDEN_WITHIN.values() for f in fs)}
    missing = sorted(p for p in places if not any(_under(n, p) for n in names))
    assert not missing, f"the rule names places that do not exist: {missing}"


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


def test_no_module_uses_another_modules_private_names() -> None:
    """``_name`` (one underscore, not a dunder) is its module's own: no other project
    module imports it (``from x.y import _z``) or reaches it (``y._z`` of an imported
    ``x.y``). Private names of third-party packages (``torch._weights_only_unpickler``
    in worker/verified.py) are not the project's to keep private and are not checked."""
    modules = dict(_modules())
    found = []
    for name, path in modules.items():
        rel = path.relative_to(ROOT)
        found += [f"{rel}:{line} {use}" for line, use in _private_uses(path, name, set(modules))]
    assert not found, "\n".join(found)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_uses(path: Path, module: str, modules: set[str]) -> list[tuple[int, str]]:
    """Where ``path`` imports or reaches a private name of another project module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[tuple[int, str]] = []
    bound: dict[str, str] = {}  # a local name -> the project module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name if alias.asname else alias.name.split(".")[0]
                if top in modules or alias.name in modules:
                    bound[alias.asname or top] = top
        elif isinstance(node, ast.ImportFrom):
            found = _imports_of(node, path, module)
            for alias in node.names:
                full = f"{found}.{alias.name}"
                if found in modules and found != module and _private(alias.name):
                    out.append((node.lineno, f"imports {alias.name} from {found}"))
                elif full in modules:
                    bound[alias.asname or alias.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = _dotted(node.value, bound)
            if owner in modules and owner != module:
                out.append((node.lineno, f"uses {owner}.{node.attr}"))
    return sorted(out)


def _imports_of(node: ast.ImportFrom, path: Path, module: str) -> str:
    """The module ``from ... import`` names, a relative one resolved."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if path.name == "__init__.py" else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """``a.b.c`` as the module it names, its first name resolved through ``bound``."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value, bound)
        return f"{owner}.{node.attr}" if owner is not None else None
    return None


def test_the_private_name_finder_finds_both_forms(tmp_path: Path) -> None:
    mod = tmp_path / "user.py"
    mod.write_text("import a.b\nimport a.c as c\nfrom a import d\nfrom a.b import _x, y, __all__\n"
                   "from torch import _private\n\n"
                   "a.b._y()\nc._z\nd._w\nd.__name__\nc.ok\n_private._q\n")
    modules = {"a", "a.b", "a.c", "a.d", "pkg.user"}
    assert _private_uses(mod, "pkg.user", modules) == [
        (4, "imports _x from a.b"), (7, "uses a.b._y"), (8, "uses a.c._z"), (9, "uses a.d._w")]


def test_no_production_module_is_over_the_limit() -> None:
    long = []
    for _, path in _modules():
        lines = _code_lines(path.read_text(encoding="utf-8"))
        if lines > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines of code")
    assert not long, "\n".join(long)


def _code_lines(source: str) -> int:
    """Lines that hold code: not blank, not only a comment, not part of a docstring
    (a module's, class's or function's first statement when it is a string)."""
    docs: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                docs.append(((first.lineno, first.col_offset),
                             (first.end_lineno or first.lineno, first.end_col_offset or 0)))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in _NOT_CODE:
            continue
        if tok.type == tokenize.STRING and any(a <= tok.start and tok.end <= b for a, b in docs):
            continue  # a docstring (a concatenated one is several tokens)
        lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines)


_NOT_CODE = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                       tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING})


def test_the_code_line_counter_counts_code_only() -> None:
    source = (
        '"""A module\n\nwith a docstring."""\n'
        "\n"
        "# a comment alone\n"
        "import os  # a comment after code\n"
        "\n"
        "\n"
        "def f(x: int) -> str:\n"
        '    """A function\'s docstring,\n'
        '    on two lines."""\n'
        "    # another comment\n"
        '    s = """a string that is\n'
        '    no docstring"""\n'
        "    return s + os.sep\n"
        "\n"
        "\n"
        "class C:\n"
        "    \'\'\'A class\'s.\'\'\' \'\'\' concatenated\'\'\'\n"
        "    y = (1,\n"
        "\n"
        "         2)\n"
    )
    # import, def, the two lines of s, return, class, and y's two lines (not the blank one).
    assert _code_lines(source) == 8
    assert _code_lines('"""Only a docstring."""\n') == 0
    assert _code_lines("x = 1\n") == 1


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


def test_every_package_is_installed() -> None:
    """A package missing from pyproject's list works in the editable install the
    suite uses and is absent from a wheel: a user's ``pip install`` would fail."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for package in ("events", "schemas", "agent", "controller", "worker", "dataplane",
                             "projectors", "queries", "runledger")
             for p in (ROOT / package).rglob("__init__.py")}
    assert found == listed, f"missing: {sorted(found - listed)}; stale: {sorted(listed - found)}"
