"""A run spec's text, read safely: bounded size, bounded nesting, bounded aliases.

The spec is untrusted input to a long-lived controller, so its text is judged
before any of it is built: at most :data:`MAX_SPEC_BYTES` bytes (990,000:
``events.limits`` derives it so that its ``RunSubmitted``, and the
controller's signed copy of it on ``runledger.runs``, fit one record), mappings and
lists nested at most :data:`MAX_DEPTH` deep (PyYAML composes recursively: a
deeper document would end in ``RecursionError``), at most :data:`MAX_ALIASES`
aliases and :data:`MAX_NODES` values once every alias is expanded (a YAML
"billion laughs" document is a few hundred bytes that expand to 10⁹ values:
refused after counting, in milliseconds, never expanded). YAML is loaded with
a ``SafeLoader`` (no object tags) that also refuses a key given twice.

Every refusal is a :class:`~controller.errors.SpecError` naming the limit.

Tested in tests/controller/spec/test_text.py.
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from controller.errors import SpecError
from events import limits

MAX_SPEC_BYTES = limits.MAX_SPEC_BYTES
MAX_DEPTH = 32
MAX_ALIASES = 64
MAX_NODES = 100_000

TOO_LARGE = "too_large"
TOO_DEEP = "too_deep"
TOO_MANY_ALIASES = "too_many_aliases"
TOO_MANY_VALUES = "too_many_values"
WHOLE = "(spec)"  # the field path of a problem with the document as a whole


class _Limit(yaml.YAMLError):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def read_spec_text(path: str | Path) -> str:
    """The file's text; refused unread past :data:`MAX_SPEC_BYTES`."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
            size = os.fstat(f.fileno()).st_size  # a pipe says 0: then "more than"
        if len(data) > MAX_SPEC_BYTES:
            said = f"{size} bytes" if size > MAX_SPEC_BYTES else f"more than {MAX_SPEC_BYTES} bytes"
            raise SpecError(str(path), [too_large(said)])
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(str(path), [f"cannot read the file: {exc}"]) from None


def too_large(size: str) -> str:
    return (f"{WHOLE}: {TOO_LARGE}: the spec is {size}; the limit is {MAX_SPEC_BYTES} bytes"
            " (keep large configs out of the spec and name them by digest)")


def check_size(text: str, source: str, form: str = "") -> None:
    """Refuse ``text`` over :data:`MAX_SPEC_BYTES`; ``form`` says which form of the spec it is."""
    size = len(text.encode("utf-8"))
    if size > MAX_SPEC_BYTES:
        raise SpecError(source, [too_large(f"{size} bytes{form}")])


def load_yaml(text: str, source: str) -> Any:
    """The YAML document ``text`` as plain data, within every limit of this module."""
    check_size(text, source)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except _Limit as exc:
        raise SpecError(source, [f"{WHOLE}: {exc.reason}: {exc.message}"]) from None
    except yaml.YAMLError as exc:
        raise SpecError(source, [_yaml_problem(exc)]) from None
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node) -> None:
    """Count the values ``root`` holds with every alias expanded, each shared node once."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(v) for v in node.value)
        else:
            total = 1 + len(node.value) // 64  # long strings weigh more
        if total > MAX_NODES:
            raise _Limit(TOO_MANY_VALUES, f"more than {MAX_NODES} values once aliases are"
                                          " expanded")
        sizes[id(node)] = total
        return total

    size(root)  # recursion depth is bounded by MAX_DEPTH, checked while composing


class _Loader(yaml.SafeLoader):
    """SafeLoader with the limits of this module, refusing a key given twice."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Limit(TOO_MANY_ALIASES, f"more than {MAX_ALIASES} aliases (*name)")
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Limit(TOO_DEEP, f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # ``<<`` merges may be overridden on purpose
        key = loader.construct_object(key_node)
        if isinstance(key, Hashable):
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
    return loader.construct_mapping(node)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"not valid YAML: {where}{problem}"


def depth(value: Any) -> int:
    """How deep mappings and lists nest in ``value`` (a scalar is 1)."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 1
