"""Owner-only storage: a stack's data directory and everything in it.

A stack's data directory holds every topic's segments, the cluster metadata
log with the SCRAM hashes, the credentials and the signing keys. Readable by
other local users, it gives them every topic past the ACLs (issue #33 found
0755 directories and 0644 segments). So the directories runledger makes are
0700, the files it writes 0600 from the first byte, the broker and its format
tool run with umask 077 (:data:`UMASK`, so every segment, index and checkpoint
the JVM writes is 0600 and every directory 0700), and :func:`tighten` takes
group and other bits off whatever an older runledger, or another umask, left.
:func:`claim` narrows only a directory that is plainly a stack's, never one
named by mistake (``--data-dir ~``).

Tested in tests/runledger/stack/test_private.py.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

from runledger.errors import StackError

DIR_MODE = 0o700
FILE_MODE = 0o600
UMASK = 0o077  # the broker JVM's: files 0666 & ~077 = 0600, directories 0700
OTHERS = stat.S_IRWXG | stat.S_IRWXO  # the bits no one but the owner may hold
# What a data directory may hold before its stack.json: the credentials a caller seeds
# (tests/stacks.py), the TLS files and keys a start that failed early left, its lock.
BEFORE_STATE = frozenset({"credentials", "tls", "keys", ".lock"})


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner may enter (made, or narrowed, to 0700)."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)  # mkdir's mode passes the umask; an older directory kept its own
    return path


def claim(data_dir: Path, state_file: str) -> Path:
    """``data_dir`` made (or narrowed to) owner-only, once it is plainly a stack's: new,
    empty, holding ``state_file``, or only what a stack writes (or a caller seeds) before
    it. Any other directory is refused: its files are not runledger's to narrow."""
    if data_dir.is_dir() and not (data_dir / state_file).is_file():
        foreign = sorted(p.name for p in data_dir.iterdir() if p.name not in BEFORE_STATE)
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more"
                                              if len(foreign) > 3 else "")
            raise StackError(
                f"{data_dir} holds {shown} and no {state_file}: not a stack's data directory."
                " `stack up` makes its data directory owner-only (and `stack down --purge`"
                " removes it whole); name a new or empty one with --data-dir")
    return private_dir(data_dir)


def _created(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)  # the file may have existed with a wider mode
    return fd


def open_private(path: Path) -> IO[str]:
    """``path`` truncated and opened for writing text, 0600 from the first byte."""
    return os.fdopen(_created(path), "w")


def open_private_bytes(path: Path) -> IO[bytes]:
    """As :func:`open_private`, for bytes (a process's output)."""
    return os.fdopen(_created(path), "wb")


def write_private(path: Path, text: str) -> None:
    with open_private(path) as handle:
        handle.write(text)


def loose(root: Path) -> list[Path]:
    """``root`` and everything under it that group or others may use, symlinks aside
    (a link's own mode means nothing; its target is checked where it lies)."""
    found: list[Path] = []
    for path in [root, *root.rglob("*")]:
        try:
            st = path.lstat()
        except FileNotFoundError:  # a segment the broker deleted meanwhile
            continue
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & OTHERS:
            found.append(path)
    return found


def tighten(root: Path) -> list[Path]:
    """Take group and other bits off everything :func:`loose` finds; the paths changed."""
    changed: list[Path] = []
    for path in loose(root):
        try:
            os.chmod(path, stat.S_IMODE(path.lstat().st_mode) & ~OTHERS)
        except FileNotFoundError:
            continue
        changed.append(path)
    return changed
