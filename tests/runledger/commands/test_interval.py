"""runledger/commands/interval.py: ``runledger interval`` through the real command tree.

No broker: the command is arithmetic only (controller/interval.py, tested in
tests/controller/test_interval.py); these tests check what it prints and refuses.
"""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner, Result

from controller.interval import daly_interval_s, expected_waste, waste_table, young_interval_s
from runledger.cli import app


def cli(*args: str) -> Result:
    return CliRunner().invoke(app, ["interval", *args])


def test_cli_prints_the_interval_and_the_table() -> None:
    result = cli("--cost", "30", "--mtbf", "6h", "--restore", "120", "--detect", "60")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    assert "T = sqrt(2*C*M) = 18m58s (1138.42 s)" in out
    assert "Expected waste at T: 6.10%" in out
    assert "Daly's higher-order estimate: 18m39s (1118.51 s)" in out
    assert "the controller uses Young's first-order T" in out
    [marked] = [line for line in out.splitlines() if line.startswith("* T ")]
    assert "18m58s" in marked
    assert "6.10%" in marked
    assert "93.90%" in marked
    for label in ("T/4", "T/2", "T/sqrt2", "T*sqrt2", "2T", "4T", "5m", "15m", "30m", "1h"):
        assert any(line[2:].startswith(label + " ") for line in out.splitlines()), label


def test_cli_json_matches_the_pure_functions() -> None:
    result = cli("--cost", "30", "--mtbf", "6h", "--restore", "2m", "--detect", "1m", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    c, m, r, d = 30.0, 21_600.0, 120.0, 60.0
    assert (doc["cost_s"], doc["mtbf_s"], doc["restore_s"], doc["detect_s"]) == (c, m, r, d)
    assert doc["interval_s"] == young_interval_s(c, m)
    assert doc["daly_interval_s"] == daly_interval_s(c, m)
    assert doc["waste"] == expected_waste(young_interval_s(c, m), c, m, r, d).to_json()
    assert doc["table"] == [row.to_json() for row in waste_table(c, m, r, d)]
    assert doc["warnings"] == []
    assert [row["label"] for row in doc["table"] if row["optimal"]] == ["T"]
    first = doc["table"][0]
    assert set(first) == {"label", "interval_s", "checkpoints_per_day", "checkpoint_overhead",
                          "lost_work", "recovery", "total", "effective", "optimal"}


def test_cli_detect_defaults_to_zero() -> None:
    result = cli("--cost", "30", "--mtbf", "6h", "--restore", "120", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["detect_s"] == 0.0
    assert doc["waste"]["recovery"] == pytest.approx(120 / 21_600)


def test_cli_computes_but_warns_when_c_is_not_small() -> None:
    result = cli("--cost", "3h", "--mtbf", "1h", "--restore", "0", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)  # warnings go to stderr, stdout stays one object
    assert doc["daly_interval_s"] is None
    assert doc["interval_s"] == pytest.approx(math.sqrt(2 * 3 * 3600 * 3600))
    assert doc["warnings"]
    assert all(line.startswith("runledger: warning: ") for line in result.stderr.splitlines())
    assert "C << M" in result.stderr
    human = cli("--cost", "3h", "--mtbf", "1h", "--restore", "0")
    assert human.exit_code == 0
    assert "does not apply (C >= 2M)" in human.stdout


@pytest.mark.parametrize(
    ("args", "option", "problem"),
    [
        (["--cost", "0", "--mtbf", "6h", "--restore", "1"], "--cost", "positive"),
        (["--cost", "0ms", "--mtbf", "6h", "--restore", "1"], "--cost", "positive"),
        (["--cost=-5", "--mtbf", "6h", "--restore", "1"], "--cost", "negative"),
        (["--cost", "30", "--mtbf", "0", "--restore", "1"], "--mtbf", "positive"),
        (["--cost", "30", "--mtbf", "nan", "--restore", "1"], "--mtbf", "finite"),
        (["--cost", "30", "--mtbf", "6y", "--restore", "1"], "--mtbf", "unknown unit"),
        (["--cost", "30", "--mtbf", "1e300", "--restore", "1"], "--mtbf", "largest supported"),
        (["--cost", "1e-9", "--mtbf", "6h", "--restore", "1"], "--cost", "smallest supported"),
        (["--cost", "30", "--mtbf", "6h", "--restore=-1"], "--restore", "negative"),
        (["--cost", "30", "--mtbf", "6h", "--restore", "1", "--detect", "soon"], "--detect",
         "not a duration"),
    ],
)
def test_cli_bad_values_are_one_line_naming_the_option(
    args: list[str], option: str, problem: str
) -> None:
    result = cli(*args)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"runledger: {option}: ")
    assert problem in line


def test_cli_zero_restore_is_allowed() -> None:
    result = cli("--cost", "30", "--mtbf", "6h", "--restore", "0", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["waste"]["recovery"] == 0.0
