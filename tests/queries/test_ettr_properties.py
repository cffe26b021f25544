"""Property: on any plausible log (crashes, lost nodes, planned elastic resizes) the
SQL ETTR equals the Python oracle, and the parts sum to the allocation."""

from __future__ import annotations

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.topics import RUNS
from queries.runner import run_query
from tests.queries.ettr_oracle import ettr_parts
from tests.queries.timeline import Timeline, project


@st.composite
def logs(draw: st.DrawFn) -> Timeline:
    tl = Timeline()
    tl.submit()
    tl.advance(draw(st.integers(0, 500)))
    tl.admit()
    gen, step, committed = 1, 0, 0
    tl.start(gen)
    for _ in range(draw(st.integers(1, 3))):
        tl.advance(draw(st.integers(0, 1000)))  # launch, rendezvous
        if draw(st.booleans()):
            tl.confirm(gen)
        tl.advance(draw(st.integers(0, 1000)))  # restore
        for _ in range(draw(st.integers(1, 12))):
            step += 1
            ms = draw(st.integers(1, 300))
            tl.step(gen, step, ms=ms, wait=draw(st.integers(0, ms)))
            tl.advance(draw(st.integers(0, 30)))  # between steps
            if draw(st.booleans()):
                tl.checkpoint(gen, step, stall=draw(st.integers(0, 100)))
                committed = step
        if not draw(st.booleans()):
            break
        how = draw(st.sampled_from(("crash", "lost", "resize")))
        last_step_end = tl.ev.now
        tl.advance(draw(st.integers(0, 100)))
        if how == "resize":  # a planned grow or shrink: no failure, a new generation
            gen += 1
            tl.start(gen, resume=committed or None, reason=draw(st.sampled_from(
                ("grow", "shrink"))))
            step = committed
            continue
        if draw(st.booleans()):
            tl.exit(gen)
            tl.advance(draw(st.integers(0, 100)))
        if how == "lost":  # last heard from before or after the generation's last step
            tl.lose(gen, last_seen_at=last_step_end + draw(st.integers(-500, 100)))
            tl.fail_lost(gen)
        else:
            tl.fail(gen)
        tl.advance(draw(st.integers(0, 300)))
        gen += 1
        tl.start(gen, resume=committed or None)
        step = committed
    tl.advance(draw(st.integers(0, 300)))
    tl.finish(gen)
    return tl


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs())
def test_sql_ettr_equals_the_oracle_and_sums_to_the_allocation(tl: Timeline) -> None:
    con = duckdb.connect()
    project(con, tl)
    sql = {r["part"]: r["seconds"] for r in run_query(con, "ettr", tl.run_id).records()}
    oracle = ettr_parts([r.event for r in tl.records() if r.topic == RUNS])
    for part, seconds in oracle.items():
        assert sql[part] == pytest.approx(seconds, abs=2e-3), part
    allocated = sql.pop("allocated")
    assert sum(sql.values()) == pytest.approx(allocated, abs=5e-3)
