"""The preflight rules: each observation becomes rows that name what was checked, and the
verdict fails exactly when a row failed."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from controller.spec.runspec import load_spec
from events.model import PreflightCheck, node_key
from runledger.rehearse.preflight import (
    FAIL,
    PASS,
    SKIP,
    DataSeen,
    Need,
    NodeSeen,
    ObjectSeen,
    Seen,
    StorageSeen,
    Thresholds,
    agents_rows,
    data_rows,
    device_rows,
    failing,
    lines,
    need_of,
    plan,
    sample,
    software_rows,
    storage_rows,
    telemetry_rows,
    verdict,
)
from runledger.rehearse.preflightio import nodes_seen
from tests.events.builders import Ev

LIMITS = Thresholds()
TINY = Path(__file__).resolve().parents[3] / "examples" / "tiny.yaml"
GOOD_DATA = DataSeen("sha256:d", None, (ObjectSeen("file:///d/a", 10, 10, digest_ok=True),))


def fast(root: str = "/ckpt") -> StorageSeen:
    return StorageSeen(root, size=4_000_000, write_s=0.01, read_s=0.01, latency_s=0.001)


def seen(**kw: object) -> Seen:
    base: dict[str, object] = dict(
        nodes=(NodeSeen("n1", 2, "default"),), python="3.11.9", torch=None, storage=(fast(),),
        data=GOOD_DATA, missing_topics=(), topics=5, cuda_devices=0)
    return Seen(**{**base, **kw})  # type: ignore[arg-type]


def test_the_tiny_spec_needs_two_members_two_per_node() -> None:
    spec = load_spec(TINY, resolve_dataset=lambda ref: "sha256:" + "ab" * 32)
    assert need_of(spec) == Need(members=2, per_node=2, domain=None, elastic=False)


def test_everything_observed_good_passes_with_skips_that_say_why() -> None:
    rows = plan(Need(2, 2, None, False), seen(), LIMITS)
    assert verdict(rows) == PASS and failing(rows) == []
    skipped = {r.check: r.reason for r in rows if r.verdict == SKIP}
    assert set(skipped) == {"software", "telemetry.clock", "devices"}
    assert "AgentRegistered" in skipped["software"] and "no CUDA" in skipped["devices"]
    assert [r.check for r in rows if r.verdict == PASS] == [
        "agents", "storage.write", "storage.read", "storage.latency", "data.objects",
        "data.digests", "telemetry.topics"]
    assert all(r.check in line for r, line in zip(rows, lines(rows), strict=True))


def test_software_passes_on_one_version_and_fails_naming_each_otherwise() -> None:
    same = [NodeSeen("a", 1, "d", "3.11.9", "2.5.1"), NodeSeen("b", 1, "d", "3.11.9", "2.5.1"),
            NodeSeen("old", 1, "d")]
    rows = software_rows(same, "3.11.9", None)
    assert [(r.check, r.verdict, r.figure) for r in rows] == [
        ("software.python", PASS, 1), ("software.torch", PASS, 1)]
    assert "old" in rows[0].reason and "AgentRegistered v3" in rows[0].reason
    mixed = [*same[:2], NodeSeen("c", 1, "d", "3.12.1", "2.5.1")]
    rows = software_rows(mixed, "3.11.9", "2.5.1")
    assert [(r.verdict, r.figure) for r in rows] == [(FAIL, 2), (PASS, 1)]
    assert "3.11.9: a, b; 3.12.1: c" in rows[0].reason


def test_nodes_seen_are_the_live_ones_with_free_slots_and_their_registered_versions() -> None:
    ev = Ev(node_key("n1"), start=1_000_000, tick=1)
    events = [ev.agent_registered("n1", slots=4, domain="d", python_version="3.11.9",
                                  torch_version="-"),
              ev.agent_heartbeat("n1", slots=4, domain="d", busy_slots=3),
              Ev(node_key("n2"), start=1_000_000, tick=1).agent_registered("n2", slots=2)]
    assert nodes_seen(events, 1_000_010) == (NodeSeen("n1", 1, "d", "3.11.9", "-"),
                                             NodeSeen("n2", 2, "rack-1"))
    assert nodes_seen(events, 1_000_000 + 3_600_000) == ()  # no heartbeat for an hour


def test_a_read_only_root_fails_naming_the_root_and_the_error() -> None:
    ro = StorageSeen("/ro/ckpt", error="PermissionError: [Errno 13] Permission denied")
    rows = plan(Need(2, 2, None, False), seen(storage=(fast("/ok"), ro)), LIMITS)
    assert verdict(rows) == FAIL
    assert failing(rows) == ["storage.write /ro/ckpt"]
    [row] = [r for r in rows if r.verdict == FAIL]
    assert "/ro/ckpt" in row.reason and "Permission denied" in row.reason


def test_slow_storage_fails_against_its_thresholds() -> None:
    slow = StorageSeen("/slow", size=1_000_000, write_s=1.0, read_s=0.01, latency_s=5.0)
    rows = storage_rows(slow, LIMITS)
    assert [(r.check, r.verdict) for r in rows] == [
        ("storage.write", FAIL), ("storage.read", PASS), ("storage.latency", FAIL)]
    assert rows[0].figure == 1.0 and rows[0].threshold == LIMITS.write_mb_s
    assert rows[2].figure == 5.0 and rows[2].threshold == LIMITS.latency_s


def test_a_probe_too_fast_to_time_passes_at_a_finite_cap() -> None:
    rows = storage_rows(StorageSeen("/fast", size=10, write_s=0.0, read_s=0.0), LIMITS)
    assert [r.verdict for r in rows] == [PASS, PASS, PASS] and rows[0].figure == 1e12


def test_a_missing_object_fails_naming_it_and_a_bad_digest_fails_the_sample() -> None:
    data = DataSeen("sha256:d", None, (
        ObjectSeen("file:///d/a", 10, 10, digest_ok=True),
        ObjectSeen("file:///d/b", 10, None, error="FileNotFoundError: /d/b"),
        ObjectSeen("file:///d/c", 10, 12),
        ObjectSeen("file:///d/e", 10, 10, digest_ok=False)))
    rows = data_rows(data)
    assert failing(rows) == ["data.object file:///d/b", "data.object file:///d/c",
                             "data.objects sha256:d", "data.digests sha256:d"]
    assert "file:///d/b is missing" in rows[0].reason and "12 bytes" in rows[1].reason
    assert (rows[2].figure, rows[2].threshold) == (2, 4)
    assert "file:///d/e" in rows[3].reason


def test_an_unresolved_manifest_is_one_failing_row_with_the_catalog_error() -> None:
    rows = data_rows(DataSeen("corpus/latest", "unknown dataset alias 'corpus/latest'"))
    assert [(r.check, r.verdict) for r in rows] == [("data.manifest", FAIL)]
    assert "unknown dataset alias" in rows[0].reason


def test_missing_topics_fail_by_name() -> None:
    rows = telemetry_rows(["runledger.status"], 5)
    assert rows[0].verdict == FAIL and "runledger.status" in rows[0].reason
    assert (rows[0].figure, rows[0].threshold) == (4, 5) and rows[1].verdict == SKIP


def test_devices_are_skipped_with_or_without_cuda() -> None:
    assert device_rows(0)[0].verdict == SKIP and "no CUDA" in device_rows(0)[0].reason
    assert device_rows(8)[0].figure == 8 and device_rows(8)[0].verdict == SKIP


def test_agents_count_per_node_caps_and_the_domain() -> None:
    nodes = [NodeSeen("a", 8, "r1"), NodeSeen("b", 1, "r2"), NodeSeen("c", 3, "r1")]
    [ok] = agents_rows(Need(4, 2, "r1", False), nodes)
    assert (ok.verdict, ok.figure, ok.threshold) == (PASS, 4, 4)
    [short] = agents_rows(Need(5, 2, "r1", True), nodes)
    assert short.verdict == FAIL and "a:8" in short.reason and "elastic min" in short.reason
    [none] = agents_rows(Need(1, 1, None, False), [])
    assert none.verdict == FAIL and "none" in none.reason


nodes_st = st.lists(st.builds(NodeSeen, name=st.sampled_from("abcdef"),
                              free=st.integers(0, 8), domain=st.sampled_from(["r1", "r2"])),
                    max_size=6)


@given(nodes_st, st.integers(1, 20), st.integers(1, 8), st.sampled_from([None, "r1"]))
def test_agents_pass_exactly_when_capped_free_slots_cover_the_members(
        nodes: list[NodeSeen], members: int, per_node: int, domain: str | None) -> None:
    [row] = agents_rows(Need(members, per_node, domain, False), nodes)
    capacity = sum(min(n.free, per_node) for n in nodes if domain in (None, n.domain))
    assert row.figure == capacity and row.threshold == members
    assert (row.verdict == PASS) == (capacity >= members)


rows_st = st.lists(st.builds(PreflightCheck, check=st.sampled_from(["agents", "data.object"]),
                             subject=st.text(max_size=5),
                             verdict=st.sampled_from([PASS, FAIL, SKIP]), figure=st.none(),
                             threshold=st.none(), unit=st.just(""), reason=st.just("r")),
                   max_size=8)


@given(rows_st)
def test_the_verdict_fails_exactly_when_a_row_failed_and_names_each(
        rows: list[PreflightCheck]) -> None:
    bad = [r for r in rows if r.verdict == FAIL]
    assert verdict(rows) == (FAIL if bad else PASS)
    assert failing(rows) == [f"{r.check} {r.subject}" for r in bad]


@given(st.integers(0, 200), st.integers(0, 10))
def test_the_digest_sample_is_distinct_in_range_and_keeps_the_ends(count: int, n: int) -> None:
    picked = sample(count, n)
    assert len(picked) == len(set(picked)) == min(count, n)
    assert all(0 <= i < count for i in picked) and picked == sorted(picked)
    if count and n >= 2:
        assert picked[0] == 0 and picked[-1] == count - 1
