"""Names and paths: each rule accepts what the system makes and refuses what could climb out
of a directory, and a path is inside a root only when it is, for local paths and URLs."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.base import spec_key
from events.names import (
    ALIAS_MAX,
    BAD_NAME,
    BAD_PATH,
    HOST_MAX,
    NAME_MAX,
    PATH_OUTSIDE_ROOTS,
    alias_problem,
    host_problem,
    key_problem,
    logical_id_problem,
    outside_roots,
    path_problem,
    run_id_problem,
)


@pytest.mark.parametrize("good", ["tiny-7c8deb9f56", "r0", "a", "A.b_c-1", "x" * NAME_MAX])
def test_names_the_system_makes_are_valid(good: str) -> None:
    assert run_id_problem(good) is None and logical_id_problem(good) is None


@pytest.mark.parametrize("bad", [
    "", ".", "..", "../x", "a/b", "-a", ".hidden", "a b", "a\nb", "é", "x" * (NAME_MAX + 1),
    "node/n1",
])
def test_names_that_could_escape_or_forge_are_refused(bad: str) -> None:
    problem = run_id_problem(bad)
    assert problem is not None and problem.startswith(f"{BAD_NAME}: run id ")


def test_node_keys_and_host_names() -> None:
    assert key_problem("node/n1") is None and key_problem("tiny-0123456789") is None
    assert key_problem("node/../x") is not None and key_problem("node/") is not None
    assert host_problem("h" * HOST_MAX) is None
    assert host_problem("h" * (HOST_MAX + 1)) is not None


def test_spec_keys_are_a_digest_in_lowercase_hex() -> None:
    digest = "sha256:" + "0f" * 32
    assert key_problem(spec_key(digest)) is None
    for bad in ("spec/", "spec/" + "0F" * 32, "spec/" + "0f" * 31, "spec/../" + "0f" * 30,
                "spec/sha256:" + "0f" * 32):
        problem = key_problem(bad)
        assert problem is not None and problem.startswith(f"{BAD_NAME}: spec key"), bad


def test_aliases() -> None:
    assert alias_problem("corpus/latest") is None and alias_problem("a/_") is None
    for bad in ("corpus/../x", "./x", "/abs", "a//b", "", "x" * (ALIAS_MAX + 1), "a b"):
        assert alias_problem(bad) is not None, bad


@given(st.text(max_size=40))
def test_a_valid_name_never_holds_a_separator_or_climbs(text: str) -> None:
    if run_id_problem(text) is None:
        assert "/" not in text and "\\" not in text and text not in (".", "..")
        assert posixpath.normpath(posixpath.join("/root", text)).startswith("/root/")


@pytest.mark.parametrize("bad", [
    "/ckpt/../etc", "../x", "s3://b/../other", "file:///a/../b", "/a/\x00b", "", "/" * 5000,
])
def test_paths_with_an_escape_are_refused(bad: str) -> None:
    problem = path_problem(bad, "root")
    assert problem is not None and problem.startswith(f"{BAD_PATH}: root")


@pytest.mark.parametrize(("path", "inside"), [
    ("/data/ckpt", True),
    ("/data/ckpt/run-1/g000001/step-0000000010/manifest.json", True),
    ("/data/ckpt/", True),
    ("/data/./ckpt//x", True),
    ("file:///data/ckpt/x", True),
    ("/data/ckpt-other/x", False),  # a prefix of the name is not a parent directory
    ("/data", False),
    ("/etc/passwd", False),
    ("s3://bucket/ckpt/x", True),
    ("S3://BUCKET/ckpt/x", True),
    ("s3://bucket/other/x", False),
    ("gs://bucket/ckpt/x", False),
    ("s3://evil/ckpt/x", False),
    ("rel/ckpt", True),  # resolved against the work dir, always allowed below
    ("/data/ckpt/../../etc", False),
])
def test_a_path_is_inside_a_root_only_when_it_is(path: str, inside: bool) -> None:
    roots = ("/work", "/data/ckpt", "s3://bucket/ckpt")
    problem = outside_roots(path, roots, base="/work", what="root")
    assert (problem is None) == inside, problem
    if not inside:
        assert problem is not None and problem.split(":")[0] in (PATH_OUTSIDE_ROOTS, BAD_PATH)


def test_no_roots_allows_nothing_and_a_bad_root_allows_nothing() -> None:
    problem = outside_roots("/data/x", (), "/work")
    assert problem is not None and problem.endswith("(none)")
    assert outside_roots("/etc/x", ("/data/../",), "/work") is not None


@given(st.lists(st.sampled_from(["a", "b", ".", "..", "", "c.d"]), max_size=6))
def test_a_path_judged_inside_never_leaves_its_root(parts: list[str]) -> None:
    path = "/data/ckpt/" + "/".join(parts)
    if outside_roots(path, ("/data/ckpt",), "/work") is None:
        assert (posixpath.normpath(path) + "/").startswith("/data/ckpt/")
