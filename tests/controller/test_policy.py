"""controller/policy.py: failure classification from exits and missing progress.

The retry policy (backoff, escalation) is applied by the run's rules and tested
through them in tests/controller/test_run_decide.py and tests/controller/test_reconcile.py.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controller import policy
from controller.exits import ExitNote
from controller.spec.parts import RetryPolicy
from events.model import FAILURE_CLASSES
from events.state import RunState, Status


def test_exit_codes_and_signals_are_classified() -> None:
    assert policy.from_exit("r0", "n", None, 9).signature == "worker_crash:signal=9"
    assert policy.from_exit("r0", "n", 13, None).failure_class == "worker_crash"
    assert policy.from_exit("r0", "n", 65, None).failure_class == "data"
    assert policy.from_exit("r0", "n", 74, None).failure_class == "storage"
    assert policy.from_exit("r0", "n", 125, None).failure_class == "infrastructure"
    assert policy.from_exit("r0", "n", 86, None).failure_class == "non_finite"
    assert policy.from_exit("r0", "n", 87, None).failure_class == "silent_corruption"
    assert policy.no_progress(5, 100).signature == "hang:no_progress"
    assert policy.no_heartbeat("r1", "n", 100).failure_class == "hang"


# --- the job's own errors, and what counts against a node ----------------------------


def note(lid: str, code: int | None = 1, signal: int | None = None, at: int = 0,
         stepped: bool = False, launch_error: str = "") -> ExitNote:
    return ExitNote(lid, "n1", code, signal, at, f"/w/{lid}.log", f"tail of {lid}",
                    launch_error, stepped)


def test_a_launch_failure_is_the_jobs_and_carries_its_evidence() -> None:
    missing = note("r0", 127, launch_error="command[1] /c/x.py (x.py in code.workdir) "
                                           "does not exist")
    f = policy.from_exit("r0", "n1", 127, None, missing)
    assert (f.failure_class, f.signature) == ("job", "job:launch")
    assert "/c/x.py" in f.detail and "fix it" in f.detail
    assert (f.log_path, f.stderr_tail) == ("/w/r0.log", "tail of r0")


def test_a_start_the_agent_refused_for_the_specs_path_is_the_jobs_not_the_nodes() -> None:
    # agent.confine: a checkpoint.root outside the agent's allowed roots is exit 125 with
    # a launch error; without one (no free slots in time) 125 stays the node's.
    why = ("the agent on n1 refused the start: path_outside_roots: checkpoint.root '/elsewhere'"
           " is outside the allowed roots (/w)")
    refused = note("r0", 125, launch_error=why)
    f = policy.from_exit("r0", "n1", 125, None, refused)
    assert (f.failure_class, f.signature) == ("job", "job:launch")
    assert "checkpoint.root '/elsewhere'" in f.detail and policy.JOB_FIX in f.detail
    assert not policy.counts_against_node(f.failure_class, f.signature)
    slots = policy.from_exit("r0", "n1", 125, None, note("r0", 125))
    assert (slots.failure_class, slots.signature) == ("infrastructure", "infrastructure:exit=125")
    assert policy.counts_against_node(slots.failure_class, slots.signature)


@given(st.sampled_from(sorted(policy.JOB_EXIT_CODES)))
def test_usage_exit_codes_are_the_jobs(code: int) -> None:
    f = policy.from_exit("r0", "n1", code, None, note("r0", code))
    assert (f.failure_class, f.signature) == ("job", f"job:exit={code}")
    assert not policy.counts_against_node(f.failure_class, f.signature)


@given(st.integers(1, 255), st.integers(1, 4), st.integers(0, 10_000))
def test_the_same_exit_on_every_rank_before_a_step_is_the_jobs(code: int, world: int,
                                                                at: int) -> None:
    notes = [note(f"r{i}", code, at=at + i) for i in range(world)]
    found = policy.at_start(notes, world)
    if code in policy.EXIT_CLASSES:
        assert found is None  # the job named the class itself
        return
    assert found is not None and found.signature == f"job:start_exit={code}"
    assert found.logical_id == "r0" and found.stderr_tail == "tail of r0"
    # Not every rank, different codes, a signal, or a step first: not a start failure.
    assert policy.at_start(notes[:-1], world) is None
    assert policy.at_start([note(n.logical_id, None, 9) for n in notes], world) is None
    assert policy.at_start([*notes[:-1], note("rx", code, stepped=True)], world) is None
    if world > 1:
        assert policy.at_start([*notes[:-1], note("rx", code + 1)], world) is None


@given(st.sampled_from(FAILURE_CLASSES), st.integers(0, 300))
def test_only_node_evidence_counts_against_a_node(cls: str, code: int) -> None:
    counts = policy.counts_against_node
    assert not counts("job", f"job:exit={code}")
    assert not counts("worker_crash", f"worker_crash:exit={code}")
    assert counts("worker_crash", f"worker_crash:signal={code}")
    assert counts(cls, f"{cls}:x") == (cls in policy.NODE_FAULT_CLASSES)


def test_a_jobs_error_escalates_at_once_whatever_the_retry_policy() -> None:
    run = RunState(run_id="r", status=Status.RUNNING, spec_digest="s", principal="p",
                   world_size=1, dataset_id=None, submitted_at=0, updated_at=0)
    job = policy.from_exit("r0", "n1", 2, None)
    generous = RetryPolicy(attempts=9, escalate_after=9)
    decision = policy.decide(run, job, generous)
    assert decision.action == "escalate" and decision.backoff_ms == 0
    assert "fix it and submit again" in decision.reason
    assert policy.decide(run, policy.from_exit("r0", "n1", 1, None), generous).action == "restart"
