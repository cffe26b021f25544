"""One function of the real core runs other code for a while: the in-place swap that
``proof.mutants`` and ``proof.plant`` both make.

The function object keeps its identity and only its code object changes, so
every caller runs the new code however it imported the function (``from x
import f`` included), and the old code is back when the block ends, whatever
happens in it. A cache in front of the function (``functools.cache``) is
cleared on the way in and out.

Tested in tests/proof/test_mutants.py.
"""

from __future__ import annotations

import ast
import importlib
import types
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from proof.errors import ProofError

ROOT = Path(__file__).resolve().parents[1]


def functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef]]:
    """A module's functions and its classes' methods, by qualified name, in source order."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for inner in node.body:
                if isinstance(inner, ast.FunctionDef):
                    yield f"{node.name}.{inner.name}", inner


def _live(module: str, function: str) -> tuple[types.FunctionType, Callable[[], None]]:
    """The function object to change, and what clears a cache in front of it."""
    obj: Any = importlib.import_module(module)
    for part in function.split("."):
        obj = obj.__dict__[part] if isinstance(obj, type) else getattr(obj, part)
    obj = getattr(obj, "fget", None) or getattr(obj, "__func__", None) or obj
    clear = getattr(obj, "cache_clear", lambda: None)
    fn = getattr(obj, "__wrapped__", obj)
    if not isinstance(fn, types.FunctionType):
        raise ProofError(f"{module}.{function} is no plain function")
    return fn, clear


def _compiled(path: str, fn: ast.FunctionDef) -> types.CodeType:
    """The code object of the function definition ``fn`` (of the file ``path``)."""
    fn.decorator_list = []
    module = ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[]))
    code = compile(module, str(ROOT / path), "exec")
    return next(c for c in code.co_consts
                if isinstance(c, types.CodeType) and c.co_name == fn.name)


@contextmanager
def swapped(path: str, function: str, fn: ast.FunctionDef) -> Iterator[None]:
    """The function runs ``fn``'s code in the block, its own code after, whatever happens."""
    live, clear = _live(path.removesuffix(".py").replace("/", "."), function)
    code = _compiled(path, fn)
    if code.co_freevars != live.__code__.co_freevars:
        raise ProofError(f"{path}:{function}: the changed closure differs; it cannot be "
                         "swapped in")
    saved = live.__code__
    live.__code__ = code
    clear()
    try:
        yield
    finally:
        live.__code__ = saved
        clear()


def patched(path: str, function: str, old: str, new: str) -> AbstractContextManager[None]:
    """``function`` of ``path`` with the text ``old`` (once in it) written as ``new``: a bug
    planted in its source, in place for the block (``proof.plant``)."""
    text = (ROOT / path).read_text(encoding="utf-8")
    fn = dict(functions(ast.parse(text)))[function]
    lines = text.splitlines(keepends=True)
    first, last = fn.lineno - 1, fn.end_lineno or fn.lineno
    body = "".join(lines[first:last])
    if body.count(old) != 1:
        raise ProofError(f"{path}:{function} holds {old!r} {body.count(old)} times, not once")
    changed = "".join(lines[:first]) + body.replace(old, new) + "".join(lines[last:])
    return swapped(path, function, dict(functions(ast.parse(changed)))[function])


