"""agent/logfiles.py: a rotated log read as one, its exit tail across the files, the last N
lines across them, what the cap dropped, and a reader that follows the rotations."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.logfiles import LogStream, chain, dropped, size_text, tail, tail_position
from agent.logrelay import RotatingLog, rotated


def read_all(stream: LogStream) -> bytes:
    return b"".join(iter(lambda: stream.read(7), b""))


def test_the_files_are_read_oldest_first_the_current_one_last(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    assert chain(path) == []
    path.write_bytes(b"c")
    rotated(path, 1).write_bytes(b"b")
    rotated(path, 3).write_bytes(b"a")  # .2 is mid-rotation: one gap is passed over
    assert chain(path) == [rotated(path, 3), rotated(path, 1), path]
    with LogStream(path) as stream:
        assert read_all(stream) == b"abc" and stream.from_oldest


def test_the_exit_tail_reads_on_into_the_previous_file_when_the_current_is_short(
        tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    rotated(path, 1).write_bytes(b"x" * 100 + b"\nTraceback (most recent call last):\n  boo")
    path.write_bytes(b"m\nValueError: boom\n")  # just rotated: a line ran on into it
    assert tail(path, 60) == "Traceback (most recent call last):\n  boom\nValueError: boom\n"
    assert tail(path) == (b"x" * 100 + b"\nTraceback (most recent call last):\n  boom\n"
                          b"ValueError: boom\n").decode()
    assert tail(tmp_path / "missing.log") == ""


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab\n", max_size=12), max_size=12), st.booleans(),
       st.integers(min_value=0, max_value=15), st.integers(min_value=1, max_value=7),
       st.lists(st.integers(min_value=0, max_value=150), max_size=3))
def test_tail_position_leaves_exactly_the_last_n_lines_across_the_files(
        parts: list[str], final_newline: bool, n: int, chunk: int, cuts: list[int]) -> None:
    text = "".join(parts).encode()
    if final_newline and not text.endswith(b"\n"):
        text += b"\n"
    bounds = [0, *sorted(min(c, len(text)) for c in cuts), len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    files = [io.BytesIO(p) for p in pieces]
    index, offset = tail_position(files, n, chunk=chunk)
    got = pieces[index][offset:] + b"".join(pieces[index + 1:])
    lines = text.splitlines(keepends=True)
    assert got == b"".join(lines[max(0, len(lines) - n):] if n else [])


def test_the_last_lines_and_what_the_cap_dropped(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    log = RotatingLog(path, 64, 2)
    said = b"".join(f"line {i}\n".encode() for i in range(100))
    log.write(said)
    log.close()
    cut = dropped(path)
    assert cut is not None and cut.bytes == len(said) - sum(p.stat().st_size
                                                           for p in chain(path))
    assert (cut.cap_bytes, cut.keep) == (64, 2)
    assert "were dropped by the log cap" in str(cut) and "3 files of at most 64 B" in str(cut)
    with LogStream(path, 3) as stream:
        assert read_all(stream) == b"line 97\nline 98\nline 99\n"
        assert not stream.from_oldest
    with LogStream(path) as stream:
        assert said.endswith(read_all(stream)) and stream.from_oldest
    assert dropped(tmp_path / "other.log") is None
    assert [size_text(n) for n in (512, 64 << 10, 3 << 19, 64 << 20)] == [
        "512 B", "64 KiB", "1.5 MiB", "64 MiB"]


def test_a_follower_goes_on_across_rotations_and_reads_every_byte_kept(
        tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    log = RotatingLog(path, 50, 3)
    log.write(b"first\n")
    got = b""
    with LogStream(path, follow=True) as stream:
        for i in range(40):
            log.write(f"line {i:02d} {'z' * (i % 7)}\n".encode())
            if i % 3 == 0:  # a reader that lags: up to three rotations between reads
                got += read_all(stream)
        log.close()
        got += read_all(stream)
    written = b"first\n" + b"".join(f"line {i:02d} {'z' * (i % 7)}\n".encode()
                                   for i in range(40))
    assert got == written
    with LogStream(path) as plain:  # without follow: what the files hold now
        assert written.endswith(read_all(plain))


def test_a_follower_of_a_log_cut_in_place_starts_it_again(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    log = RotatingLog(path, 20, 0)  # no file kept: the current one is cut in place
    log.write(b"0123456789abcdefghij")
    with LogStream(path, follow=True) as stream:
        assert read_all(stream) == b"0123456789abcdefghij"
        log.write(b"new\n")
        assert read_all(stream) == b"new\n"
    log.close()
