"""Admission gates: the spec section, the gate book, the admission rule and the evidence judge."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from controller import gates
from controller.errors import SpecError
from controller.evidence import judged
from controller.gates import DRILL, PILOT, PREFLIGHT, GateBook, blocked, misfiled, observe
from controller.model import Tracked
from controller.run_decide import Admit, Queue, decide
from controller.runplan import plan_from_submission
from controller.spec.runspec import parse_spec
from events.base import Header, spec_key
from events.model import DrillCompleted, Event, PilotCompleted, PreflightCompleted, RunSubmitted
from events.record import Record
from events.state import Status
from events.topics import REPORTS, REQUESTS
from tests.controller.spec.test_runspec import MINIMAL
from tests.controller.test_run_decide import PLAN, state, world

DIGEST = "sha256:" + "5e" * 32
OTHER = "sha256:" + "0f" * 32


def header(n: int, digest: str = DIGEST, key: str | None = None) -> Header:
    return Header(f"ev-{n}", key or spec_key(digest), 0, 1_000 + n, "cli")


def preflight(verdict: str, n: int = 1, digest: str = DIGEST) -> PreflightCompleted:
    return PreflightCompleted(header=header(n, digest), spec_digest=digest, principal="alice",
                              verdict=verdict, checks=())


def pilot(verdict: str, n: int = 1, digest: str = DIGEST) -> PilotCompleted:
    return PilotCompleted(header=header(n, digest), spec_digest=digest, principal="alice",
                          verdict=verdict, pilot_run_id="p-1", steps=10, replicas=1,
                          step_time_ms=None, checkpoint_ms=None, restore_ms=None, checks=())


def drill(fault: str, verdict: str, n: int = 1, digest: str = DIGEST) -> DrillCompleted:
    return DrillCompleted(header=header(n, digest), spec_digest=digest, principal="alice",
                          fault=fault, verdict=verdict, drill_run_id="d-1", rpo_s=None,
                          rto_s=None, reason="", checks=())


def book_of(*events: Event) -> GateBook:
    book = gates.EMPTY
    for e in events:
        book = observe(book, e)
    return book


# -- the spec section -------------------------------------------------------------------

def spec_problems(section: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(yaml.safe_dump({**MINIMAL, "gates": section}), "test.yaml")
    return info.value.problems


def test_an_unknown_gate_is_refused_at_submit_naming_the_field_and_the_known_gates() -> None:
    [problem] = spec_problems({"require": ["preflight", "smoke"]})
    assert problem.startswith("gates.require[1]:"), problem
    assert "'smoke'" in problem and "preflight, pilot, drill" in problem


def test_scope_code_is_refused_saying_why_and_other_bad_sections_are_named() -> None:
    [problem] = spec_problems({"require": ["drill"], "scope": "code"})
    assert problem.startswith("gates.scope:") and "use 'digest'" in problem, problem
    assert spec_problems({"require": []})[0].startswith("gates.require:")
    assert spec_problems({"require": ["drill"], "when": "now"})[0].startswith("gates.when:")


def test_gates_are_a_set_in_the_digest_and_a_spec_without_them_keeps_its_digest() -> None:
    plain = parse_spec(yaml.safe_dump(MINIMAL), "a.yaml")
    assert "gates" not in plain.canonical_json()
    one = parse_spec(yaml.safe_dump({**MINIMAL, "gates": {"require": ["drill", "preflight"]}}),
                     "b.yaml")
    two = parse_spec(yaml.safe_dump(
        {**MINIMAL, "gates": {"require": ["preflight", "drill", "drill"], "scope": "digest"}}),
        "c.yaml")
    assert one.digest() == two.digest() != plain.digest()
    assert one.gates is not None and one.gates.require == ["preflight", "drill"]
    submitted = RunSubmitted(header=Header("s", "run-1", 0, 0, "cli"), spec_digest=one.digest(),
                             spec_json=one.canonical_json(), principal="alice", world_size=2)
    assert plan_from_submission(submitted).gates == (PREFLIGHT, DRILL)


# -- the gate book ----------------------------------------------------------------------

def test_each_gate_names_what_is_missing_or_failed_and_the_newest_verdict_counts() -> None:
    assert blocked(gates.EMPTY, (), DIGEST) is None
    missing = blocked(gates.EMPTY, (PREFLIGHT, PILOT), DIGEST)
    assert missing is not None and "gate preflight: no PreflightCompleted" in missing
    assert "gate pilot: no PilotCompleted" in missing and "`runledger pilot SPEC`" in missing
    failed = book_of(preflight("pass", 1), preflight("fail", 2), pilot("pass"))
    reason = blocked(failed, (PREFLIGHT, PILOT), DIGEST)
    assert reason is not None and "gate preflight: the newest PreflightCompleted" in reason
    assert "pilot" not in reason
    assert blocked(observe(failed, preflight("pass", 3)), (PREFLIGHT, PILOT), DIGEST) is None
    # Evidence about another spec opens nothing for this one.
    assert blocked(book_of(preflight("pass", digest=OTHER)), (PREFLIGHT,), DIGEST) is not None


def test_the_drill_gate_needs_one_pass_and_no_failure_among_the_newest_per_fault() -> None:
    skipped = book_of(drill("topology_change", "skip"))
    assert "none passed" in (blocked(skipped, (DRILL,), DIGEST) or "")
    passed = observe(skipped, drill("kill_worker", "pass", 2))
    assert blocked(passed, (DRILL,), DIGEST) is None
    broke = observe(passed, drill("stale_worker", "fail", 3))
    assert "fault(s) stale_worker failed" in (blocked(broke, (DRILL,), DIGEST) or "")
    assert blocked(observe(broke, drill("stale_worker", "pass", 4)), (DRILL,), DIGEST) is None


def test_misfiled_evidence_changes_nothing() -> None:
    wrong = replace(preflight("pass"), header=header(1, key=spec_key(OTHER)))
    assert misfiled(wrong) is not None and "keyed" in (misfiled(wrong) or "")
    assert observe(gates.EMPTY, wrong) == gates.EMPTY


_FAULTS = st.sampled_from(["kill", "hang", "straggler", "stale"])
_VERDICTS = st.sampled_from(["pass", "fail", "skip"])


@given(st.lists(st.tuples(_FAULTS, _VERDICTS), max_size=12))
def test_the_drill_gate_is_the_newest_verdict_per_fault(seq: list[tuple[str, str]]) -> None:
    book = book_of(*(drill(f, v, i) for i, (f, v) in enumerate(seq)))
    newest = dict(seq)  # later entries win, as in the log
    opens = bool(newest) and "fail" not in newest.values() and "pass" in newest.values()
    assert (blocked(book, (DRILL,), DIGEST) is None) == opens


# -- the admission rule (run_decide rule 2) ---------------------------------------------

def test_a_gated_run_is_queued_with_the_gate_reason_once_then_admitted_on_evidence() -> None:
    plan = replace(PLAN, gates=(DRILL,))
    submitted = state(Status.SUBMITTED, spec_digest=DIGEST)
    (queued,) = decide(Tracked(submitted, plan), world())
    assert isinstance(queued, Queue) and queued.reason.startswith("gate drill: no DrillCompleted")
    waiting = replace(submitted, status=Status.QUEUED, queue_reason=queued.reason)
    assert decide(Tracked(waiting, plan), world()) == ()  # recorded once
    opened = world()._replace(gates=book_of(drill("kill_worker", "pass")))
    admit, _start = decide(Tracked(waiting, plan), opened)
    assert isinstance(admit, Admit)
    # Ungated runs never look at the book.
    assert isinstance(decide(Tracked(submitted, PLAN), world())[0], Admit)


# -- the evidence judge (controller.evidence) -------------------------------------------

def record(event: Event, topic: str = REQUESTS) -> Record:
    return Record(topic, 0, 7, 0, event, 1, value=b"v" * 10)


def test_evidence_is_believed_only_past_the_door_and_the_signature_judge() -> None:
    good = preflight("pass")
    assert judged(gates.EMPTY, record(good), None) == book_of(good)
    assert judged(gates.EMPTY, record(good, REPORTS), None) == gates.EMPTY  # stray
    refuse = lambda _r: ("unsigned", "not signed")  # noqa: E731
    assert judged(gates.EMPTY, record(good), refuse) == gates.EMPTY
    assert judged(gates.EMPTY, record(good), lambda _r: None) == book_of(good)
    wrong = replace(good, header=header(1, key=spec_key(OTHER)))
    assert judged(gates.EMPTY, record(wrong), None) == gates.EMPTY
