"""``runledger.logcopy``: a copy of the signed log in files, read back byte for byte. No broker.

Records keep their value bytes, record key and headers exactly (order, repeats,
empty values); a copy of a real signed log verifies as the log does; a line
that is not a record, a missing file or a foreign manifest is one clear error
naming the file (and line); an export never writes into a used directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from events.signed.audit import LoggedRecord, verify
from runledger.logcopy import (
    HEADS_FILE,
    KEYS_FILE,
    MANIFEST,
    RUNS_FILE,
    CopyError,
    from_line,
    load,
    to_line,
    write,
)
from tests.events.signed_log import story

ODD = LoggedRecord("runledger.runs", 3, 41, b"\x00\xffvalue\n",
                   (("runledger-sig", b"\x01" * 64), ("h", b""), ("h", b"again")), None)


def test_a_record_survives_its_line_exactly() -> None:
    assert from_line(to_line(ODD), "x:1") == ODD
    keyed = LoggedRecord("t", 0, 0, b"", (), b"run-1")
    assert from_line(to_line(keyed), "x:1") == keyed


def test_a_copy_of_a_signed_log_reads_back_and_verifies(tmp_path: Path) -> None:
    keys, runs = story()
    counts = write(tmp_path / "copy", keys.records, runs.records, {"note": "test"},
                   {"signed": "heads"})
    assert counts == (len(keys.records), len(runs.records))
    copy = load(tmp_path / "copy")
    assert (copy.keys, copy.runs) == (keys.records, runs.records)
    assert copy.manifest["note"] == "test" and copy.heads == {"signed": "heads"}
    assert copy.manifest["files"] == {KEYS_FILE: counts[0], RUNS_FILE: counts[1]}
    assert verify(copy.keys, copy.runs).ok


@pytest.mark.parametrize("line", [
    "not json", "{}", json.dumps({"topic": "t", "partition": 0, "offset": -1, "key": None,
                                  "value": "", "headers": []}),
    json.dumps({"topic": "t", "partition": 0, "offset": 1, "key": None, "value": "!!",
                "headers": []}),
    json.dumps({"topic": "t", "partition": 0, "offset": 1, "key": None, "value": "",
                "headers": [["h"]]}),
])
def test_a_line_that_is_no_record_is_named_by_file_and_line(tmp_path: Path, line: str) -> None:
    keys, runs = story()
    write(tmp_path / "copy", keys.records, runs.records, {}, {})
    path = tmp_path / "copy" / RUNS_FILE
    lines = path.read_text().splitlines()
    lines.insert(2, line)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CopyError, match=rf"{RUNS_FILE}:3: not a record of a log copy"):
        load(tmp_path / "copy")


def test_what_is_not_a_copy_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(CopyError, match="is not a directory"):
        load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CopyError, match=f"{MANIFEST} is missing"):
        load(tmp_path / "empty")
    (tmp_path / "empty" / MANIFEST).write_text('{"format": "something else"}')
    with pytest.raises(CopyError, match="does not describe a runledger-log-copy"):
        load(tmp_path / "empty")
    (tmp_path / "empty" / MANIFEST).write_text('{"format": "runledger-log-copy", "version": 9}')
    with pytest.raises(CopyError, match=r"reads version 2 .* export the log again"):
        load(tmp_path / "empty")
    # A copy without its signed heads (an older export, or one they were removed from).
    write(tmp_path / "headless", [], [], {}, {})
    (tmp_path / "headless" / HEADS_FILE).unlink()
    with pytest.raises(CopyError, match=f"{HEADS_FILE} is missing: the copy's signed heads"):
        load(tmp_path / "headless")


def test_an_export_never_writes_into_a_used_directory(tmp_path: Path) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(CopyError, match="is not an empty directory"):
        write(tmp_path / "used", [], [], {}, {})
    assert sorted(p.name for p in (tmp_path / "used").iterdir()) == ["notes.txt"]
    write(tmp_path / "fresh", [], [], {}, {})  # an empty log copies as empty files
    assert load(tmp_path / "fresh").runs == []
