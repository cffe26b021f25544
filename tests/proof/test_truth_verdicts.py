"""The simulator's truth about the controller's verdicts (proof.truth): whose failure (J), the
exit grace and the stall (H), a confirmation (M), a success (O), a failure quarantine (Q),
an exit 87 before its suspicion (Z) and the checkpoint interval (I). Each on a small log
that keeps it, then with one thing wrong, which it must name."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.decide import WorkerKey
from controller.emitter import Out
from controller.liveness import EXIT_GRACE_MS
from controller.policy import NO_HEARTBEAT, NO_PROGRESS
from controller.run_decide import NODE_QUARANTINE_AFTER, START_EXIT_WAIT_MS
from events.model import (
    AgentRegistered,
    CheckpointIntervalChanged,
    CheckpointStaged,
    FailureClassified,
    GenerationStarted,
    GroupStartCommanded,
    GroupStopCommanded,
    Header,
    HeartbeatRecorded,
    MembershipConfirmed,
    NodeQuarantined,
    RunFinished,
    StepCommitted,
    WorkerExited,
    node_key,
)
from events.topics import COMMANDS, RUNS
from events.workerenv import CHECKPOINT_INTERVAL_STEPS
from proof import truth
from proof.props import Violation
from proof.world import INTERVAL, RUN, Worker, World, plan
from tests.proof.logs import GANG, h, opened


def _failure(signature: str, at: int, *, node: str | None = None, lid: str | None = None,
             gen: int = 1) -> list[Out]:
    return [(RUNS, FailureClassified(
        header=h(f"f{at}{signature}", gen, at), failure_class=signature.split(":")[0],
        signature=signature, action="restart", attempt=1, detail="d", logical_id=lid,
        node=node))]


def _restarted(gen: int, at: int) -> list[Out]:
    """The old generation told to stop on its nodes, then the next one started (P8)."""
    stops: list[Out] = [(COMMANDS, GroupStopCommanded(
        header=h(f"stop{gen}{n}", gen - 1, at), command_id=f"c{gen}{n}", node=n, reason="x"))
        for n in ("n1", "n2")]
    return [*stops, (RUNS, GenerationStarted(header=h(f"g{gen}", gen, at), members=GANG,
                                             reason="restart", resume_step=0))]


def _exit(t: truth.Truth, lid: str, code: int, at: int) -> None:
    t.read(WorkerExited(header=h(f"x{lid}{at}", 1, at), logical_id=lid, node="n1",
                        exit_code=code), True, [], at)


def _broken(world: World) -> None:
    for rank, (lid, node) in enumerate((("r0", "n1"), ("r1", "n2"))):
        world.workers.append(Worker(WorkerKey(RUN, 1, lid), node, rank, ("r0", "r1"), (),
                                    broken=True, phase="exited"))


def test_j_a_job_verdict_needs_a_broken_job_and_a_broken_job_needs_one() -> None:
    with pytest.raises(Violation, match=r"J: generation 1 failed as the job's own error "
                                        r"\(job:start_exit=1"):
        opened().appended(_failure("job:start_exit=1", 50))
    world = World()
    _broken(world)
    opened(world=world).appended(_failure("job:start_exit=1", 50))
    t = opened(world=world)
    _exit(t, "r0", 1, 10)
    _exit(t, "r1", 1, 11)
    with pytest.raises(Violation, match=r"J: every worker of generation 1 raised at import, "
                                        r".* worker_crash:exit=1, not the job's"):
        t.appended(_failure("worker_crash:exit=1", 50))
    # A registration read since the generation started: the node may have restarted.
    t.read(AgentRegistered(header=h("reg", 0, 5), node="n2", slots=1, domain="n2"), True,
           [], 5)
    t.appended(_failure("worker_crash:exit=1", 50))


def test_h_a_hang_inside_the_exit_grace_and_a_stall_with_an_exit_are_caught() -> None:
    p = plan()
    t = opened()
    t.read(HeartbeatRecorded(header=h("b", 1, 1_000), logical_id="r1", node="n2", step=0),
           True, [], 1_000)
    _exit(t, "r0", 1, 2_000)
    due = 1_000 + p.heartbeat_timeout_ms
    with pytest.raises(Violation, match=r"H: r1 of generation 1 called hung .* inside the "
                                        rf"{EXIT_GRACE_MS} ms exit grace"):
        t.appended(_failure(NO_HEARTBEAT, due + EXIT_GRACE_MS, lid="r1"))
    t.appended(_failure(NO_HEARTBEAT, due + EXIT_GRACE_MS + 1, lid="r1"))
    t = opened()
    with pytest.raises(Violation, match=r"H: generation 1 called stalled at 100: its last "
                                        r"progress at 2"):
        t.appended(_failure(NO_PROGRESS, 100))
    t.appended(_failure(NO_PROGRESS, 3 + p.stall_timeout_ms))
    _exit(t, "r0", 0, 200)
    with pytest.raises(Violation, match=r"H: .* exits read: \['r0'\]"):
        t.appended(_failure(NO_PROGRESS, 10 + p.stall_timeout_ms))


def test_m_a_confirmation_needs_every_member_heard_or_exited() -> None:
    confirm = [(RUNS, MembershipConfirmed(header=h("mc", 1, 30), members_joined=2))]
    t = opened()
    t.read(HeartbeatRecorded(header=h("b", 1, 10), logical_id="r0", node="n1", step=0),
           True, [], 10)
    with pytest.raises(Violation, match=r"M: generation 1 confirmed with 2 joined; 2 members, "
                                        r"unheard and not exited: \['r1'\]"):
        t.appended(confirm)
    _exit(t, "r1", 0, 20)
    t.appended(confirm)


def test_o_a_success_needs_every_exit_0_and_every_rank_done() -> None:
    def running(world: World) -> truth.Truth:
        t = opened(world=world)
        for lid in ("r0", "r1"):
            t.read(HeartbeatRecorded(header=h(f"b{lid}", 1, 10), logical_id=lid, node="n1",
                                     step=0), True, [], 10)
        t.appended([(RUNS, MembershipConfirmed(header=h("mc", 1, 20), members_joined=2))])
        _exit(t, "r0", 0, 50)
        return t
    world = World()
    for rank, lid in enumerate(("r0", "r1")):
        world.workers.append(Worker(WorkerKey(RUN, 1, lid), f"n{rank + 1}", rank, ("r0", "r1"),
                                    (), phase="exited", clean=True))
    done = [(RUNS, RunFinished(header=h("fin", 1, 90), outcome="succeeded", reason="ok"))]
    with pytest.raises(Violation, match=r"O: the run succeeded in generation 1 with the exits "
                                        r"read \{'r0': 0, 'r1': None\}"):
        running(world).appended(done)
    t = running(world)
    _exit(t, "r1", 0, 60)
    t.appended(done)
    world.workers[1].clean = False
    t = running(world)
    _exit(t, "r1", 0, 60)
    with pytest.raises(Violation, match=r"O: .* workers not done: \['sim-run/g1/r1'\]"):
        t.appended(done)


def test_q_the_nth_counted_failure_quarantines_its_node_then_and_only_then() -> None:
    def quarantine(count: int) -> Out:
        return (RUNS, NodeQuarantined(header=Header(f"q{count}", node_key("n1"), 0, 80, "c"),
                                      node="n1", reason=f"{count} failures on the node"))
    def failing(signatures: tuple[str, ...]) -> truth.Truth:
        t = opened()
        for gen, sig in enumerate(signatures, 1):
            if gen > 1:
                t.appended(_restarted(gen, 1_000 * gen))
            t.appended(_failure(sig, 1_000 * gen + 500, node="n1", lid="r0", gen=gen))
        return t
    # worker_crash:exit=1 says nothing about the node: not counted
    counted = ("worker_crash:signal=9",) * (NODE_QUARANTINE_AFTER - 1)
    t = failing((*counted, "worker_crash:exit=1"))
    with pytest.raises(Violation, match=rf"Q: n1 quarantined \({NODE_QUARANTINE_AFTER} "
                                        rf"failures on the node\) after "
                                        rf"{NODE_QUARANTINE_AFTER - 1} failures"):
        t.appended([quarantine(NODE_QUARANTINE_AFTER)])
    t = failing(counted)
    gen = NODE_QUARANTINE_AFTER
    t.appended(_restarted(gen, 1_000 * gen))
    last = _failure("storage:exit=74", 1_000 * gen + 500, node="n1", lid="r0", gen=gen)
    with pytest.raises(Violation, match=rf"Q: n1 reached {NODE_QUARANTINE_AFTER} failures "
                                        r"and is not quarantined"):
        t.appended(last)
    t = failing(counted)
    t.appended(_restarted(gen, 1_000 * gen))
    t.appended([*last, quarantine(NODE_QUARANTINE_AFTER)])


def test_z_an_exit_87_is_not_judged_while_its_suspicion_is_on_its_way() -> None:
    world = World()
    world.suspicions[1] = 40

    def exited(*lids: str) -> truth.Truth:
        t = opened(world=world)
        for i, lid in enumerate(lids):
            _exit(t, lid, 87, 50 + i)
        return t
    early = _failure("silent_corruption:exit=87", 50 + START_EXIT_WAIT_MS - 1)
    with pytest.raises(Violation, match=r"Z: generation 1 failed from an exit 87 .* its "
                                        r"suspicion \(sent at 40\) not yet read"):
        exited("r0").appended(early)
    exited("r0").appended(_failure("silent_corruption:exit=87", 50 + START_EXIT_WAIT_MS))
    exited("r0", "r1").appended(early)  # every member's exit is read: nothing more to wait


def _staged(step: int, at: int, gen: int = 1) -> CheckpointStaged:
    return CheckpointStaged(header=h(f"st{gen}{step}", gen, at), step=step, mode="sync",
                            stall_ms=100.0, waited_ms=0.0, bytes=1, backlog=0)


def test_i_the_interval_changes_as_the_rule_says_and_starts_carry_it() -> None:
    t = opened(auto=True)
    t.appended([(RUNS, _staged(3, 1_000))])
    second = _staged(6, 4_000)
    with pytest.raises(Violation, match=r"I: staging step 6 of generation 1 changed the "
                                        r"interval to None, where the rule says Change\("):
        t.appended([(RUNS, second)])
    t = opened(auto=True)
    t.appended([(RUNS, _staged(3, 1_000))])
    # 3 steps in 3 s less the 0.1 s stall; T = sqrt(2 * 0.1 * 20) = 2 s: 2 steps
    change = CheckpointIntervalChanged(header=h("ic", 1, 4_000, second.header.event_id),
                                       interval_steps=2, interval_s=2.0, cost_s=0.1,
                                       mtbf_s=20.0, mtbf_source="prior")
    t.appended([(RUNS, second), (RUNS, change)])
    start = GroupStartCommanded(header=h("s2", 2, 5_000), command_id="c", node="n1",
                                members=GANG[:1], world_size=2, master_addr="a",
                                master_port=1, argv=("x",),
                                env={CHECKPOINT_INTERVAL_STEPS: str(INTERVAL)})
    with pytest.raises(Violation, match=r"I: generation 2 starts on n1 with interval 3, and "
                                        r"the log holds 2"):
        t.appended([(COMMANDS, start)])
    t.appended([(COMMANDS, replace(start, env={CHECKPOINT_INTERVAL_STEPS: "2"}))])
    # Without the automatic interval, a staging changes nothing.
    opened().appended([(RUNS, _staged(3, 1_000)), (RUNS, _staged(6, 4_000))])


def test_a_step_counts_as_progress_for_the_stall() -> None:
    p = plan()
    t = opened()
    t.appended([(RUNS, StepCommitted(header=h("st", 1, 5_000), step=1, tokens=1,
                                     loss_tokens=1, step_time_ms=1.0, input_wait_ms=0.0))])
    with pytest.raises(Violation, match=r"H: generation 1 called stalled .* last progress "
                                        r"at 5000"):
        t.appended(_failure(NO_PROGRESS, 5_000 + p.stall_timeout_ms))
