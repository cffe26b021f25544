"""The beat file between a worker and its agent (events.beatfile): what is written is what is
read, and anything else reads as no beat, never as a wrong one."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from events import beatfile
from events.beatfile import Beat


@given(st.integers(1, 2**62), st.integers(0, 2**62), st.booleans())
def test_a_beat_reads_back_as_written(seq: int, step: int, closing: bool) -> None:
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "beats" / "run-1" / "g1" / "r0"  # the directory is made
        beatfile.write(path, Beat(seq, step, closing))
        assert beatfile.read(path) == Beat(seq, step, closing)
        assert [p.name for p in path.parent.iterdir()] == ["r0"]  # no temporary left


def test_the_next_beat_replaces_the_last(tmp_path: Path) -> None:
    path = tmp_path / "r0"
    beatfile.write(path, Beat(1, 5))
    beatfile.write(path, Beat(2, 6, closing=True))
    assert beatfile.read(path) == Beat(2, 6, True)


def test_missing_foreign_or_garbled_files_are_no_beat(tmp_path: Path) -> None:
    assert beatfile.read(tmp_path / "absent") is None
    for text in ("", "rl-beat-v2 1 2 0\n", "rl-beat-v1 1 2\n", "rl-beat-v1 x 2 0\n",
                 "rl-beat-v1 0 2 0\n", "rl-beat-v1 1 -2 0\n", "rl-beat-v1 1 2 yes\n",
                 "rl-beat-v1 1 2 0 " + "9" * 200 + "\n"):
        (tmp_path / "f").write_text(text)
        assert beatfile.read(tmp_path / "f") is None, text


def test_the_path_is_one_directory_per_run_and_generation() -> None:
    assert beatfile.path_for("/w", "run-1", 3, "r7") == "/w/beats/run-1/g3/r7"
