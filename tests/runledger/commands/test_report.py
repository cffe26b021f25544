"""runledger/commands/report.py: ``runledger report`` writes the page, and explains what is
missing. The page itself is tests/queries/test_report.py."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from runledger.cli import app
from tests.queries.timeline import Timeline, crash_and_recover, project


@pytest.fixture(scope="module")
def projection(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    path = tmp_path_factory.mktemp("report") / "p.duckdb"
    tl = Timeline()
    expected = crash_and_recover(tl)
    con = duckdb.connect(str(path))
    project(con, tl)
    con.close()
    return path, expected


def test_cli_writes_the_page_and_explains_what_is_missing(
        projection: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    db = projection[0]
    out = tmp_path / "r.html"
    runner = CliRunner()
    res = runner.invoke(app, ["report", "run-a", "--html", str(out), "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert out.read_text("utf-8").startswith("<!DOCTYPE html>")
    res = runner.invoke(app, ["report", "run-b", "--html", str(out), "--db", str(db)])
    assert res.exit_code == 1 and "unknown run 'run-b'" in res.output and "run-a" in res.output
    missing = db.parent / "nope.duckdb"
    res = runner.invoke(app, ["report", "run-a", "--html", str(out), "--db", str(missing)])
    assert res.exit_code == 1
    assert f"no projection at {missing}" in res.output and "p.duckdb" in res.output


def test_cli_prints_the_text_form_and_needs_one_form(
        projection: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    db = projection[0]
    runner = CliRunner()
    res = runner.invoke(app, ["report", "run-a", "--text", "--db", str(db)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "Run run-a: succeeded (done); 2 generation(s), final step 30"
    assert "Silent data corruption" in lines
    assert "suspicions: 0 (none); verdicts: none" in lines
    out = tmp_path / "both.html"
    res = runner.invoke(app, ["report", "run-a", "--text", "--html", str(out), "--db", str(db)])
    assert res.exit_code == 0 and out.is_file() and res.stdout.startswith("Run run-a:")
    res = runner.invoke(app, ["report", "run-a", "--db", str(db)])
    assert res.exit_code == 1 and "--html FILE" in res.output and "--text" in res.output


def test_cli_json_says_what_was_written_and_how_fresh(
        projection: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    db, out = projection[0], tmp_path / "j.html"
    res = CliRunner().invoke(app, ["report", "run-a", "--html", str(out), "--db", str(db),
                                   "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["run_id"] == "run-a" and doc["html"] == str(out)
    assert doc["bytes"] == len(out.read_bytes()) and doc["text"] is None
    assert doc["projection"]["path"].endswith("p.duckdb")
    both = json.loads(CliRunner().invoke(app, ["report", "run-a", "--text", "--db", str(db),
                                               "--json"]).stdout)
    assert both["html"] is None and both["text"].startswith("Run run-a:")
