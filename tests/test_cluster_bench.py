"""bench/cluster.py's verdicts on a log, which decide whether a scenario passed: pure.

The scenario itself runs in ``make bench-smoke`` (its --quick form, a real stack).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bench.cluster_check_parts import in_turn, stretches
from bench.cluster_fleet_parts import PER_NODE, Shape
from bench.cluster_watch_parts import Page, bucket_quantiles, buckets, summed
from events.model import Header, StepCommitted
from events.record import Record


def _fact(partition: int, offset: int, writer: str) -> Record:
    event = StepCommitted(header=Header(f"r/{offset}", "r", 1, 0, "w"), step=offset,
                          tokens=1, loss_tokens=1, step_time_ms=1.0, input_wait_ms=0.0,
                          loss=1.0)
    return Record("runledger.runs", partition, offset, 0, event, 1, writer)


def test_writers_in_the_groups_turn_pass_and_a_writer_back_out_of_turn_fails() -> None:
    turns = ["c2", "c1", "c4"]
    assert in_turn(["c2", "c1", "c4"], turns)
    assert in_turn(["c2", "c4"], turns)  # c1 held it and wrote nothing: fine
    assert in_turn([], turns)
    # c2 appended again after the group moved the partition on: two owners.
    assert not in_turn(["c2", "c1", "c2"], turns)
    assert not in_turn(["c3"], turns)  # never given the partition
    # A writer the group gave the partition twice may write twice.
    assert in_turn(["c1", "c2", "c1"], ["c1", "c2", "c1"])


@given(st.lists(st.sampled_from("abc"), max_size=8), st.lists(st.sampled_from("abc"),
                                                                max_size=8))
def test_in_turn_is_being_a_subsequence(writers: list[str], turns: list[str]) -> None:
    def subsequence(xs: list[str], ys: list[str]) -> bool:
        if not xs:
            return True
        if not ys:
            return False
        return subsequence(xs[1:], ys[1:]) if xs[0] == ys[0] else subsequence(xs, ys[1:])

    assert in_turn(writers, turns) == subsequence(writers, turns)


def test_stretches_follow_offsets_per_partition_not_arrival() -> None:
    records = [_fact(0, 2, "c1"), _fact(0, 0, "c2"), _fact(0, 1, "c2"), _fact(1, 0, "c3"),
               _fact(0, 3, "c1"), _fact(1, 1, "c3")]
    assert stretches(records) == {0: ["c2", "c1"], 1: ["c3"]}


def test_each_partition_has_room_for_its_live_runs_and_one_spare_node() -> None:
    shape = Shape(concurrent=1_000, finished=0, partitions=6)
    assert sum(shape.runs_on(p) for p in range(6)) == 1_000
    for p in range(6):
        assert (shape.nodes_on(p) - 1) * PER_NODE >= shape.runs_on(p)


def _page(delays_s: list[float]) -> str:
    """A controller's metrics page as it serves it, with these reports observed."""
    from prometheus_client import CollectorRegistry, generate_latest

    from controller.latency import Histogram
    from controller.metrics import latency_family

    hist = Histogram()
    for d in delays_s:
        hist.observe(d)

    class One:
        def collect(self) -> Any:
            yield latency_family(hist.snapshot())

    registry = CollectorRegistry()
    registry.register(One())  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def test_the_controllers_own_quantiles_are_read_from_their_pages_between_two_readings() -> None:
    before = buckets(_page([0.003] * 50))
    after = buckets(_page([0.003] * 50 + [0.02] * 80 + [0.2] * 19 + [3.0]))
    assert before[float("inf")] == 50 and after[float("inf")] == 150
    q = bucket_quantiles(before, after)
    # Of the 100 observed in between: 80 under 25 ms, 19 under 250 ms, one under 5 s.
    assert q == {"count": 100.0, "p50_le_s": 0.025, "p90_le_s": 0.25, "p99_le_s": 0.25}
    assert bucket_quantiles(before, after, (100,))["p100_le_s"] == 5.0
    # Two controllers' pages summed are one histogram of both.
    page = Page(0.1, 40, after)
    both = summed([page, page, None])
    assert both[float("inf")] == 300 and both[0.025] == 2 * after[0.025]
    assert bucket_quantiles(after, after)["p50_le_s"] is None  # nothing observed
