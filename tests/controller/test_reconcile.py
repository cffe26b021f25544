"""The controller's pure core, driven through whole scenarios without a broker."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.emitter import Out
from controller.model import Model, replay
from controller.reconcile import handle, tick
from controller.runplan import RunPlan
from controller.spec.parts import RetryPolicy
from events import runmanifest
from events.model import (
    Event,
    FailureClassified,
    GenerationStarted,
    GroupStartCommanded,
    GroupStopCommanded,
    RunCancelled,
    RunFinished,
    RunManifestPublished,
    RunSubmitted,
    WriteRejected,
    node_key,
)
from events.state import Status
from events.topics import COMMANDS, RUNS
from tests.events.builders import Ev

RUN = "run-1"
PLAN = RunPlan(world_size=2, argv=("train",), slots_per_node=2, heartbeat_timeout_ms=10_000,
               stall_timeout_ms=30_000, cancel_authority=frozenset({"oncall"}),
               retry={"worker_crash": RetryPolicy(attempts=5, backoff_base_s=1.0,
                                                  backoff_cap_s=4.0, escalate_after=3)})


def plan_of(_: RunSubmitted) -> RunPlan:
    return PLAN


@dataclass
class Sim:
    """Drives handle/tick like the controller process, keeping the emitted log.

    ``ev`` builds the inputs, stamped with the simulated clock ``now``."""

    model: Model = field(default_factory=lambda: Model(since=1_000_000))
    log: list[Out] = field(default_factory=list)
    plan: RunPlan = PLAN  # every run's
    ev: Ev = field(default_factory=lambda: Ev(RUN, start=1_000_000, tick=0, ids="in-{n}"))

    @property
    def now(self) -> int:
        return self.ev.now

    @now.setter
    def now(self, at: int) -> None:
        self.ev.now = at

    def plan_of(self, _: RunSubmitted) -> RunPlan:
        return self.plan

    def send(self, event: Event) -> list[Out]:
        self.model, out = handle(self.model, event, self.now, self.plan_of)
        self.log += out
        return out

    def tick(self, advance_ms: int = 0) -> list[Out]:
        self.now += advance_ms
        self.model, out = tick(self.model, self.now, self.plan_of)
        self.log += out
        return out

    @property
    def state(self):  # type: ignore[no-untyped-def]
        return self.model.runs[RUN]

    def agent(self, node: str, slots: int) -> None:
        self.send(self.ev.agent_registered(node, slots=slots, domain="d1"))

    def submit(self) -> None:
        self.send(self.ev.submitted(spec_digest="sha256:x", world_size=2, dataset_id=None))

    def beat(self, gen: int, *lids: str) -> list[Out]:
        out: list[Out] = []
        for lid in lids or ("r0", "r1"):
            out += self.send(self.ev.heartbeat(gen, lid, step=self.state.step, node="n1"))
        return out

    def step(self) -> list[Out]:
        """A committed step of the current generation: a failure after it is not at start."""
        return self.send(self.ev.step(self.state.generation, self.state.step + 1, tokens=1,
                                      loss_tokens=1, step_time_ms=1.0, input_wait_ms=0.0,
                                      loss=None))


def types(out: list[Out]) -> list[str]:
    return [e.event_type for _, e in out]


def running(plan: RunPlan = PLAN) -> Sim:
    sim = Sim(plan=plan)
    sim.agent("n1", 2)
    sim.submit()
    sim.tick()
    sim.beat(1)
    sim.tick()
    assert sim.state.status == Status.RUNNING
    return sim


def test_queued_with_a_reason_until_a_node_with_room_registers_then_whole_group() -> None:
    sim = Sim()
    sim.agent("small", 1)
    sim.submit()
    out = sim.tick()
    assert types(out) == ["RunQueued"]
    assert sim.state.status == Status.QUEUED
    assert "needs 2 slots, 1 free" in sim.state.queue_reason
    assert sim.tick(100) == []  # the same reason is not recorded twice
    sim.agent("big", 2)
    out = sim.tick(100)
    assert types(out) == ["RunAdmitted", "GenerationStarted", "GroupStartCommanded"]
    start = out[2][1]
    assert isinstance(start, GroupStartCommanded)
    assert start.node == "big" and [m.logical_id for m in start.members] == ["r0", "r1"]
    assert start.env["RUNLEDGER_RANKS"] == "r0,r1"
    assert out[2][0] == COMMANDS and out[0][0] == RUNS


def test_members_join_then_success_when_every_member_exits_zero() -> None:
    sim = running()
    assert types(sim.log[-1:]) == ["MembershipConfirmed"]
    for lid in ("r0", "r1"):
        sim.send(sim.ev.exited(1, lid, exit_code=0, node="n1"))
    out = sim.tick()
    assert types(out) == ["RunFinished", "RunManifestPublished"]
    assert sim.state.status == Status.SUCCEEDED


def test_crash_restarts_in_a_new_generation_after_backoff_and_fences_the_old_one() -> None:
    sim = running()
    sim.send(sim.ev.exited(1, "r1", exit_code=None, signal=9, node="n1"))
    out = sim.tick()
    assert types(out) == ["FailureClassified", "GroupStopCommanded"]
    failure = out[0][1]
    assert isinstance(failure, FailureClassified)
    assert (failure.failure_class, failure.action, failure.backoff_ms) == (
        "worker_crash", "restart", 1_000)
    assert sim.tick(500) == []  # still backing off
    out = sim.tick(600)
    assert types(out) == ["GenerationStarted", "GroupStartCommanded"]
    assert sim.state.generation == 2 and sim.state.status == Status.RECOVERING
    # The old generation may still compute, but it can never publish.
    out = sim.beat(1, "r0")
    assert types(out) == ["WriteRejected"]
    assert isinstance(out[0][1], WriteRejected) and out[0][1].reason == "stale_generation"
    out = sim.send(sim.ev.proposed(1, 10, manifest_path="m", manifest_digest="d",
                                   dataset_id=None))
    assert types(out) == ["WriteRejected"] and sim.state.checkpoint is None
    sim.beat(2)
    sim.tick()
    assert sim.state.status == Status.RUNNING


def test_silence_is_a_hang_and_alive_without_progress_is_a_hang_not_a_crash() -> None:
    sim = running()
    sim.now += 6_000
    sim.beat(1, "r0")
    assert sim.tick() == []
    out = sim.tick(4_001)
    assert isinstance(out[0][1], FailureClassified)
    assert out[0][1].signature == "hang:no_heartbeat" and out[0][1].logical_id == "r1"

    sim = running()
    for _ in range(8):
        sim.now += 5_000
        sim.beat(1)
        out = sim.tick()
        if out:
            break
    assert isinstance(out[0][1], FailureClassified)
    assert out[0][1].signature == "hang:no_progress"
    assert out[0][1].failure_class == "hang"


def test_the_end_of_a_run_publishes_the_manifest_the_log_rebuilds() -> None:
    sim = running()
    for _ in range(3):
        sim.step()
    sim.send(sim.ev.exited(1, "r0", exit_code=13, node="n1"))
    sim.tick()
    sim.tick(1_000)
    sim.beat(2)
    sim.tick()
    sim.step()
    for lid in ("r0", "r1"):
        sim.send(sim.ev.exited(2, lid, exit_code=0, node="n1"))
    out = sim.tick()
    published = out[1][1]
    assert isinstance(published, RunManifestPublished)
    facts = [e for topic, e in sim.log if topic == RUNS]
    doc = runmanifest.build(facts)
    assert doc is not None and published.digest == runmanifest.digest(doc)
    # no checkpoint root: only the log keeps it; the restart from 0 discarded 3 steps
    assert (published.path, published.status, published.incidents) == ("", "Succeeded", 1)
    assert (published.accepted_loss_tokens, published.discarded_loss_tokens) == (1, 3)
    assert published.header.causation_id == out[0][1].header.event_id
    assert sim.tick(100_000) == []  # published once


def test_rejections_recorded_after_the_end_leave_the_published_manifest_as_rebuilt() -> None:
    """A zombie's rejections counted in a window that closes after the run ended, and a
    late report refused as the run is over: both are facts after RunManifestPublished,
    and the document the log rebuilds (and the model's, which the file is written from)
    is still the one the fact digests."""
    sim = running()
    for _ in range(3):
        sim.step()
    sim.send(sim.ev.exited(1, "r0", exit_code=13, node="n1"))
    sim.tick()
    for _ in range(3):  # generation 1's r1 beats on: recorded once, then only counted
        out = sim.beat(1, "r1")
    assert types(out) == []
    sim.tick(1_000)
    sim.beat(2)
    sim.tick()
    sim.step()
    for lid in ("r0", "r1"):
        sim.send(sim.ev.exited(2, lid, exit_code=0, node="n1"))
    out = sim.tick()
    assert types(out) == ["RunFinished", "RunManifestPublished"]
    published = out[1][1]
    assert isinstance(published, RunManifestPublished)
    assert types(sim.send(sim.ev.step(2, 9, tokens=1, loss_tokens=1, step_time_ms=1.0,
                                      input_wait_ms=0.0, loss=None))) == ["WriteRejected"]
    assert types(sim.tick(60_000)) == ["WriteRejected"]  # the window's 2 suppressed ones
    assert sim.state.rejections == 1 + 1 + 2
    facts = [e for topic, e in sim.log if topic == RUNS]
    doc = runmanifest.build(facts)
    assert doc is not None and runmanifest.digest(doc) == published.digest
    assert doc["rejections"] == 1  # counted up to the end
    run = sim.model.tracked(RUN)
    assert run is not None
    assert runmanifest.digest(runmanifest.document(run.state, run.tally)) == published.digest
    again = replay(facts, since=0, plan_of=plan_of).tracked(RUN)
    assert again is not None and again.tally == run.tally


def test_same_failure_every_time_backs_off_growing_then_fails() -> None:
    sim = running()
    backoffs = []
    for _ in range(10):
        gen = sim.state.generation
        sim.step()
        sim.send(sim.ev.exited(gen, "r0", exit_code=13, node="n1"))
        out = sim.tick()
        failure = out[0][1]
        assert isinstance(failure, FailureClassified)
        backoffs.append(failure.backoff_ms)
        if failure.action == "escalate":
            # The ending closes the repeated_failure alert the second failure raised.
            assert types(out)[-3:] == ["RunFinished", "RunManifestPublished", "AlertResolved"]
            break
        sim.tick(failure.backoff_ms or 0)
        sim.beat(sim.state.generation)
        sim.tick()
    assert sim.state.status == Status.FAILED
    assert backoffs == [1_000, 2_000, 0]  # escalate_after=3 for the same signature
    assert sim.tick(100_000) == []


def test_cancel_records_the_fact_before_any_stop_and_later_reports_are_rejected() -> None:
    sim = running()
    out = sim.send(sim.ev.cancel_requested(1, principal="mallory", reason="x"))
    assert types(out) == ["WriteRejected"] and out[0][1].reason == "unauthorized"  # type: ignore[attr-defined]
    out = sim.send(sim.ev.cancel_requested(1, principal="oncall", reason="budget"))
    assert types(out) == ["RunCancelled", "RunManifestPublished", "GroupStopCommanded"]
    assert isinstance(out[0][1], RunCancelled) and isinstance(out[2][1], GroupStopCommanded)
    out = sim.send(sim.ev.step(1, 5, tokens=1, loss_tokens=1, step_time_ms=1.0,
                               input_wait_ms=0.0, loss=None))
    assert types(out) == ["WriteRejected"]
    assert sim.state.status == Status.CANCELLED and sim.state.step == 0


def test_a_restarted_controller_rebuilds_the_model_and_issues_no_duplicate_command() -> None:
    sim = running()
    sim.step()
    sim.send(sim.ev.exited(1, "r1", exit_code=1, node="n1"))
    sim.tick()
    sim.tick(1_001)
    facts = [e for topic, e in sim.log if topic == RUNS]
    rebuilt = replay(facts, since=sim.now, plan_of=plan_of)
    assert rebuilt.runs[RUN].generation == sim.state.generation == 2
    assert rebuilt.runs[RUN].status == sim.state.status
    beat = sim.ev.agent_heartbeat("n1", slots=2, domain="d1", busy_slots=2)
    rebuilt, _ = handle(rebuilt, beat, sim.now, plan_of)
    _, out = tick(rebuilt, sim.now + 100, plan_of)
    assert not [e for _, e in out if isinstance(e, GroupStartCommanded | GenerationStarted)]
    starts = [e.header.event_id for _, e in sim.log if isinstance(e, GroupStartCommanded)]
    assert len(starts) == len(set(starts)) == 2


def test_accepted_reports_become_facts_and_a_manifest_proposal_is_committed() -> None:
    sim = running()
    out = sim.send(sim.ev.step(1, 1, tokens=10, loss_tokens=9, step_time_ms=1.0,
                               input_wait_ms=0.0, loss=None))
    assert types(out) == ["StepCommitted"]
    early = sim.send(sim.ev.proposed(1, 1, manifest_path="m1", manifest_digest="d1",
                                     dataset_id=None))
    assert types(early) == ["WriteRejected"]  # no member has reported its shard yet
    assert early[0][1].reason == "incomplete_shards" and "r0, r1" in early[0][1].detail
    for lid in ("r0", "r1"):
        out = sim.send(sim.ev.shard(1, 1, lid, path=f"ck/g1/step-1/__{lid}.distcp", bytes=10,
                                    crc32c=7))
        assert types(out) == ["ShardWritten"]
    out = sim.send(sim.ev.proposed(1, 1, manifest_path="m1", manifest_digest="d1",
                                   dataset_id="sha256:ds", epoch=0, position=64,
                                   source_counts={"web": 40, "code": 24}))
    # model state and data progress commit at the same step boundary, in one batch
    assert types(out) == ["ManifestCommitted", "CursorAdvanced"]
    assert sim.state.checkpoint is not None and sim.state.checkpoint.step == 1
    assert sim.state.cursor is not None and sim.state.cursor.position == 64
    assert isinstance(sim.log[-1][1], Event)
    assert not isinstance(sim.log[-1][1], RunFinished)


def test_reports_for_unknown_runs_are_recorded_as_rejected() -> None:
    sim = Sim()
    out = sim.send(sim.ev.heartbeat(1, "r0", step=1, node="n1", run_id="ghost"))
    assert types(out) == ["WriteRejected"]
    rejected = out[0][1]
    assert isinstance(rejected, WriteRejected)
    assert (rejected.run_id, rejected.reason) == ("ghost", "unknown_run")
    out = sim.send(sim.ev.cancel_requested(0, principal="oncall", reason="x", run_id="ghost"))
    assert types(out) == ["WriteRejected"]


def test_a_spec_the_controller_cannot_read_fails_the_run_with_the_reason() -> None:
    from controller.runplan import plan_from_submission

    model = Model(since=0)
    bad = Ev("bad-run").submitted(at=5, event_id="s1", producer="cli/eve", spec_digest="sha256:y",
                                  spec_json='{"name": "x"}', principal="eve", world_size=1,
                                  dataset_id=None)
    model, out = handle(model, bad, 10, plan_from_submission)
    model, out = tick(model, 10, plan_from_submission)
    assert types(out) == ["RunFinished", "RunManifestPublished"]
    finished = out[0][1]
    assert isinstance(finished, RunFinished) and finished.outcome == "failed"
    assert "invalid spec" in finished.reason and "command" in finished.reason
    assert model.runs["bad-run"].status == Status.FAILED


def test_a_node_that_keeps_failing_is_quarantined_and_no_longer_placed() -> None:
    sim = running(RunPlan(world_size=2, argv=("train",), slots_per_node=2,
                          retry={"worker_crash": RetryPolicy(attempts=9, backoff_base_s=0.0,
                                                             backoff_cap_s=0.0,
                                                             escalate_after=9)}))
    quarantined = []
    # Three different signatures, all on node n1, all attributed to it (signals).
    for sig in (9, 11, 7):
        gen = sim.state.generation
        sim.send(sim.ev.exited(gen, "r0", signal=sig, node="n1"))
        out = sim.tick()
        quarantined += [e for _, e in out if e.event_type == "NodeQuarantined"]
        sim.tick(1)
    assert len(quarantined) == 1 and quarantined[0].run_id == node_key("n1")
    assert sim.model.inventory.nodes["n1"].quarantined
    # The restart finds its placement gone and goes back to the queue.
    assert sim.state.status == Status.QUEUED
    assert "n1" in sim.state.queue_reason or "no live agent" in sim.state.queue_reason


def test_runs_admitted_in_one_tick_never_share_a_slot() -> None:
    sim = Sim()
    sim.agent("n1", 3)
    for run in ("run-a", "run-b"):
        sim.send(sim.ev.submitted(run_id=run, spec_digest="sha256:x", world_size=2,
                                  dataset_id=None))
    out = sim.tick()
    admitted = [e for _, e in out if e.event_type == "RunAdmitted"]
    assert [e.run_id for e in admitted] == ["run-a"]
    assert sim.model.runs["run-b"].status == Status.QUEUED
    assert "needs 2 slots, 1 free" in sim.model.runs["run-b"].queue_reason


def test_a_member_still_starting_gets_the_start_timeout_not_the_heartbeat_timeout() -> None:
    sim = Sim()
    sim.agent("n1", 2)
    sim.submit()
    sim.tick()
    sim.now += 30_000
    sim.agent("n1", 2)  # the node itself stays alive
    assert sim.tick() == []  # 30 s without a first heartbeat: still starting
    sim.now += 30_001
    sim.agent("n1", 2)
    out = sim.tick()
    assert isinstance(out[0][1], FailureClassified)
    assert out[0][1].signature == "hang:no_heartbeat"


def _teardown_after_a_peer_exit() -> Sim:
    """r1 exits 0 after the last step; r0, tearing down, is silent past its 10 s timeout."""
    sim = running()
    sim.step()
    sim.beat(1)
    sim.send(sim.ev.exited(1, "r1", exit_code=0, node="n1"))
    assert sim.tick() == []
    sim.now += 11_000
    sim.agent("n1", 2)
    assert sim.tick() == []  # past r0's heartbeat timeout: within the exit grace
    return sim


def test_an_exit_beats_a_timeout_a_late_clean_exit_succeeds_live_and_replayed() -> None:
    sim = _teardown_after_a_peer_exit()
    facts = [e for topic, e in sim.log if topic == RUNS]
    rebuilt = replay(facts, since=sim.now, plan_of=plan_of)
    rebuilt, out = tick(rebuilt, sim.now, plan_of)
    assert out == []  # a restarted controller waits too
    late = sim.ev.exited(1, "r0", exit_code=0, node="n1")
    sim.now += 10_000
    for model in (sim.model, rebuilt):
        model, _ = handle(model, late, sim.now, plan_of)
        model, out = tick(model, sim.now, plan_of)
        assert types(out) == ["RunFinished", "RunManifestPublished"]
        assert model.runs[RUN].status == Status.SUCCEEDED and not model.runs[RUN].failures


def test_an_exit_beats_a_timeout_a_late_exception_is_a_crash_with_its_evidence() -> None:
    sim = _teardown_after_a_peer_exit()
    sim.now += 10_000
    sim.send(sim.ev.exited(1, "r0", exit_code=1, node="n1", log_path="/w/g1/r0.log",
                           stderr_tail="NameError: name 'x' is not defined"))
    out = sim.tick()
    (failure,) = [e for _, e in out if isinstance(e, FailureClassified)]
    assert (failure.signature, failure.logical_id) == ("worker_crash:exit=1", "r0")
    assert (failure.log_path, failure.stderr_tail) == ("/w/g1/r0.log",
                                                       "NameError: name 'x' is not defined")
