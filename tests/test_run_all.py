"""Tests for bench/run_all.py's pure parts: which numbers become rows, goals, commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.run_all import BENCH_DIR, Outcome, benchmarks, command, goal, ratios, rows_of


def test_ratios_collects_every_ratio_key_with_its_path() -> None:
    data: dict[str, object] = {
        "machine": {"ratio_cores": 2.0},  # machine info and config are not results
        "config": {"ratio": 1.0},
        "permutation": {"ratio_lookups": 0.9, "n": 10, "feistel": {"ratio": True}},
        "pipeline": {"variants": [{"ratio": 0.4}, {"ratio": None}, {"ratios": {"a": 1}}]},
        "ratio": 3,
    }
    assert list(ratios(data)) == [
        ("permutation.ratio_lookups", 0.9),
        ("pipeline.variants[0].ratio", 0.4),
        ("ratio", 3.0),
    ]
    assert list(ratios({"share_detected": 0.99, "flips": 100})) == [("share_detected", 0.99)]


def test_goal_from_issue_18_where_one_applies() -> None:
    assert goal("dataplane", "permutation lookups/s, N=1e+07 (numpy: N / materialise)") == ">= 1.0"
    assert goal("dataplane", "permutation tracemalloc peak (MiB)") == ""
    assert goal("status", "permutation lookups/s") == ""
    assert goal("events", "broker.variants[0].consume_read_log.ratio") == ">= 0.5"


def test_every_benchmark_is_found_and_helpers_are_not() -> None:
    names = {p.stem for p in benchmarks([])}
    assert {"dataplane", "events", "controller", "checkpoint", "scale", "cluster"} <= names
    assert not {n for n in names if n in {"common", "reportkeys", "run_all", "__init__"} or
                n.endswith("_parts")}


def test_the_shared_broker_goes_to_those_that_take_one_except_controller() -> None:
    events = command(BENCH_DIR / "events.py", quick=True, bootstrap="h:1")
    assert events[-3:] == ["--quick", "--bootstrap", "h:1"]
    controller = command(BENCH_DIR / "controller.py", quick=True, bootstrap="h:1")
    assert "--bootstrap" not in controller
    assert "--quick" not in command(BENCH_DIR / "dataplane.py", quick=False, bootstrap=None)
    assert Path(events[1]).name == "events.py"


def test_a_benchmark_that_writes_reports_gets_the_shared_stacks_admin_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its reports must be signed by nodes it enrolls (bench/reportkeys.py)."""
    (tmp_path / "credentials").mkdir()
    (tmp_path / "keys").mkdir()
    monkeypatch.setenv("RUNLEDGER_CREDENTIALS", str(tmp_path / "credentials" / "admin.properties"))
    assert "--admin-key" not in command(BENCH_DIR / "projector.py", quick=True, bootstrap="h:1")
    (tmp_path / "keys" / "admin.key").write_text("")
    projector = command(BENCH_DIR / "projector.py", quick=True, bootstrap="h:1")
    assert projector[-2:] == ["--admin-key", str(tmp_path / "keys" / "admin.key")]
    assert "--admin-key" not in command(BENCH_DIR / "events.py", quick=True, bootstrap="h:1")
    monkeypatch.delenv("RUNLEDGER_CREDENTIALS")
    assert "--admin-key" not in command(BENCH_DIR / "projector.py", quick=True, bootstrap="h:1")


def test_a_summary_table_is_taken_as_it_is(tmp_path: Path) -> None:
    with_summary = tmp_path / "dataplane.json"
    with_summary.write_text('{"summary": [["permutation lookups/s", "9", "10", "0.90"]],'
                            ' "permutation": {"ratio_lookups": 0.9}}')
    without = tmp_path / "status.json"
    without.write_text('{"ratio": 0.5}')
    assert rows_of(Outcome("dataplane", "ok", 1.0, [with_summary])) == [
        ["dataplane", "permutation lookups/s", "0.90", ">= 1.0"]]
    assert rows_of(Outcome("status", "ok", 1.0, [without])) == [["status", "ratio", "0.5", ""]]
    assert rows_of(Outcome("events", "FAILED (exit 1)", 1.0, [])) == [
        ["events", "(no ratio: FAILED (exit 1))", "", ""]]
