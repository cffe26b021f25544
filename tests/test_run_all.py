"""Tests for bench/run_all.py's pure parts: which numbers become rows, goals, commands."""

from __future__ import annotations

from pathlib import Path

from bench.run_all import BENCH_DIR, benchmarks, command, goal, ratios


def test_ratios_collects_every_ratio_key_with_its_path() -> None:
    data = {
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


def test_goal_from_issue_18_where_one_applies() -> None:
    assert goal("dataplane", "permutation.ratio_lookups") == ">= 1.0"
    assert goal("dataplane", "permutation.ratio_memory") == ""
    assert goal("status", "permutation.ratio_lookups") == ""


def test_every_benchmark_is_found_and_helpers_are_not() -> None:
    names = {p.stem for p in benchmarks([])}
    assert {"dataplane", "events", "controller", "checkpoint"} <= names
    assert not {n for n in names if n in {"common", "run_all", "__init__"} or
                n.endswith("_parts")}


def test_the_shared_broker_goes_to_those_that_take_one_except_controller() -> None:
    events = command(BENCH_DIR / "events.py", quick=True, bootstrap="h:1")
    assert events[-3:] == ["--quick", "--bootstrap", "h:1"]
    controller = command(BENCH_DIR / "controller.py", quick=True, bootstrap="h:1")
    assert "--bootstrap" not in controller
    assert "--quick" not in command(BENCH_DIR / "dataplane.py", quick=False, bootstrap=None)
    assert Path(events[1]).name == "events.py"
