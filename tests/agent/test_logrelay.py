"""agent/logrelay.py: the rotating writer keeps a suffix of the output within its bound; the
relay process copies a pipe into it to the pipe's end, and signals do not stop it."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.logfiles import chain
from agent.logrelay import RotatingLog, dropped_file, limits_problem, rotated, spawn


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(min_value=1, max_value=25),
       st.integers(min_value=0, max_value=4), st.binary(max_size=30))
def test_the_kept_files_are_the_suffix_of_what_was_written_within_the_bound(
        writes: list[bytes], cap: int, keep: int, before: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.log"
        before = before[:cap]
        path.write_bytes(before)  # a log appended to again: its bytes count as written
        log = RotatingLog(path, cap, keep)
        for data in writes:
            log.write(data)
        log.close()
        written = before + b"".join(writes)
        files = chain(path)
        kept = b"".join(f.read_bytes() for f in files)
        assert written.endswith(kept)
        assert len(kept) <= (keep + 1) * cap
        # Nothing is lost that the bound leaves room for: every rotated file is full,
        # and the current one holds at least a byte once there was a rotation.
        assert len(kept) >= min(len(written), keep * cap + 1)
        assert all(f.stat().st_size == cap for f in files[:-1])
        assert len(files) <= keep + 1
        assert log.dropped == len(written) - len(kept)
        said = json.loads(dropped_file(path).read_text()) if dropped_file(path).exists() else {}
        assert said.get("dropped_bytes", 0) == log.dropped
        assert not log.lost


def test_a_write_that_fails_is_counted_said_once_and_the_writer_goes_on(tmp_path: Path) -> None:
    said: list[str] = []
    path = tmp_path / "gone" / "w.log"
    path.parent.mkdir()
    log = RotatingLog(path, 10, 1, on_error=said.append)
    path.unlink()
    path.parent.rmdir()
    log.write(b"a" * 25)  # rotating needs the directory: the bytes are lost, not raised
    log.write(b"b" * 5)
    assert log.lost > 0 and len(said) >= 1
    assert len(said) == len(set(said))
    path.parent.mkdir()
    log.write(b"back\n")  # the directory is back: the writer opens the file again
    log.close()
    assert path.read_bytes().endswith(b"back\n")


def test_limits_an_agent_may_set() -> None:
    assert limits_problem(64 << 20, 3) is None
    assert "--log-cap must be at least" in (limits_problem(1000, 3) or "")
    assert "--log-keep must be at least 1" in (limits_problem(64 << 20, 0) or "")
    with pytest.raises(ValueError):
        RotatingLog(Path("/nonexistent/w.log"), 0, 1)


def test_the_relay_copies_the_pipe_to_its_end_through_sigterm_and_sigint(
        tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    read_end, write_end = os.pipe()
    relay = spawn(path, 100, 2, read_end)
    os.close(read_end)
    try:
        os.write(write_end, b"x" * 250)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not rotated(path, 2).exists():
            time.sleep(0.01)
        relay.send_signal(signal.SIGTERM)  # meant for someone else: it goes on
        relay.send_signal(signal.SIGINT)
        os.write(write_end, b"y" * 40 + b"\nlast line\n")
    finally:
        os.close(write_end)
    assert relay.wait(10) == 0  # its end of file, and only that, ends it
    kept = b"".join(f.read_bytes() for f in chain(path))
    assert kept == (b"x" * 250 + b"y" * 40 + b"\nlast line\n")[-len(kept):]
    assert kept.endswith(b"last line\n") and len(kept) <= 300
    assert [p.name for p in chain(path)] == ["w.log.2", "w.log.1", "w.log"]
