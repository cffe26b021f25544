"""A spec's text is judged before it is built: size, nesting depth and YAML aliases are
bounded, each refusal is a SpecError naming the limit, and a YAML bomb is refused quickly."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from controller.errors import SpecError
from controller.spec.runspec import load_spec, parse_spec, parse_spec_json
from controller.spec.text import (
    MAX_ALIASES,
    MAX_DEPTH,
    MAX_NODES,
    MAX_SPEC_BYTES,
    TOO_DEEP,
    TOO_LARGE,
    TOO_MANY_ALIASES,
    TOO_MANY_VALUES,
    depth,
    load_yaml,
)
from tests.controller.spec.test_runspec import MINIMAL, spec_of, with_

BASE = yaml.safe_dump(MINIMAL)


def problem(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "t.yaml")
    [only] = info.value.problems
    return only


def bomb(levels: int, width: int) -> str:
    """The "billion laughs": ``levels`` lists of ``width`` aliases of the level below."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def in_model(text: str) -> str:
    """``text`` (a block mapping) as the spec's ``model``: where a user may put anything."""
    indented = "".join(f"  {line}\n" for line in text.splitlines())
    return BASE.replace("model:\n", "model:\n" + indented, 1)


def test_a_plain_spec_is_within_every_limit() -> None:
    assert parse_spec(BASE, "t.yaml") == spec_of(MINIMAL)
    assert load_yaml("a: 1", "t") == {"a": 1} and load_yaml("", "t") is None


def test_a_text_over_the_size_limit_is_refused_before_parsing(tmp_path: Path) -> None:
    text = BASE + "# " + "x" * MAX_SPEC_BYTES + "\n"
    started = time.perf_counter()
    assert problem(text).startswith(f"(spec): {TOO_LARGE}: the spec is {len(text)} bytes")
    assert time.perf_counter() - started < 0.5
    path = tmp_path / "big.yaml"
    path.write_text(text)
    size = len(text.encode())  # read no further than the limit, yet the file's size is said
    with pytest.raises(SpecError, match=f"the spec is {size} bytes; the limit is {MAX_SPEC_BYTES}"):
        load_spec(path)


def test_a_spec_whose_recorded_json_outgrows_the_limit_is_refused() -> None:
    # 60 aliases of one 20 kB string: a 20 kB text, a 1.2 MB canonical JSON.
    text = in_model("s: &s " + "y" * 20_000 + "\nt: [" + ", ".join(["*s"] * 60) + "]")
    assert problem(text).startswith(f"(spec): {TOO_LARGE}: the spec is")
    assert "as canonical JSON" in problem(text)


@pytest.mark.parametrize("nested", [
    "x: " + "[" * 5000 + "]" * 5000,  # deep enough for a RecursionError without the limit
    "x:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(MAX_DEPTH)) + "  " * 33 + "v: 1",
])
def test_deep_nesting_is_refused(nested: str) -> None:
    assert problem(BASE + nested + "\n") == (
        f"(spec): {TOO_DEEP}: nested more than {MAX_DEPTH} levels deep")


def test_nesting_just_inside_the_limit_is_accepted() -> None:
    # The spec is level 1, model 2: 30 more levels of lists end at the limit.
    model = {"deep": json.loads("[" * (MAX_DEPTH - 3) + "1" + "]" * (MAX_DEPTH - 3))}
    spec = spec_of(with_("model", model))
    assert depth(spec.model) + 1 == MAX_DEPTH
    assert parse_spec_json(spec.canonical_json()) == spec


def test_the_log_form_is_held_to_the_same_depth() -> None:
    model = {"deep": json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)}
    spec = spec_of(MINIMAL)
    doc = json.loads(spec.canonical_json())
    doc["model"] = model
    doc["model_digest"] = ""  # filled in again from the model
    with pytest.raises(SpecError, match=f"model: {TOO_DEEP}"):
        parse_spec_json(json.dumps(doc))
    with pytest.raises(SpecError, match=TOO_LARGE):
        parse_spec_json(" " * (MAX_SPEC_BYTES + 1))


@pytest.mark.parametrize(("levels", "width", "reason"), [
    (9, 10, TOO_MANY_ALIASES),  # 10^10 values from 90 aliases
    (6, 10, TOO_MANY_VALUES),  # 10^6 values from 60 aliases
])
def test_an_alias_bomb_is_refused_in_well_under_a_second(
    levels: int, width: int, reason: str
) -> None:
    started = time.perf_counter()
    assert problem(in_model(bomb(levels, width))).startswith(f"(spec): {reason}:")
    assert time.perf_counter() - started < 0.2


def test_a_few_aliases_are_fine() -> None:
    text = BASE + "retry:\n  default: &r {attempts: 2}\n  hang: *r\n"
    assert parse_spec(text, "t.yaml").retry_for("hang").attempts == 2
    assert MAX_ALIASES >= 8 and MAX_NODES >= 10_000


def test_object_tags_are_refused_and_keys_given_twice_too() -> None:
    assert problem(BASE + "x: !!python/object/apply:os.system [echo hi]\n").startswith(
        "not valid YAML")
    assert "given twice" in problem(BASE + "name: again\n")
