"""runledger/rehearse/pilot.py: a pilot run's figures and verdict, from its events alone."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from events.model import Event, PreflightCheck
from events.state import Checkpoint
from runledger.rehearse import pilot
from runledger.rehearse.preflight import FAIL, PASS, verdict
from tests.events.builders import Ev

RUN = "tiny-pilot-0123456789"


def _ckpt(gen: int, step: int) -> Checkpoint:
    return Checkpoint(step, f"ckpt/g{gen}/s{step}/manifest.json", f"sha256:g{gen}s{step}", gen, 0)


def good_run(ev: Ev | None = None) -> list[Event]:
    """12 steps, a commit at 4, every rank killed after it, generation 2 restores 4."""
    ev = ev or Ev(RUN)
    out: list[Event] = [ev.submitted(), ev.generation_started(1)]
    out += [ev.step(1, s, step_time_ms=float(s)) for s in range(1, 5)]
    out += [ev.committed(1, 4), ev.staged(1, 4, mode="sync", stall_ms=30.0)]
    out.append(ev.failure(1, at=ev.now + 1000))
    out += [ev.generation_started(2, resume_step=4),
            ev.restored(2, _ckpt(1, 4), logical_id="w0", verify_ms=10.0, load_ms=20.0),
            ev.restored(2, _ckpt(1, 4), logical_id="w1", verify_ms=15.0, load_ms=40.0)]
    out.append(ev.step(2, 5, step_time_ms=5.0, at=ev.now + 2500))
    for s in (8, 12):
        out += [ev.step(2, s, step_time_ms=float(s)), ev.committed(2, s),
                ev.staged(2, s, mode="sync", stall_ms=50.0 if s == 8 else 70.0)]
    return [*out, ev.finished(2), ev.manifest_published(2, path="/ck/run-manifest.json")]


def by_check(rows: Sequence[PreflightCheck]) -> dict[str, PreflightCheck]:
    return {r.check: r for r in rows}


def test_a_pilot_that_restored_its_first_commit_passes_with_its_figures() -> None:
    events = good_run()
    f = pilot.figures(events)
    assert f.step_time_ms == 4.0  # median of 1, 2, 3, 4, 5, 8, 12
    assert f.checkpoint_ms == 50.0  # median of the stalls 30, 50, 70
    assert f.restore_ms == 55.0  # the slowest rank: 15 + 40
    assert f.commits == 3
    assert f.recovery_s is not None and f.recovery_s >= 1.5
    rows = pilot.rows(RUN, events, rto_s=300.0)
    assert verdict(rows) == PASS, rows
    found = by_check(rows)
    assert set(found) == {"pilot.steps", "pilot.checkpoint", "pilot.restore", "pilot.recovery",
                          "pilot.run", "pilot.manifest"}
    assert "generation 2 restored step 4 (sha256:g1s4)" in found["pilot.restore"].reason
    assert "/ck/run-manifest.json" in found["pilot.manifest"].reason


def test_a_run_that_failed_is_named_with_its_last_failure_and_where_its_logs_are() -> None:
    ev = Ev(RUN)
    events = [ev.submitted(), ev.generation_started(1), ev.step(1, 1),
              ev.failure(1, failure_class="storage", action="escalate"),
              ev.finished(1, outcome="failed", reason="storage failure escalated"),
              ev.manifest_published(1)]
    found = by_check(pilot.rows(RUN, events, rto_s=300.0))
    run = found["pilot.run"]
    assert run.verdict == FAIL
    assert run.reason.startswith("the pilot run failed: storage failure escalated;"
                                 " last failure: storage: exit 1;")
    assert f"`runledger logs {RUN}`" in run.reason
    assert found["pilot.checkpoint"].verdict == FAIL and found["pilot.checkpoint"].figure == 0
    assert found["pilot.restore"].verdict == FAIL
    assert "RUNLEDGER_RESUME_MANIFEST" in found["pilot.restore"].reason
    assert found["pilot.manifest"].verdict == PASS


def test_a_restore_of_a_revoked_checkpoint_does_not_count() -> None:
    ev = Ev(RUN)
    events = good_run(ev)
    events.append(ev.revoke(2, _ckpt(1, 4)))
    row = by_check(pilot.rows(RUN, events, rto_s=300.0))["pilot.restore"]
    assert row.verdict == FAIL and "sha256:g1s4" in row.reason
    assert pilot.restore_ms(events) is None


def test_a_run_that_never_ended_says_what_was_waited_for_and_lacks_its_manifest() -> None:
    ev = Ev(RUN)
    events = [ev.submitted(), ev.queued()]
    rows = pilot.rows(RUN, events, rto_s=300.0, waited="no end of the run after 5 s")
    found = by_check(rows)
    assert found["pilot.run"].reason.startswith(
        "the pilot run did not end: no end of the run after 5 s;")
    assert found["pilot.manifest"].verdict == FAIL
    assert found["pilot.steps"].verdict == FAIL and found["pilot.steps"].figure is None
    assert pilot.figures(events) == pilot.Figures(None, None, None, None, 0)


def test_step_times_fall_back_to_the_recorded_batches() -> None:
    ev = Ev(RUN)
    events = [ev.step_times(1, times=(10.0, 30.0, 20.0))]
    assert pilot.figures(events).step_time_ms == 20.0


@given(rto=st.floats(0.5, 5.0), delay_ms=st.integers(0, 10_000))
def test_recovery_is_judged_against_rto(rto: float, delay_ms: int) -> None:
    ev = Ev(RUN, tick=0)
    events = [ev.failure(1, at=1_000), ev.step(2, 5, at=1_000 + delay_ms)]
    row = by_check(pilot.rows(RUN, events, rto_s=rto))["pilot.recovery"]
    assert row.figure == delay_ms / 1000
    assert row.verdict == (PASS if delay_ms / 1000 <= rto else FAIL)
