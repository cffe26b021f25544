"""The simulator's second reading of the log (proof.truth): each check on a small log that
keeps it, and the same log with one thing wrong, which it must name."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest

from agent.decide import WorkerKey
from controller.emitter import Out
from controller.liveness import EXIT_GRACE_MS
from controller.policy import NO_HEARTBEAT
from events.model import (
    CheckpointRevoked,
    CorruptionClassified,
    CorruptionSuspected,
    CursorAdvanced,
    FailureClassified,
    GenerationStarted,
    GroupStopCommanded,
    Header,
    HeartbeatRecorded,
    ManifestCommitted,
    ManifestProposed,
    Member,
    NodeQuarantined,
    RunAdmitted,
    RunSubmitted,
    ShardWritten,
    StepCommitted,
    StepReplayed,
    WriteRejected,
    node_key,
)
from events.state import Status
from events.topics import COMMANDS, RUNS
from proof import mutants, truth
from proof.props import Violation
from proof.world import FAULTY, NODES, ONCE, RUN, Worker, World, plan

GANG = (Member("r0", "n1", 0), Member("r1", "n2", 0))


def _h(event_id: str, gen: int, at: int, cause: str | None = None) -> Header:
    return Header(event_id, RUN, gen, at, "controller", cause)


def _truth() -> truth.Truth:
    return truth.Truth(plan(), frozenset(NODES), RUN)


def _started(gen: int, at: int, members: tuple[Member, ...] = GANG) -> GenerationStarted:
    return GenerationStarted(header=_h(f"g{gen}", gen, at), members=members,
                             reason="admitted" if gen == 1 else "restart", resume_step=0)


def _opening() -> list[Out]:
    return [(RUNS, RunSubmitted(header=_h("sub", 0, 1), spec_digest="sha256:x", spec_json="{}",
                                principal="alice", world_size=2, dataset_id="ds")),
            (RUNS, RunAdmitted(header=_h("adm", 1, 2), members=GANG)),
            (RUNS, _started(1, 2))]


def _shard(lid: str, gen: int = 1, step: int = 3) -> Out:
    return (RUNS, ShardWritten(header=_h(f"s{gen}{step}{lid}", gen, 10), step=step,
                               logical_id=lid, path=f"p/{lid}", bytes=1, crc32c=0))


def _proposal(gen: int = 1, step: int = 3) -> ManifestProposed:
    return ManifestProposed(header=_h(f"prop{gen}{step}", gen, 11), step=step,
                            manifest_path="m", manifest_digest=f"d{gen}{step}",
                            dataset_id="ds", epoch=0, position=64, source_counts={"web": 64})


def _commit(p: ManifestProposed, *, cursor: bool = True) -> list[Out]:
    cause = p.header.event_id
    out: list[Out] = [(RUNS, ManifestCommitted(
        header=_h(f"{cause}/c", p.generation, 12, cause), step=p.step, manifest_path="m",
        manifest_digest=p.manifest_digest))]
    if cursor:
        out.append((RUNS, CursorAdvanced(header=_h(f"{cause}/k", p.generation, 12, cause),
                                         step=p.step, dataset_id="ds", epoch=0, position=64,
                                         source_counts={"web": 64})))
    return out


def _committed() -> truth.Truth:
    t = _truth()
    t.appended(_opening())
    t.appended([_shard("r0"), _shard("r1")])
    p = _proposal()
    t.reading(p)
    t.appended(_commit(p))
    return t


def test_a_log_that_keeps_every_rule_passes_and_the_fold_follows_it() -> None:
    t = _committed()
    assert t.state is not None and t.state.cursor is not None and t.state.cursor.step == 3
    assert t.members[1] == GANG and t.shards[(1, 3)] == {"r0", "r1"}


def test_f_a_fact_the_fold_refuses_is_caught_with_its_reason() -> None:
    t = _truth()
    t.appended(_opening())
    early = CursorAdvanced(header=_h("k", 1, 5), step=3, dataset_id="ds", epoch=0, position=64,
                           source_counts={})
    with pytest.raises(Violation, match=r"F: CursorAdvanced k was appended.*"
                                        r"cursor_without_checkpoint"):
        t.appended([(RUNS, early)])
    # A rejection of a request for a run nobody submitted yet is no run's fact.
    _truth().appended([(RUNS, WriteRejected(
        header=_h("w", 0, 1), rejected_event_id="x", rejected_event_type="CancelRequested",
        reason="unknown_run", detail="d"))])


def test_c_a_commit_whose_cursor_did_not_move_is_caught() -> None:
    t = _truth()
    t.appended(_opening())
    t.appended([_shard("r0"), _shard("r1")])
    p = _proposal()
    t.reading(p)
    with pytest.raises(Violation, match=r"C: step 3 committed .* the cursor is at no step"):
        t.appended(_commit(p, cursor=False))
    # A proposal without a cursor (a job with its own loader) commits no cursor.
    t = _truth()
    t.appended(_opening())
    t.appended([_shard("r0"), _shard("r1")])
    bare = replace(_proposal(), position=None)
    t.reading(bare)
    t.appended(_commit(bare, cursor=False))


@pytest.mark.parametrize(("members", "why"), [
    (GANG[:1], r"starts 1 members \(r0@n1\) for a gang of 2"),
    ((GANG[0], replace(GANG[1], node="n1", slot=1)), r"over its slots: n1"),
    ((GANG[0], replace(GANG[1], logical_id="r0")), r"starts 2 members"),
    ((GANG[0], replace(GANG[1], node="n9")), r"no such node, quarantined or cordoned: n9"),
])
def test_g_a_start_that_is_no_whole_gang_within_the_slots_is_caught(
        members: tuple[Member, ...], why: str) -> None:
    t = _truth()
    with pytest.raises(Violation, match=f"G: generation 1 {why}" if "starts" in why else why):
        t.appended([*_opening()[:2], (RUNS, _started(1, 2, members))])


def test_s_a_commit_without_its_own_generations_shards_is_caught() -> None:
    t = _truth()
    t.appended(_opening())
    t.appended([_shard("r0"), _shard("r1")])
    stops: list[Out] = [(COMMANDS, GroupStopCommanded(
        header=_h(f"stop{n}", 1, 20), command_id=f"c{n}", node=n, reason="x"))
        for n in ("n1", "n2")]
    t.appended(stops)
    t.appended([(RUNS, _started(2, 30))])
    t.appended([_shard("r0", gen=2)])  # r1's shard of generation 2 is not in
    p = _proposal(gen=2)
    t.reading(p)
    with pytest.raises(Violation, match=r"S: step 3 of generation 2 committed without a shard "
                                        r"of that generation from r1"):
        t.appended(_commit(p))


def test_p8_a_start_before_the_old_generation_was_told_to_stop_everywhere_is_caught() -> None:
    t = _truth()
    t.appended(_opening())
    t.appended([(COMMANDS, GroupStopCommanded(header=_h("stop", 1, 20), command_id="c",
                                              node="n1", reason="x"))])
    with pytest.raises(Violation, match=r"P8: generation 2 starts while generation 1 was never "
                                        r"told to stop on n2"):
        t.appended([(RUNS, _started(2, 30))])


def test_w_a_run_that_stops_moving_or_never_ends_is_caught_not_waited_for() -> None:
    t = _committed()
    for i in range(truth.QUIET_STEPS - 1):
        t.stepped(False, i, 10**6)
    t.appended([(RUNS, StepCommitted(header=_h("st", 1, 40), step=1, tokens=1, loss_tokens=1,
                                     step_time_ms=1.0, input_wait_ms=0.0))])
    assert t.quiet == 0 and t.longest == truth.QUIET_STEPS - 1
    for i in range(truth.QUIET_STEPS - 1):
        t.stepped(False, i, 10**6)
    with pytest.raises(Violation, match=rf"W: no fact but rejections for {truth.QUIET_STEPS} "
                                        r"steps at step 7; the run is Starting"):
        t.stepped(False, 7, 10**6)
    t.stepped(True, 8, 10**6)  # an ended run owes nothing
    with pytest.raises(Violation, match="W: the run has not ended after 9 steps"):
        _committed().stepped(False, 9, 9)


def _beat(lid: str, gen: int, at: int) -> HeartbeatRecorded:
    return HeartbeatRecorded(header=_h(f"b{lid}{at}", gen, at), logical_id=lid,
                             node="n1" if lid == "r0" else "n2", step=0)


def test_v_a_true_step_refused_is_caught_a_stale_or_overtaken_one_is_not() -> None:
    t = _committed()
    step = StepCommitted(header=_h("st5", 1, 50), step=5, tokens=1, loss_tokens=1,
                         step_time_ms=1.0, input_wait_ms=0.0)
    refusal = (RUNS, WriteRejected(header=_h("w", 1, 51), rejected_event_id="st5",
                                   rejected_event_type="StepCommitted", reason="x", detail="d"))
    with pytest.raises(Violation, match=r"V: step 5 of live generation 1, past step 0, refused"):
        t.read(step, True, [refusal], 50)
    t.read(replace(step, step=4), True, [refusal], 50)  # overtaken by step 5: may be refused
    t.read(replace(step, step=9), False, [refusal], 50)  # its generation is revoked


def test_h_a_hang_called_before_the_timeout_or_after_the_exit_is_caught() -> None:
    p = plan()
    t = _committed()
    t.read(_beat("r1", 1, 1_000), True, [], 1_000)

    def hang(at: int) -> list[Out]:
        return [(RUNS, FailureClassified(
            header=_h(f"f{at}", 1, at), failure_class="hang", signature=NO_HEARTBEAT,
            action="restart", attempt=1, detail="d", logical_id="r1"))]
    with pytest.raises(Violation, match=r"H: r1 of generation 1 called hung at 4999: heard "
                                        r"from at 1000 \(3999 ms before"):
        t.appended(hang(1_000 + p.heartbeat_timeout_ms - 1))
    t.codes[(1, "r1")] = 1
    with pytest.raises(Violation, match=r"H: .* its exit read"):
        t.appended(hang(100_000))
    t.codes.clear()
    t.appended(hang(1_000 + p.heartbeat_timeout_ms))


def test_d_a_silent_member_or_a_stalled_run_left_unfound_is_caught() -> None:
    p = plan()
    t = _committed()
    t.read(_beat("r0", 1, 1_000), True, [], 1_000)
    t.read(_beat("r1", 1, 1_000), True, [], 1_000)
    bound = 1_000 + p.heartbeat_timeout_ms + EXIT_GRACE_MS + truth.DETECT_SLACK_MS
    t.watch(bound)
    with pytest.raises(Violation, match=r"D: r0 of generation 1 unheard since 1000"):
        t.watch(bound + 1)
    t.since = 50_000  # a restarted controller counts from its own start
    t.watch(bound + 1)
    t.failed.add(1)
    t.watch(10**9)  # found: nothing more is owed
    # Running, heartbeats alive, no step: the stall timeout.
    t = _committed()
    assert t.state is not None
    t.state = replace(t.state, status=Status.RUNNING, last_progress_at=2_000)
    t.heard = {(1, "r0"): 10**9, (1, "r1"): 10**9}
    t.watch(2_000 + p.stall_timeout_ms + truth.DETECT_SLACK_MS)
    with pytest.raises(Violation, match=r"D: generation 1 Running with no step since 2000"):
        t.watch(2_001 + p.stall_timeout_ms + truth.DETECT_SLACK_MS)


def test_k_a_worker_left_running_after_its_agent_read_the_stop_is_caught() -> None:
    world = World()
    a = world.agents["n1"]
    key = WorkerKey(RUN, 1, "r0")
    world.workers.append(Worker(key, "n1", 0, ("r0", "r1"), ()))
    world.commands.append(GroupStopCommanded(header=_h("stop", 1, 20), command_id="c1",
                                             node="n1", reason="x"))
    a.read = 1
    with pytest.raises(Violation, match=r"K: agent n1 read c1; still running: "):
        truth.stop_obeyed(world, a)
    world.workers[0].epoch = 1  # launched by the agent's last incarnation: out of its reach
    truth.stop_obeyed(world, a)
    world.workers[0].epoch, world.workers[0].phase = 0, "exited"
    truth.stop_obeyed(world, a)


def test_u_updated_at_that_is_not_the_newest_fact_is_caught() -> None:
    t = _truth()
    t.appended(_opening())
    assert t.state is not None and t.state.updated_at == 2
    with fold_swapped(), pytest.raises(Violation, match=r"U: after ShardWritten .* updated_at "
                                                         r"is 2, its newest fact is at 10"):
        t.appended([_shard("r0")])


def fold_swapped() -> contextlib.AbstractContextManager[None]:
    """The fold's one mutant that leaves ``updated_at`` behind (proof.mutants)."""
    m = next(x for x in mutants.catalogue()
             if x.function == "apply" and x.kind == "> -> <=" and "updated_at" in x.source)
    return mutants.applied(m)


def test_b_a_restart_inside_its_backoff_is_caught() -> None:
    t = _committed()
    t.appended([(RUNS, FailureClassified(
        header=_h("f", 1, 100), failure_class="worker_crash", signature="worker_crash:exit=1",
        action="restart", attempt=1, detail="d", logical_id="r1", backoff_ms=500))])
    stops: list[Out] = [(COMMANDS, GroupStopCommanded(
        header=_h(f"stop{n}", 1, 100), command_id=f"c{n}", node=n, reason="x"))
        for n in ("n1", "n2")]
    t.appended(stops)
    with pytest.raises(Violation, match=r"B: generation 2 starts at 599, inside the backoff "
                                        r"that ends at 600"):
        t.appended([(RUNS, _started(2, 599))])
    t.appended([(RUNS, _started(2, 600))])


def test_u_a_first_generation_that_is_not_starting_is_caught() -> None:
    m = next(x for x in mutants.catalogue()
             if x.function == "advance" and x.kind == "is -> is not" and "first" in x.source)
    with mutants.applied(m), pytest.raises(
            Violation, match=r"U: generation 1, started by 'admitted' from step 0, leaves the run "
                             r"Recovering"):
        _truth().appended(_opening())
    _truth().appended(_opening())


# -- Z: silent data corruption judged as the world knows it ------------------------------

def _suspected(t: truth.Truth, step: int = 4) -> CorruptionSuspected:
    """Generation 1 (r0 on n1, r1 on n2) suspects ``step``; the world says r1 miscomputed
    it (a transient unless the test says otherwise); generation 2 swaps the ranks."""
    s = CorruptionSuspected(header=_h("sus", 1, 20), step=step, detector="agreement",
                            ranks=(0, 1), fingerprints=(f"s{step}", "bad"), nodes=("n1", "n2"),
                            part="params", detail="the replicas disagree")
    t.world.miscomputed[(1, step)] = {1: ("n2", ONCE)}
    t.reading(s)
    t.appended([(RUNS, s)])
    t.appended([(COMMANDS, GroupStopCommanded(header=_h(f"stop{n}", 1, 21), command_id=f"c{n}",
                                              node=n, reason="x")) for n in ("n1", "n2")])
    swapped = (Member("r0", "n2", 0), Member("r1", "n1", 0))
    t.appended([(RUNS, _started(2, 30, swapped))])
    return s


def _replay(t: truth.Truth, step: int = 4) -> StepReplayed:
    r = StepReplayed(header=_h("rep", 2, 40), step=step, suspected_generation=1,
                     fingerprints=(f"s{step}", f"s{step}"), nodes=("n2", "n1"))
    t.reading(r)
    t.appended([(RUNS, r)])
    return r


def _verdict(r: StepReplayed, verdict: str, ranks: tuple[int, ...],
             nodes: tuple[str, ...]) -> Out:
    return (RUNS, CorruptionClassified(
        header=_h("verdict", 2, 41, r.header.event_id), step=r.step, suspected_generation=1,
        detector="agreement", verdict=verdict, ranks=ranks, nodes=nodes, detail="d"))


def _quarantine(node: str, why: str = "silent data corruption in run sim-run",
                cause: str | None = None) -> Out:
    return (RUNS, NodeQuarantined(header=Header(f"q{node}", node_key(node), 0, 41, "controller",
                                                cause), node=node, reason=why))


def test_z_a_one_off_is_transient_on_its_rank_and_node_and_nothing_else() -> None:
    t = _truth()
    t.appended(_opening())
    _suspected(t)
    r = _replay(t)
    t.appended([_verdict(r, "transient", (1,), ("n2",))])
    for wrong in (_verdict(r, "nondeterministic", (), ()), _verdict(r, "transient", (0,),
                                                                     ("n1",))):
        t = _truth()
        t.appended(_opening())
        _suspected(t)
        r = _replay(t)
        with pytest.raises(Violation, match=r"Z: step 4 of generation 1 judged .* the world "
                                            r"says transient on \['n2'\]"):
            t.appended([wrong])


def _faulty_n2() -> tuple[truth.Truth, StepReplayed]:
    """n2 miscomputes step 4 whenever it does: r1 there, then r0 there in the replay."""
    t = _truth()
    t.appended(_opening())
    _suspected(t)
    t.world.faulty["n2"] = 4
    t.world.miscomputed[(1, 4)] = {1: ("n2", FAULTY)}
    t.world.miscomputed[(2, 4)] = {0: ("n2", FAULTY)}
    r = replace(_replay(t), fingerprints=("bad", "s4"))
    t.reading(r)
    return t, r


def test_z_a_faulty_node_is_blamed_and_quarantined_in_the_same_transaction() -> None:
    t, r = _faulty_n2()
    t.appended([_verdict(r, "node_fault", (0, 1), ("n2",)), _quarantine("n2", cause="rep")])
    assert t.quarantined == {"n2"}
    t, r = _faulty_n2()
    with pytest.raises(Violation, match=r"Z: a node_fault verdict names n2, which the same "
                                        r"transaction does not quarantine"):
        t.appended([_verdict(r, "node_fault", (0, 1), ("n2",))])
    t, r = _faulty_n2()  # the same rank on the same node twice: no node can be blamed
    with pytest.raises(Violation, match=r"Z: .* judged nondeterministic .* the world says "
                                        r"node_fault on \['n2'\]"):
        t.appended([_verdict(r, "nondeterministic", (), ())])


def test_z_a_healthy_node_quarantined_for_corruption_is_caught_and_g_keeps_it_out() -> None:
    t = _truth()
    t.appended(_opening())
    with pytest.raises(Violation, match=r"Z: n1 quarantined \(silent data corruption.*faulty "
                                        r"nodes: none, and it did not miscompute"):
        t.appended([_quarantine("n1")])
    # Wrong twice on one node, in the suspicion and in its replay: no verdict can tell
    # that from a faulty node, so blaming it is true to the evidence.
    t = _truth()
    t.appended(_opening())
    _suspected(t)  # r1 on n2 miscomputed step 4 once
    t.world.miscomputed[(2, 4)] = {0: ("n2", ONCE)}
    r = _replay(t)
    t.appended([_verdict(r, "node_fault", (0, 1), ("n2",)), _quarantine("n2", cause="rep")])
    t = _truth()
    t.appended(_opening())
    t.failures = {"n3": 3}  # three failures counted against it, in other runs (Q)
    t.appended([_quarantine("n3", why="3 failures on the node")])  # not corruption's: G's
    t.appended([(COMMANDS, GroupStopCommanded(header=_h(f"stop{n}", 1, 21), command_id=f"c{n}",
                                              node=n, reason="x")) for n in ("n1", "n2")])
    with pytest.raises(Violation, match=r"G: generation 2 .*quarantined or cordoned: n3"):
        t.appended([(RUNS, _started(2, 30, (GANG[0], Member("r1", "n3", 0))))])


def test_z_a_revocation_before_the_suspect_step_or_a_corrupt_commit_is_caught() -> None:
    t = _committed()  # step 3 committed
    s = CorruptionSuspected(header=_h("sus", 1, 20), step=5, detector="agreement", ranks=(1,),
                            fingerprints=("a", "b"), nodes=("n1", "n2"), part="params",
                            detail="d")
    t.reading(s)
    with pytest.raises(Violation, match=r"Z: checkpoint step 3 revoked for a suspicion at "
                                        r"step 5"):
        t.appended([(RUNS, s), (RUNS, CheckpointRevoked(
            header=_h("rev", 1, 20, "sus"), step=3, manifest_path="m", manifest_digest="d13",
            reason="corruption_suspected"))])
    t = _truth()
    t.world.storage.manifests["m"] = ("p/r0", "p/r1")
    t.world.storage.corrupt.add("p/r1")
    t.appended(_opening())
    t.appended([_shard("r0"), _shard("r1")])
    p = _proposal()
    t.reading(p)
    with pytest.raises(Violation, match=r"Z: step 3 committed with shards written from "
                                        r"corrupted state: p/r1"):
        t.appended(_commit(p))
