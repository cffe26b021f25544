"""The node agent's pure decisions (``agent.decide``): no broker, no process, no clock."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agent.decide import (
    REJECTED_EXIT_CODE,
    REPLAYED,
    SUPERSEDED,
    Action,
    AgentConfig,
    AgentState,
    Decision,
    Ignore,
    Launch,
    Reject,
    Terminate,
    WorkerKey,
    decide,
    lookahead,
    shutdown,
    worker_exited,
)
from events.model import GroupStartCommanded, GroupStopCommanded
from events.workerenv import CHECKPOINT_ROOT, CHECKPOINT_TIERS, RESUME_CANDIDATES
from tests.agent.commands import NOW, start_cmd, stop_cmd

CFG = AgentConfig(node="n1", slots=3, bootstrap="kafka:9092", heartbeat_interval_s=1.5)


def run_all(*commands: GroupStartCommanded | GroupStopCommanded,
            state: AgentState | None = None) -> Decision:
    state = state or AgentState()
    actions: list[Action] = []
    for c in commands:
        d = decide(CFG, state, c, NOW)
        state = d.state
        actions += d.actions
    return Decision(state, tuple(actions))


def kinds(d: Decision) -> list[str]:
    return [type(a).__name__ for a in d.actions]


def test_start_launches_each_member_with_its_global_and_local_rank() -> None:
    cmd = start_cmd("n1", "run", 1, ("b", "d"), ranks=("a", "b", "c", "d"))
    d = decide(CFG, AgentState(), cmd, NOW)
    launches = [a for a in d.actions if isinstance(a, Launch)]
    assert [(a.key.logical_id, a.worker_env.rank, a.worker_env.local_rank) for a in launches] == [
        ("b", 1, 0), ("d", 3, 1)]
    env = launches[0].worker_env
    assert (env.run_id, env.generation, env.node, env.world_size) == ("run", 1, "n1", 4)
    assert (env.bootstrap, env.heartbeat_interval_s, env.master_port) == ("kafka:9092", 1.5, 29500)
    assert launches[0].log_path == "run/g1/b.log"
    assert launches[0].argv == cmd.argv and launches[0].causation_id == cmd.header.event_id
    assert d.state.busy_slots == 2 and ("run", 1) in d.state.started


def test_without_a_rank_list_only_a_whole_group_has_ranks() -> None:
    whole = start_cmd("n1", "run", 1, ("x", "y"))
    whole = replace(whole, env={})
    assert [a.worker_env.rank for a in decide(CFG, AgentState(), whole, NOW).actions
            if isinstance(a, Launch)] == [0, 1]
    part = replace(whole, world_size=4)
    d = decide(CFG, AgentState(), part, NOW)
    assert kinds(d) == ["Reject", "Reject"] and d.state.busy_slots == 0
    assert "RUNLEDGER_RANKS is missing" in d.actions[0].reason  # type: ignore[union-attr]


def test_duplicates_are_ignored_by_id_and_by_run_generation() -> None:
    cmd = start_cmd("n1", "run", 1, ("r0",))
    same_gen_new_id = start_cmd("n1", "run", 1, ("r0",), cid="reissued")
    d = run_all(cmd, cmd, same_gen_new_id)
    assert kinds(d) == ["Launch", "Ignore", "Ignore"]
    assert [a.reason for a in d.actions[1:]] == [  # type: ignore[union-attr]
        "duplicate command id", "start of run g1 was already handled"]
    assert [a.refused for a in d.actions[1:]] == [REPLAYED, REPLAYED]  # type: ignore[union-attr]


def test_older_and_revoked_generations_are_ignored() -> None:
    d = run_all(start_cmd("n1", "run", 2, ("r0",)), start_cmd("n1", "run", 1, ("r0",)))
    assert kinds(d) == ["Launch", "Ignore"]
    assert "older than g2" in d.actions[1].reason  # type: ignore[union-attr]
    assert d.actions[1].refused == SUPERSEDED  # type: ignore[union-attr]
    d = run_all(stop_cmd("n1", "run", 3), start_cmd("n1", "run", 3, ("r0",)),
                start_cmd("n1", "run", 4, ("r0",)))
    assert kinds(d) == ["Ignore", "Launch"]
    assert "revoked" in d.actions[0].reason  # type: ignore[union-attr]
    assert d.actions[0].refused == SUPERSEDED  # type: ignore[union-attr]


def test_stop_terminates_that_generation_and_older_only() -> None:
    d = run_all(start_cmd("n1", "run", 1, ("a",)), start_cmd("n1", "other", 5, ("b",)))
    d = run_all(stop_cmd("n1", "run", 2), stop_cmd("n1", "other", 4), state=d.state)
    assert d.actions == (Terminate(WorkerKey("run", 1, "a"), "stop g2: test"),)
    assert d.state.revoked == {"run": 2, "other": 4}
    assert run_all(stop_cmd("n1", "run", 2), state=d.state).actions[0] == Ignore(
        "run/g2/n1/stop", "duplicate command id", REPLAYED)


def test_a_new_generation_fences_the_old_one_and_takes_its_slots() -> None:
    d = run_all(start_cmd("n1", "run", 1, ("a", "b", "c")), start_cmd("n1", "run", 2, ("a", "b")))
    assert kinds(d) == ["Launch"] * 3 + ["Terminate"] * 3 + ["Launch"] * 2
    assert all(a.reason == "fenced by generation 2" for a in d.actions if isinstance(a, Terminate))
    state = d.state
    for lid in "abc":
        state = worker_exited(state, WorkerKey("run", 1, lid))
    assert state.busy_slots == 2
    assert {a.key for a in shutdown(state)} == {WorkerKey("run", 2, "a"), WorkerKey("run", 2, "b")}


def test_a_group_that_does_not_fit_is_rejected_whole() -> None:
    late = NOW - CFG.slot_wait_ms
    d = run_all(start_cmd("n1", "a", 1, ("x", "y")), start_cmd("n1", "b", 1, ("p", "q"), at=late))
    assert kinds(d) == ["Launch", "Launch", "Reject", "Reject"]
    reject = d.actions[2]
    assert isinstance(reject, Reject) and reject.exit_code == REJECTED_EXIT_CODE == 125
    assert reject.reason == "needs 2 slots, 1 of 3 free"
    assert d.state.busy_slots == 2 and ("b", 1) in d.state.started


def test_a_group_waits_a_while_for_busy_slots() -> None:
    waiting = start_cmd("n1", "b", 1, ("p", "q", "r"))
    d = run_all(start_cmd("n1", "a", 1, ("x", "y")), stop_cmd("n1", "a", 1), waiting)
    assert kinds(d) == ["Launch", "Launch", "Terminate", "Terminate", "Defer"]
    assert "b/g1/n1/start" not in d.state.seen and ("b", 1) not in d.state.started
    state = worker_exited(d.state, WorkerKey("a", 1, "x"))
    assert kinds(decide(CFG, state, waiting, NOW + 1000)) == ["Defer"]
    assert kinds(decide(CFG, state, waiting, NOW + CFG.slot_wait_ms)) == ["Reject"] * 3
    state = worker_exited(state, WorkerKey("a", 1, "y"))
    assert kinds(decide(CFG, state, waiting, NOW + 1000)) == ["Launch"] * 3
    # More members than the node has slots: no point in waiting.
    assert kinds(run_all(start_cmd("n1", "b", 1, ("p", "q", "r", "s")))) == ["Reject"] * 4


def test_other_nodes_stale_starts_and_bad_intervals() -> None:
    assert kinds(run_all(start_cmd("n2", "run", 1, ("r0",)))) == ["Ignore"]
    stale = start_cmd("n1", "run", 1, ("r0",), at=NOW - CFG.max_start_age_ms - 1)
    d = run_all(stale)
    assert kinds(d) == ["Ignore"] and "stale" in d.actions[0].reason  # type: ignore[union-attr]
    bad = start_cmd("n1", "run", 2, ("r0",), env={"RUNLEDGER_HEARTBEAT_INTERVAL_S": "-1"})
    assert kinds(run_all(bad)) == ["Reject"]
    ok = start_cmd("n1", "run", 2, ("r0",), env={"RUNLEDGER_HEARTBEAT_INTERVAL_S": "0.25"})
    launch = run_all(ok).actions[0]
    assert isinstance(launch, Launch) and launch.worker_env.heartbeat_interval_s == 0.25


def test_lookahead_skips_starts_a_batch_already_superseded() -> None:
    batch: list[GroupStartCommanded | GroupStopCommanded] = [
        start_cmd("n1", "run", 1, ("r0",)), stop_cmd("n1", "run", 1),
        start_cmd("n1", "run", 2, ("r0",))]
    d = run_all(*batch, state=lookahead(CFG, AgentState(), batch))
    assert kinds(d) == ["Ignore", "Launch"]
    assert [a.key.generation for a in d.actions if isinstance(a, Launch)] == [2]


def test_remembered_ids_are_bounded() -> None:
    cfg = AgentConfig(node="n1", slots=1, bootstrap="k", seen_limit=3)
    state = AgentState()
    for gen in range(1, 6):
        state = decide(cfg, state, stop_cmd("n1", "run", gen), NOW).state
    assert state.seen == ("run/g3/n1/stop", "run/g4/n1/stop", "run/g5/n1/stop")


# --- names and paths confined (events.names) -----------------------------------------

ROOTED = replace(CFG, allowed_roots=("/data/ckpt", "s3://bucket/ckpt"), base_dir="/work/n1")


def reasons(d: Decision) -> list[str]:
    return [a.reason for a in d.actions if isinstance(a, Reject)]


@pytest.mark.parametrize(("run", "ids", "reason"), [
    ("../../etc", ("r0",), "bad_name: run id '../../etc'"),
    ("node/n1", ("r0",), "bad_name: run id 'node/n1'"),
    ("run", ("r0", "../r1"), "bad_name: logical id '../r1'"),
])
def test_a_forged_run_id_or_logical_id_launches_nothing(
    run: str, ids: tuple[str, ...], reason: str
) -> None:
    d = decide(ROOTED, AgentState(), start_cmd("n1", run, 1, ids), NOW)
    assert kinds(d) == ["Reject"] * len(ids)
    assert all(r == f"invalid start command: {reason} must be 1-128 letters, digits, '.', '_'"
               " or '-', starting with a letter or digit" for r in reasons(d))
    assert not d.state.running


LAUNCHED, SPEC_ERROR, UNREADABLE = "launched", "the spec's error", "unreadable"


@pytest.mark.parametrize(("env", "manifest", "outcome"), [
    ({CHECKPOINT_ROOT: "/data/ckpt"}, None, LAUNCHED),
    ({CHECKPOINT_ROOT: "s3://bucket/ckpt/team"}, None, LAUNCHED),
    ({CHECKPOINT_ROOT: "rel/ckpt"}, None, LAUNCHED),  # inside the work dir
    ({}, "/data/ckpt/run/g000001/step-0000000010/manifest.json", LAUNCHED),
    ({CHECKPOINT_ROOT: "/data/ckpt/../../etc"}, None, SPEC_ERROR),
    ({CHECKPOINT_ROOT: "/etc"}, None, SPEC_ERROR),
    ({CHECKPOINT_ROOT: "s3://other/ckpt"}, None, SPEC_ERROR),
    ({}, "/home/victim/manifest.json", SPEC_ERROR),
    ({RESUME_CANDIDATES: '[[10, "/tmp/x/manifest.json", "sha256:x"]]'}, None, SPEC_ERROR),
    ({RESUME_CANDIDATES: "not json"}, None, UNREADABLE),  # the command's fault, not the spec's
])
def test_checkpoint_paths_must_lie_inside_the_allowed_roots(
    env: dict[str, str], manifest: str | None, outcome: str
) -> None:
    cmd = replace(start_cmd("n1", "run", 1, ("r0",), env=env), resume_manifest=manifest)
    d = decide(ROOTED, AgentState(), cmd, NOW)
    assert kinds(d) == (["Launch"] if outcome == LAUNCHED else ["Reject"]), reasons(d)
    if outcome != LAUNCHED:
        assert reasons(d)[0].startswith("invalid start command: ")
        # A path the spec chose: the job's error (controller.policy: job:launch), not the node's.
        (reject,) = d.actions
        assert isinstance(reject, Reject)
        assert reject.launch_error.startswith("the agent on n1 refused the start: ") \
            == (outcome == SPEC_ERROR)


def test_a_root_outside_the_allowed_roots_names_field_value_roots_and_both_fixes() -> None:
    cmd = start_cmd("n1", "run", 1, ("r0", "r1"), env={CHECKPOINT_ROOT: "/elsewhere/ckpt"})
    d = decide(ROOTED, AgentState(), cmd, NOW)
    assert kinds(d) == ["Reject", "Reject"] and not d.state.running
    errors = {a.launch_error for a in d.actions if isinstance(a, Reject)}
    assert errors == {
        "the agent on n1 refused the start: path_outside_roots: checkpoint.root "
        "'/elsewhere/ckpt' is outside the allowed roots (/work/n1, /data/ckpt, "
        "s3://bucket/ckpt); set checkpoint.root under one of them, or start the agent on n1 "
        "with --allow-root /elsewhere/ckpt"}
    tiered = start_cmd("n1", "run", 2, ("r0",), env={
        CHECKPOINT_ROOT: "/data/ckpt", CHECKPOINT_TIERS: json.dumps(
            [["local", "/data/ckpt", "process", 2], ["far", "/mnt/far", "host", 4]])})
    (far,) = decide(ROOTED, AgentState(), tiered, NOW).actions
    assert isinstance(far, Reject)
    assert "checkpoint.tiers 'far' root '/mnt/far' is outside" in far.launch_error
    assert far.launch_error.endswith("--allow-root /mnt/far")


def test_a_forged_name_a_bad_rank_contract_or_no_slots_stays_a_plain_rejection() -> None:
    # Not the spec's doing (the controller makes names and ranks from a checked spec),
    # so no launch error: the controller keeps judging these as exit 125.
    forged = decide(ROOTED, AgentState(), start_cmd("n1", "../x", 1, ("r0",)), NOW)
    too_big = decide(ROOTED, AgentState(), start_cmd("n1", "run", 1, ("a", "b", "c", "d")), NOW)
    for d in (forged, too_big):
        assert kinds(d) and all(isinstance(a, Reject) and not a.launch_error
                                for a in d.actions)


def test_an_allow_list_refuses_an_env_that_makes_the_allowed_program_load_other_code(
) -> None:
    # Which file argv[0] is, the shell judges at launch (tests/agent/test_confine.py);
    # the command alone shows a spec reaching inside an allowed program.
    cmd = start_cmd("n1", "run", 1, ("r0",))
    allowed = replace(CFG, allowed_executables=("/usr/bin/python3.11",))
    assert kinds(decide(allowed, AgentState(), cmd, NOW)) == ["Launch"]
    for name in ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "BASH_ENV"):
        hooked = replace(cmd, env={**cmd.env, name: "/tmp/evil"})
        d = decide(allowed, AgentState(), hooked, NOW)
        assert kinds(d) == ["Reject"], name
        (refused,) = d.actions
        assert isinstance(refused, Reject)
        assert refused.launch_error == (
            f"the agent on n1 refused the start: not_allowed: env sets {name}, which would "
            "make the allowed program load code of the spec's choosing; drop it from the "
            "spec's env, or start the agent on n1 without --allow")
        # No list: the spec's env is the job's own business, as before.
        assert kinds(decide(CFG, AgentState(), hooked, NOW)) == ["Launch"]


def test_a_workdir_lies_in_the_agent_s_roots_or_allowed_workdirs() -> None:
    cmd = start_cmd("n1", "run", 1, ("r0",))
    confined = replace(ROOTED, allowed_workdirs=("/home/alice/code",))
    for inside in ("/work/n1/job", "/data/ckpt/x", "/home/alice/code", "/home/alice/code/a"):
        ok = decide(confined, AgentState(), replace(cmd, workdir=inside), NOW)
        assert kinds(ok) == ["Launch"], inside
    d = decide(confined, AgentState(), replace(cmd, workdir="/home/bob/code"), NOW)
    (refused,) = d.actions
    assert isinstance(refused, Reject) and refused.exit_code == 125
    assert refused.launch_error == (
        "the agent on n1 refused the start: path_outside_roots: code.workdir "
        "'/home/bob/code' is outside the allowed roots (/work/n1, /data/ckpt, "
        "s3://bucket/ckpt, /home/alice/code); set code.workdir under one of them, or start "
        "the agent on n1 with --allow-workdir /home/bob/code")
    # No workdir: the worker runs in the agent's own work dir, always allowed.
    assert kinds(decide(confined, AgentState(), cmd, NOW)) == ["Launch"]
