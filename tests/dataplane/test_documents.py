"""User documents: the canonical form and digest never change; problems name every bad field."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller.errors import ControllerError, SpecError
from dataplane.documents import (
    DocumentKind,
    InvalidDocument,
    canonical_json,
    sha256_digest,
    validation_problems,
)
from dataplane.errors import DataPlaneError, ManifestError

# What canonical_json and sha256_digest gave when these values were first recorded:
# a change here changes every spec digest and dataset id already in a log.
PINNED_VALUE = {"b": [1, 2.5, None, True], "a": {"é": "ü ✓"}, "c": ""}
PINNED_JSON = '{"a":{"é":"ü ✓"},"b":[1,2.5,null,true],"c":""}'
PINNED_DIGEST = "sha256:b10e12eb9bf2e4119521e13eae08c294c5b65543b9a19403d1c1eed8978985f6"
EMPTY_DIGEST = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def test_the_canonical_form_and_its_digest_are_pinned() -> None:
    assert canonical_json(PINNED_VALUE) == PINNED_JSON
    assert sha256_digest(PINNED_JSON) == PINNED_DIGEST
    assert sha256_digest(b"") == sha256_digest("") == EMPTY_DIGEST


@given(json_values)
def test_canonical_json_round_trips_and_ignores_key_order(value: Any) -> None:
    text = canonical_json(value)
    assert json.loads(text) == value
    if isinstance(value, dict):
        assert canonical_json(dict(reversed(list(value.items())))) == text


@given(st.text())
def test_text_is_hashed_as_its_utf8_bytes(text: str) -> None:
    raw = text.encode()
    assert sha256_digest(text) == sha256_digest(raw) == "sha256:" + hashlib.sha256(raw).hexdigest()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_canonical_json_refuses_what_json_cannot_hold(bad: float) -> None:
    with pytest.raises(ValueError):
        canonical_json({"x": [bad]})


# --- problems -------------------------------------------------------------------------

class Fixed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["fixed"]
    size: int


class Grown(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["grown"]
    low: int
    high: int


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str
    items: Annotated[list[int], Field(min_length=1)]
    shape: Annotated[Fixed | Grown, Field(discriminator="kind")]
    labels: dict[Annotated[str, Field(pattern="^[a-z]+$")], str] = {}


THING = DocumentKind("test thing", "(thing)", union_tags={"shape": frozenset({"fixed", "grown"})})


def problems_of(data: Any) -> list[str]:
    with pytest.raises(ValidationError) as info:
        Doc.model_validate(data)
    return validation_problems(info.value, THING)


def test_each_problem_names_its_field_as_the_author_wrote_it() -> None:
    problems = problems_of({"items": [1, "x"], "shape": {"kind": "grown", "low": 1},
                            "labels": {"OK": "v"}, "colour": 1})
    assert problems == [
        "name: required field is missing",
        "items[1]: Input should be a valid integer (got 'x')",
        "shape.high: required field is missing",  # not shape.grown.high
        "labels.OK (the key): String should match pattern '^[a-z]+$' (got 'OK')",
        "colour: unknown field (not part of the test thing)",
    ]


def test_empty_lists_unknown_tags_and_the_whole_document() -> None:
    assert problems_of({"name": "n", "items": [], "shape": {"kind": "round"}}) == [
        "items: must not be empty",
        "shape: kind must be one of 'fixed', 'grown' (got 'round')",
    ]
    assert problems_of({"name": "n", "items": [1], "shape": {}}) == ["shape: needs 'kind'"]
    assert problems_of([]) == ["(thing): Input should be a valid dictionary or instance of Doc"]


def test_a_number_yaml_read_as_text_gets_a_hint() -> None:
    [problem] = problems_of({"name": "n", "items": ["1e3"], "shape": {"kind": "fixed",
                                                                     "size": 1}})
    assert problem.startswith("items[0]: Input should be a valid integer (got the text '1e3';")


# --- the error classes ----------------------------------------------------------------

@pytest.mark.parametrize(("cls", "root", "kind"), [
    (SpecError, ControllerError, "run spec"),
    (ManifestError, DataPlaneError, "dataset manifest"),
])
def test_each_package_leaf_shares_one_message_and_keeps_its_root(
    cls: type[InvalidDocument], root: type[Exception], kind: str
) -> None:
    one = cls("a.yaml", ["x: bad"])
    two = cls("b.yaml", ["x: bad", "y: worse"])
    assert isinstance(one, root) and isinstance(one, InvalidDocument)
    assert str(one) == f"a.yaml: invalid {kind}, 1 problem:\n  x: bad"
    assert str(two) == f"b.yaml: invalid {kind}, 2 problems:\n  x: bad\n  y: worse"
    assert (two.source, two.problems) == ("b.yaml", ["x: bad", "y: worse"])


def test_from_validation_uses_the_leafs_kind() -> None:
    with pytest.raises(ValidationError) as info:
        Doc.model_validate({"name": "n", "items": [1], "shape": {"kind": "fixed", "size": 1},
                            "extra": 0})
    err = ManifestError.from_validation("m.yaml", info.value)
    assert err.problems == ["extra: unknown field (not part of the dataset manifest)"]
    assert str(err).startswith("m.yaml: invalid dataset manifest, 1 problem:")
