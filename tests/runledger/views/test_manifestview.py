"""``runledger query manifest``'s check (runledger.views.manifestview): log, rebuild and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.manifests import write_published
from events.model import RunManifestPublished
from runledger.errors import RunledgerError
from runledger.views.manifestview import check, lines
from tests.controller.test_manifests import _cancelled
from worker.storage import read_bytes


def test_a_written_manifest_agrees_with_the_log(tmp_path: Path) -> None:
    model, log = _cancelled(str(tmp_path))
    write_published(model, log)
    result = check("run-7", log, read_bytes)
    assert result["ok"] and result["published"]["rebuilt_matches"]
    assert result["file"]["matches"] and result["manifest"]["status"] == "Cancelled"
    assert "digest equals the log's" in lines(result)[-1]


def test_a_missing_or_altered_file_or_a_changed_log_is_named(tmp_path: Path) -> None:
    model, log = _cancelled(str(tmp_path))
    result = check("run-7", log, read_bytes)  # never written
    assert not result["ok"] and result["file"]["present"] is False
    assert "MISSING" in lines(result)[-1]
    write_published(model, log)
    target = tmp_path / "run-7" / "run-manifest.json"
    target.write_bytes(target.read_bytes().replace(b"Cancelled", b"Succeeded"))
    result = check("run-7", log, read_bytes)
    assert not result["ok"] and "DIFFERS" in lines(result)[-1]
    # facts missing from the log: the rebuilt document no longer has the recorded digest
    (published,) = [e for e in log if isinstance(e, RunManifestPublished)]
    result = check("run-7", [log[0], published], read_bytes)
    assert result["published"]["rebuilt_matches"] is False
    assert "DIFFERENT" in "\n".join(lines(result))


def test_a_run_without_the_fact_is_shown_unpublished(tmp_path: Path) -> None:
    _, log = _cancelled(str(tmp_path))
    older = [e for e in log if not isinstance(e, RunManifestPublished)]
    result = check("run-7", older, read_bytes)
    assert result["published"] is None and result["file"] is None and not result["ok"]
    assert "ended before this version published manifests" in lines(result)[-1]
    assert "has not ended" in lines(check("run-7", older[:1], read_bytes))[-1]


def test_an_unknown_run_says_how_to_find_the_id() -> None:
    with pytest.raises(RunledgerError, match="runledger runs"):
        check("nope", [], read_bytes)
