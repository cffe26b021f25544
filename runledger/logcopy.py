"""A copy of the signed log in files, for verifying it later without a broker.

``runledger audit export DIR`` writes the raw records of ``runledger.keys``
and ``runledger.runs`` as they are stored: one JSON object per line in
``DIR/keys.jsonl`` and ``DIR/runs.jsonl``, in log order, each with its
``topic``, ``partition``, ``offset``, record ``key`` and ``value`` (base64)
and ``headers`` (``[name, base64]`` pairs, in order, repeats kept), and
``DIR/manifest.json`` saying what the copy is, and ``DIR/heads.json``: the
head of every chain copied, signed by the exporter (``events.signed.loghead``).
``runledger audit verify --from DIR`` reads them back (:func:`load`) into the
same ``LoggedRecord``\\ s a live read gives, in file order, and judges them
the same way, and the heads against them: a chain cut at its end is found
with nothing kept outside the copy. A copy of format version 1 (no heads) is
refused: export it again.

The copy is plain text on purpose: any tool can read it, years later, and
nothing in it needs trusting. The signatures travel in it, so a changed byte,
a removed record or a forged one is found by the audit, not by this module;
this module only refuses lines that are not records at all.

Tested in tests/runledger/test_logcopy.py.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from events.signed.audit import LoggedRecord
from runledger.errors import RunledgerError

FORMAT = "runledger-log-copy"
VERSION = 2  # 2: with heads.json
MANIFEST = "manifest.json"
KEYS_FILE = "keys.jsonl"
RUNS_FILE = "runs.jsonl"
HEADS_FILE = "heads.json"


class CopyError(RunledgerError):
    """A directory that is not a readable copy of the log (names the file and line)."""


@dataclass(frozen=True, slots=True)
class Copy:
    keys: list[LoggedRecord]
    runs: list[LoggedRecord]
    manifest: dict[str, Any]
    heads: Any = None  # heads.json as read (JSON); events.signed.loghead.parse judges it


def to_line(record: LoggedRecord) -> str:
    return json.dumps({
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "key": _b64(record.key) if record.key is not None else None,
        "value": _b64(record.value),
        "headers": [[name, _b64(value)] for name, value in record.headers],
    }, separators=(",", ":"))


def from_line(line: str, where: str) -> LoggedRecord:
    """One record of a copy; a :class:`CopyError` naming ``where`` if it is none."""
    try:
        doc = json.loads(line)
        headers = tuple((_text(name), _unb64(value)) for name, value in doc["headers"])
        key = doc["key"]
        return LoggedRecord(_text(doc["topic"]), _int(doc["partition"]), _int(doc["offset"]),
                            _unb64(doc["value"]), headers,
                            None if key is None else _unb64(key))
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise CopyError(f"{where}: not a record of a log copy ({type(exc).__name__}: "
                        f"{str(exc)[:120]}); `runledger audit export` writes one per line") \
            from None


def write(folder: Path, keys: Iterable[LoggedRecord], runs: Iterable[LoggedRecord],
          manifest: dict[str, Any], heads: dict[str, Any]) -> tuple[int, int]:
    """Write a new copy into ``folder`` (made, or empty), with the signed ``heads``
    (``events.signed.loghead.sign``); the number of records of each file."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise CopyError(f"{folder} exists and is not an empty directory; export into a new one")
    folder.mkdir(parents=True, exist_ok=True)
    counts = (_write_lines(folder / KEYS_FILE, keys), _write_lines(folder / RUNS_FILE, runs))
    (folder / HEADS_FILE).write_text(json.dumps(heads, indent=2) + "\n")
    doc = {"format": FORMAT, "version": VERSION, **manifest,
           "files": {KEYS_FILE: counts[0], RUNS_FILE: counts[1]}}
    (folder / MANIFEST).write_text(json.dumps(doc, indent=2) + "\n")
    return counts


def load(folder: Path) -> Copy:
    """The records of a copy, in file order."""
    if not folder.is_dir():
        raise CopyError(f"{folder} is not a directory; --from names a directory "
                        "`runledger audit export` wrote")
    manifest = _manifest(folder / MANIFEST)
    return Copy(_read_lines(folder / KEYS_FILE), _read_lines(folder / RUNS_FILE), manifest,
                _heads(folder / HEADS_FILE))


def _heads(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CopyError(f"{path} is missing: the copy's signed heads, which `runledger audit "
                        "export` writes; without them a cut end cannot be found") from None
    except (OSError, ValueError) as exc:
        raise CopyError(f"{path} is not readable JSON ({exc})") from None


def _manifest(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise CopyError(f"{path} is missing: not a copy `runledger audit export` wrote") \
            from None
    except (OSError, ValueError) as exc:
        raise CopyError(f"{path} is not readable JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CopyError(f"{path} does not describe a {FORMAT}")
    if doc.get("version") != VERSION:
        raise CopyError(f"{path}: copy format version {doc.get('version')!r}; this runledger "
                        f"reads version {VERSION} (with signed heads): export the log again")
    return doc


def _write_lines(path: Path, records: Iterable[LoggedRecord]) -> int:
    count = 0
    with path.open("w", encoding="ascii") as handle:
        for record in records:
            handle.write(to_line(record) + "\n")
            count += 1
    return count


def _read_lines(path: Path) -> list[LoggedRecord]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CopyError(f"{path} is missing: not a copy `runledger audit export` wrote") \
            from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CopyError(f"cannot read {path} ({exc})") from None
    return [from_line(line, f"{path}:{number}")
            for number, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object) -> bytes:
    if not isinstance(text, str):
        raise TypeError(f"expected base64 text, got {type(text).__name__}")
    return base64.b64decode(text, validate=True)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r:.40}")
    return value
