"""`runs` filters and `status --watch` lines (runledger.views.statusview); pure."""

from __future__ import annotations

import pytest

from runledger.errors import RunledgerError
from runledger.views import statusview

NOW = 1_700_000_000_000


def row(run_id: str, state: str, at: int) -> dict[str, object]:
    return {"run_id": run_id, "state": state, "submitted_at": at}


def test_since_takes_durations_and_iso_times_and_names_a_bad_one() -> None:
    assert statusview.since_ms("90s", NOW) == NOW - 90_000
    assert statusview.since_ms("2h", NOW) == NOW - 7_200_000
    assert statusview.since_ms("1w", NOW) == NOW - 7 * 86_400_000
    assert statusview.since_ms("2024-06-01T00:00:00Z", NOW) == 1_717_200_000_000
    assert statusview.since_ms("2024-06-01", NOW) == 1_717_200_000_000
    with pytest.raises(RunledgerError, match="'yesterday' is neither a duration"):
        statusview.since_ms("yesterday", NOW)


def test_states_take_any_case_and_refuse_an_unknown_one_naming_the_valid() -> None:
    assert statusview.states(["running", "FAILED"]) == {"Running", "Failed"}
    with pytest.raises(RunledgerError, match=r"'done' is no run state; use one of .*Succeeded"):
        statusview.states(["done"])


def test_select_filters_by_state_and_time_and_keeps_the_newest_n() -> None:
    rows = [row("a", "Running", 1), row("b", "Failed", 2), row("c", "Running", 3),
            row("d", "Running", 4)]
    assert statusview.select(rows, frozenset({"Running"}), 2, None) == rows[2:]
    assert statusview.select(rows, frozenset(), None, 2) == rows[2:]
    assert statusview.select(rows, frozenset({"Failed"}), 3, None) == []
    with pytest.raises(RunledgerError, match="--limit must be at least 1, got 0"):
        statusview.select(rows, frozenset(), None, 0)
