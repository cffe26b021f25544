"""A worker's log as its files hold it: the rotated files and the current one, read as one.

``agent.logrelay`` writes a worker's output to ``<log>`` and rotates it to
``<log>.1`` .. ``<log>.<keep>`` at its cap; the files, oldest first and
``<log>`` last, are the newest part of the output, byte for byte, and a line
may run on from one file into the next. Here is what reads them: the agent for
a worker's last output in its exit report (:func:`tail`, which reads on into
``<log>.1`` when ``<log>`` was just rotated and is short), and ``runledger
logs`` (:class:`LogStream`: all of it, or its last lines, with ``--follow``
across the rotations that happen while it reads; :func:`dropped`: how much
older output the cap deleted). A log written before rotation existed is one
file, read the same way.

Tested in tests/agent/test_logfiles.py and tests/e2e/test_jobs.py.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from agent.logrelay import dropped_file, rotated

# The output an exit report carries: enough for a traceback, small for the log.
TAIL_BYTES = 4096
MAX_ROTATED = 10_000  # a guard: more rotated files than any keep


@dataclass(frozen=True, slots=True)
class Dropped:
    """What the cap deleted of a log: ``bytes`` of its oldest output."""

    bytes: int
    cap_bytes: int
    keep: int

    def __str__(self) -> str:
        return (f"its oldest {size_text(self.bytes)} of output were dropped by the log cap"
                f" (its agent keeps {self.keep + 1} files of at most {size_text(self.cap_bytes)}"
                " per worker)")


def size_text(n: int) -> str:
    """``n`` bytes as people read them: ``512 B``, ``64 KiB``, ``1.5 MiB``."""
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}".replace(".0 ", " ")


def chain(path: Path) -> list[Path]:
    """The files of the log at ``path`` that exist, oldest first, ``path`` itself last."""
    older: list[Path] = []
    n = 1
    # One missing number is passed over: a rotation in progress renames them one by one.
    while n <= MAX_ROTATED and (rotated(path, n).is_file() or rotated(path, n + 1).is_file()):
        if rotated(path, n).is_file():
            older.append(rotated(path, n))
        n += 1
    return [*reversed(older), *([path] if path.is_file() else [])]


def dropped(path: Path) -> Dropped | None:
    """What the cap deleted of the log at ``path``; None: nothing (or no such record)."""
    try:
        doc = json.loads(dropped_file(path).read_text())
        said = Dropped(int(doc["dropped_bytes"]), int(doc["cap_bytes"]), int(doc["keep"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return said if said.bytes > 0 else None


def tail(path: Path, limit: int = TAIL_BYTES) -> str:
    """The last at most ``limit`` bytes of a log, across its files, from a line start, as text.

    Cut at a line (or, for one long line, a UTF-8 character) boundary, so the
    text is valid UTF-8 and starts where a line does; bytes that are not UTF-8
    come out as U+FFFD.
    """
    data, total = b"", 0
    for file in reversed(chain(path)):
        try:
            with file.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                need = limit - len(data)
                if need > 0:
                    f.seek(max(0, size - need))
                    data = f.read(need) + data
        except OSError:
            continue
        total += size
    if total > limit:
        newline = data.find(b"\n")
        if 0 <= newline < len(data) - 1:
            data = data[newline + 1:]
        else:
            while data and data[0] & 0xC0 == 0x80:  # a continuation byte: mid-character
                data = data[1:]
    return data.decode("utf-8", errors="replace")


def tail_position(files: Sequence[BinaryIO], lines: int, chunk: int = 1 << 16) -> tuple[int, int]:
    """Where the last ``lines`` lines of the files, read one after the other, begin: the
    index of a file and an offset in it ((0, 0): they hold no more than that). A final
    newline ends the last line; it does not start an empty one."""
    sizes = [f.seek(0, os.SEEK_END) for f in files]
    if not files:
        return 0, 0
    if lines <= 0:
        return len(files) - 1, sizes[-1]
    # The very last byte of all: a newline there closes the last line.
    last = next(((i, s - 1) for i, s in reversed(list(enumerate(sizes))) if s), None)
    seen = 0
    for i in reversed(range(len(files))):
        f, pos = files[i], sizes[i]
        while pos > 0:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step)
            at = len(block)
            while (at := block.rfind(b"\n", 0, at)) != -1:
                if (i, pos + at) != last:
                    seen += 1
                    if seen == lines:
                        return i, pos + at + 1
    return 0, 0


class LogStream:
    """The log at ``path`` read as one stream: from its oldest kept byte, or its last
    ``lines`` lines. With ``follow``, a read at the end of the current file notices that
    the relay rotated it, and goes on into the files rotated since, then the new one."""

    def __init__(self, path: Path, lines: int | None = None, follow: bool = False) -> None:
        self.path, self.follow = path, follow
        self.paths = chain(path)
        files = _open_all(self.paths)
        index, offset = tail_position(files, lines) if lines is not None else (0, 0)
        for f in files[:index]:
            f.close()
        self._files = files[index:]
        for i, f in enumerate(self._files):
            f.seek(offset if i == 0 else 0)
        # Whether what it prints starts at the oldest byte kept (what the cap dropped
        # is then worth a word).
        self.from_oldest = index == 0 and offset == 0

    def read(self, size: int) -> bytes:
        while self._files:
            data = self._files[0].read(size)
            if data:
                return data
            if len(self._files) > 1:
                self._files.pop(0).close()
                continue
            if not (self.follow and self._moved_on()):
                return b""
        return b""

    def _moved_on(self) -> bool:
        """Whether ``path`` now names a newer file than the one being read; the files
        rotated after that one, and the new one, then wait their turn (the one being
        read is read to its end first: the relay closed it before the rotation)."""
        mine = os.fstat(self._files[0].fileno())
        try:
            now = os.stat(self.path)
        except OSError:
            return False  # mid-rotation: the next read looks again
        if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            if now.st_size < self._files[0].tell():  # cut in place (keep 0): read it anew
                self._files[0].seek(0)
                return True
            return False
        newer = _open_all(chain(self.path))
        ids = [_identity(f) for f in newer]
        start = ids.index((mine.st_dev, mine.st_ino)) + 1 if (mine.st_dev, mine.st_ino) in ids \
            else 0
        for f in newer[:start]:
            f.close()
        self._files.extend(newer[start:])
        return len(newer) > start

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files = []

    def __enter__(self) -> LogStream:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _identity(f: BinaryIO) -> tuple[int, int]:
    st = os.fstat(f.fileno())
    return st.st_dev, st.st_ino


def _open_all(paths: Sequence[Path]) -> list[BinaryIO]:
    """``paths`` opened, in order; one renamed away meanwhile is skipped, and a file met
    twice (renamed from one name to the next between the listing and the open) once."""
    out: list[BinaryIO] = []
    seen: set[tuple[int, int]] = set()
    for p in paths:
        with contextlib.suppress(OSError):
            f = p.open("rb")
            if _identity(f) in seen:
                f.close()
                continue
            seen.add(_identity(f))
            out.append(f)
    return out
