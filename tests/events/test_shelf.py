"""The finished runs' map: a dict's behaviour, and every version stays as it was."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from events.shelf import BUCKETS, Shelf

KEYS = st.text(min_size=1, max_size=6)


@given(st.lists(st.dictionaries(KEYS, st.integers(), max_size=20), max_size=12))
def test_a_shelf_is_the_dict_of_its_changes_and_no_version_moves(
    batches: list[dict[str, int]]
) -> None:
    shelf: Shelf[int] = Shelf()
    versions: list[tuple[Shelf[int], dict[str, int]]] = [(shelf, {})]
    expected: dict[str, int] = {}
    for batch in batches:
        shelf = shelf.with_(batch)
        expected = {**expected, **batch}
        versions.append((shelf, expected))
    for version, want in versions:
        assert dict(version) == want and len(version) == len(want)
        assert sorted(version) == sorted(want)
        for key, value in want.items():
            assert key in version and version[key] == value and version.get(key) == value
        assert "\x00absent" not in version and version.get("\x00absent") is None


def test_an_empty_change_is_the_same_shelf_and_a_change_copies_only_its_buckets() -> None:
    shelf: Shelf[int] = Shelf().with_({f"run-{i}": i for i in range(10 * BUCKETS)})
    assert shelf.with_({}) is shelf
    changed = shelf.with_({"run-7": -1})
    shared = sum(a is b for a, b in zip(shelf._buckets, changed._buckets, strict=True))
    assert shared == BUCKETS - 1
    assert shelf["run-7"] == 7 and changed["run-7"] == -1 and len(changed) == len(shelf)


@given(st.dictionaries(KEYS, st.integers(), max_size=40))
def test_each_value_and_of_agree_with_the_dict(items: dict[str, int]) -> None:
    shelf = Shelf.of(items)
    assert shelf == items and sorted(shelf.each_value()) == sorted(items.values())
    assert Shelf.of(shelf) is shelf  # a shelf is taken as it is, not copied
