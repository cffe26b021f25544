"""Run specs: the example loads, digests ignore form, every bad field is named, and a
dataset alias is resolved before validation."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from controller.errors import ControllerError, SpecError
from controller.policy import RETRY_CLASSES
from controller.spec.runspec import (
    AutoCheckpoint,
    RetryPolicy,
    RunSpec,
    load_spec,
    parse_spec,
    parse_spec_json,
    run_id_for,
    young_interval_s,
)
from dataplane.errors import CatalogError
from events.model import FAILURE_CLASSES

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "run.yaml"
DATASET = "sha256:" + "ab" * 32
MINIMAL: dict[str, Any] = {
    "name": "tiny",
    "code_version": "0123456789abcdef0123456789abcdef01234567",
    "command": ["python", "-m", "train"],
    "model": {"layers": 2, "optimizer": {"name": "adamw", "lr": 0.001}},
    "dataset": DATASET,
    "topology": {"replicas": 2, "slots_per_node": 2},
    "resume": "exact",
    "rpo_s": 600,
    "rto_s": 300,
    "cancel_authority": ["alice", "oncall"],
    "checkpoint": {"policy": "fixed", "interval_steps": 100},
}


def spec_of(doc: dict[str, Any], **yaml_options: Any) -> RunSpec:
    return parse_spec(yaml.safe_dump(doc, **yaml_options), "test.yaml")


def problems_of(doc: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(yaml.safe_dump(doc), "test.yaml")
    assert isinstance(info.value, ControllerError)
    return info.value.problems


def with_(path: str, value: Any, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of ``doc`` (MINIMAL) with the dotted ``path`` set to ``value``."""
    out = copy.deepcopy(MINIMAL if doc is None else doc)
    *parents, leaf = path.split(".")
    node = out
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return out


def test_the_annotated_example_loads() -> None:
    spec = load_spec(EXAMPLE)
    assert spec.world_size == spec.topology.replicas == 4
    assert spec.dataset.startswith("sha256:") and spec.model_digest.startswith("sha256:")
    assert spec.retry_for("worker_crash").attempts == 5
    # A class entry names what differs; the rest comes from the `default` entry.
    assert spec.retry_for("non_finite") == RetryPolicy(attempts=0, escalate_after=1)
    assert set(spec.retry) == set(RETRY_CLASSES) == set(FAILURE_CLASSES) - {"job"}
    assert isinstance(spec.checkpoint, AutoCheckpoint)
    assert spec.checkpoint.interval_s() == pytest.approx(young_interval_s(20.0, 21600.0))


def test_canonical_json_round_trips_through_the_log_form() -> None:
    spec = load_spec(EXAMPLE)
    again = parse_spec_json(spec.canonical_json())
    assert again == spec and again.digest() == spec.digest()
    assert " " not in spec.canonical_json().split('"command"')[0]  # no whitespace added


def test_the_digest_of_a_known_spec_is_pinned() -> None:
    # Recorded in logs (RunSubmitted.spec_digest) and in run ids: the canonical form
    # of a spec must never change. Edit MINIMAL and these values change with it.
    spec = spec_of(MINIMAL)
    assert spec.digest() == (
        "sha256:cacb3e124cb5dfeb4c7ecf499835bf5b3effa250951e1192c8f178d835fdeb36")
    assert spec.model_digest == (
        "sha256:d587695d577184e4026e7bf4352d7cd892de37b021736e5459b375c1d9f14b1c")
    assert run_id_for(spec, "alice", "sub-1") == "tiny-7c8deb9f56"


def test_digest_ignores_key_order_formatting_and_spelled_out_defaults() -> None:
    base = spec_of(MINIMAL)
    reordered = dict(reversed(list(copy.deepcopy(MINIMAL).items())))
    reordered["model"] = dict(reversed(list(reordered["model"].items())))
    explicit = copy.deepcopy(MINIMAL) | {
        "image": None, "env": {}, "membership": {"kind": "fixed"}, "budget": {},
        "retry": {"hang": {"attempts": 3}}, "rpo_s": 600.0,
        "heartbeat": {"interval_s": 1.0, "timeout_s": 10.0, "stall_timeout_s": 60.0},
        "cancel_authority": ["oncall", "alice", "alice"],
        "topology": {"replicas": 2, "slots_per_node": 2, "ranks_per_replica": 1},
        "code_version": MINIMAL["code_version"].upper(),
    }
    variants = [
        spec_of(reordered, sort_keys=False),
        spec_of(MINIMAL, default_flow_style=True),
        spec_of(explicit),
        parse_spec("# a comment\n" + yaml.safe_dump(MINIMAL, indent=4), "x"),
    ]
    assert {v.digest() for v in variants} == {base.digest()}
    assert {v.model_digest for v in variants} == {base.model_digest}


def test_a_change_of_meaning_changes_the_digest() -> None:
    base = spec_of(MINIMAL)
    assert spec_of(with_("topology.replicas", 3)).digest() != base.digest()
    changed = spec_of(with_("model.optimizer", {"name": "adamw", "lr": 0.002}))
    assert changed.model_digest != base.model_digest
    assert changed.digest() != base.digest()


def test_a_given_model_digest_must_match() -> None:
    spec = spec_of(MINIMAL)
    assert spec_of(with_("model_digest", spec.model_digest)) == spec
    assert any(p.startswith("model_digest: does not match") for p in
               problems_of(with_("model_digest", "sha256:" + "0" * 64)))


@pytest.mark.parametrize(("path", "value", "field"), [
    ("name", "bad name!", "name"),
    ("code_version", "main", "code_version"),
    ("command", [], "command"),
    ("command", [""], "command"),
    ("image", "", "image"),
    ("env", {"RANK": "0"}, "env.RANK (the key)"),
    ("env", {"OMP_NUM_THREADS": 4}, "env.OMP_NUM_THREADS"),
    ("model", {"when": "2024-01-01T00:00:00"}, None),  # a string is fine: control case
    ("dataset", "sha256:abc", "dataset"),
    ("topology.replicas", 0, "topology.replicas"),
    ("topology.slots_per_node", True, "topology.slots_per_node"),
    ("topology.racks", 2, "topology.racks"),
    ("membership", {"kind": "sometimes"}, "membership"),
    ("membership", {"kind": "elastic", "min": 1}, "membership.max"),
    ("resume", "approximately", "resume"),
    ("rpo_s", 0, "rpo_s"),
    ("rto_s", "1e-3", "rto_s"),
    ("budget.max_gpu_hours", -1.0, "budget.max_gpu_hours"),
    ("retry.bogus", {}, "retry.bogus (the key)"),
    ("retry.hang", {"backoff_base_s": 10.0, "backoff_cap_s": 1.0}, "retry.hang"),
    ("retry.hang", {"attempts": -1}, "retry.hang.attempts"),
    ("heartbeat", {"interval_s": 5.0, "timeout_s": 2.0}, "heartbeat"),
    ("heartbeat", {"timeout_s": 10.0, "stall_timeout_s": 5.0}, "heartbeat"),
    ("cancel_authority", [], "cancel_authority"),
    ("checkpoint", {"policy": "fixed"}, "checkpoint.interval_steps"),
    ("checkpoint", {"policy": "auto", "mtbf_prior_s": "a day"}, "checkpoint.mtbf_prior_s"),
    ("colour", "blue", "colour"),
])
def test_each_invalid_field_is_named(path: str, value: Any, field: str | None) -> None:
    doc = with_(path, value)
    if field is None:
        spec_of(doc)
        return
    problems = problems_of(doc)
    assert [p.split(": ", 1)[0] for p in problems] == [field], problems


def test_every_bad_field_is_named_at_once() -> None:
    doc = copy.deepcopy(MINIMAL)
    del doc["resume"]
    doc.update(name="", dataset="corpus/latest", rpo_s=-5, extra=1,
               env={"RUNLEDGER_RUN_ID": "x", "1BAD": "y"})
    doc["topology"] = {"replicas": 0, "slots_per_node": 0}
    doc["heartbeat"] = {"interval_s": 2.0, "timeout_s": 1.0}
    fields = {p.split(": ", 1)[0] for p in problems_of(doc)}
    assert fields == {
        "name", "dataset", "rpo_s", "extra", "resume", "topology.replicas",
        "topology.slots_per_node", "heartbeat", "env.RUNLEDGER_RUN_ID (the key)",
        "env.1BAD (the key)",
    }
    assert {p.split(": ", 1)[0] for p in problems_of({})} >= {
        "name", "code_version", "command", "model", "dataset", "topology", "resume", "rpo_s",
        "rto_s", "cancel_authority", "checkpoint",
    }


def test_only_the_fault_hooks_pass_the_reserved_env_prefix() -> None:
    # A pilot or drill names its fault in its own spec (worker/faults.py reads them).
    spec = spec_of(with_("env", {"RUNLEDGER_FAULT": "step@3:gen=1",
                                 "RUNLEDGER_STORAGE_DELAY_S": "0.5"}))
    assert spec.env["RUNLEDGER_FAULT"] == "step@3:gen=1"
    assert problems_of(with_("env", {"RUNLEDGER_FAULTS": "x"}))[0].startswith(
        "env.RUNLEDGER_FAULTS (the key)")


def test_a_dataset_alias_is_refused_with_the_reason() -> None:
    [problem] = problems_of(with_("dataset", "corpus/latest"))
    assert problem.startswith("dataset: 'corpus/latest'")
    assert "aliases must be resolved first" in problem


@pytest.mark.parametrize(("replicas", "low", "high", "ok"), [
    (2, 1, 4, True), (1, 1, 1, True), (4, 2, 4, True), (1, 2, 4, False), (5, 2, 4, False),
    (3, 4, 2, False),
])
def test_the_elastic_range_must_hold_the_replicas(
    replicas: int, low: int, high: int, ok: bool
) -> None:
    doc = with_("membership", {"kind": "elastic", "min": low, "max": high},
                with_("topology.replicas", replicas))
    if ok:
        assert spec_of(doc).topology.replicas == replicas
    else:
        assert [p.split(": ")[0] for p in problems_of(doc)] == ["membership"]


def test_yaml_level_mistakes_are_spec_errors() -> None:
    for text, expected in [
        ("name: a\nname: b\n", "given twice"),
        ("- a list\n", "must be a mapping"),
        ("", "empty document"),
        ("name: [\n", "not valid YAML: line"),
    ]:
        with pytest.raises(SpecError, match=expected):
            parse_spec(text, "t.yaml")
    unquoted_date = yaml.safe_dump(MINIMAL).replace("layers: 2", "layers: 2\n  when: 2024-01-01")
    with pytest.raises(SpecError, match="model: must be plain JSON data"):
        parse_spec(unquoted_date, "t.yaml")
    with pytest.raises(SpecError, match="cannot read"):
        load_spec("/nonexistent/run.yaml")


def test_backoff_is_bounded_exponential() -> None:
    policy = RetryPolicy(backoff_base_s=0.5, backoff_cap_s=5.0)
    assert [policy.backoff_ms(n) for n in range(1, 7)] == [500, 1000, 2000, 4000, 5000, 5000]
    assert policy.backoff_ms(10_000) == 5000
    with pytest.raises(ValueError):
        policy.backoff_ms(0)


@given(base=st.floats(0, 100), extra=st.floats(0, 1000), attempt=st.integers(1, 200))
def test_backoff_never_shrinks_and_never_passes_the_cap(
    base: float, extra: float, attempt: int
) -> None:
    policy = RetryPolicy(backoff_base_s=base, backoff_cap_s=base + extra)
    assert policy.backoff_ms(attempt) <= policy.backoff_ms(attempt + 1)
    assert policy.backoff_ms(attempt) <= round((base + extra) * 1000)


def test_escalation_by_class_attempts_or_same_signature() -> None:
    policy = RetryPolicy(attempts=3, escalate_after=2)
    assert not policy.should_escalate(class_failures=1, signature_failures=1)
    assert policy.should_escalate(class_failures=2, signature_failures=2)
    assert policy.should_escalate(class_failures=4, signature_failures=1)
    spec = spec_of(MINIMAL)
    assert spec.retry_for("hang") == RetryPolicy()
    with pytest.raises(ValueError):
        spec.retry_for("gremlins")


def test_cancel_authority_includes_the_submitter() -> None:
    spec = spec_of(MINIMAL)
    assert spec.may_cancel("oncall", submitter="bob")
    assert spec.may_cancel("bob", submitter="bob")
    assert not spec.may_cancel("mallory", submitter="bob")


def test_run_ids_are_deterministic_per_submission() -> None:
    spec = spec_of(MINIMAL)
    first = run_id_for(spec, "alice", "sub-1")
    assert first == run_id_for(spec_of(MINIMAL), "alice", "sub-1")
    assert first.startswith("tiny-") and len(first) == len("tiny-") + 10
    assert len({first, run_id_for(spec, "bob", "sub-1"), run_id_for(spec, "alice", "sub-2")}) == 3


@given(st.permutations(sorted(MINIMAL)))
def test_top_level_key_order_never_changes_the_digest(order: list[str]) -> None:
    doc = {k: MINIMAL[k] for k in order}
    assert spec_of(doc, sort_keys=False).digest() == spec_of(MINIMAL).digest()


# --- a dataset alias resolved before validation ------------------------------------

ALIAS = "corpus/latest"


def pins(known: dict[str, str], asked: list[str] | None = None) -> Callable[[str], str]:
    """A resolver over ``known``, failing as the catalog does; records what it was asked."""

    def resolve(ref: str) -> str:
        if asked is not None:
            asked.append(ref)
        if ref not in known:
            raise CatalogError(f"unknown dataset alias {ref!r}; known aliases: corpus/latest")
        return known[ref]

    return resolve


_ALIASES = st.from_regex(r"[a-z][a-z0-9_-]{0,12}/[a-z0-9_-]{1,12}", fullmatch=True)


@given(alias=_ALIASES, quote=st.sampled_from(["", "'", '"']),
       digest=st.text("0123456789abcdef", min_size=64, max_size=64))
def test_a_resolved_alias_gives_the_digest_of_the_spec_naming_the_id(
    alias: str, quote: str, digest: str
) -> None:
    manifest_id = f"sha256:{digest}"
    text = yaml.safe_dump(with_("dataset", "PLACEHOLDER")).replace(
        "PLACEHOLDER", f"{quote}{alias}{quote}")
    resolved = parse_spec(text, "test.yaml", resolve_dataset=pins({alias: manifest_id}))
    assert resolved.dataset == manifest_id
    assert resolved.digest() == spec_of(with_("dataset", manifest_id)).digest()
    assert resolved.canonical_json() == spec_of(with_("dataset", manifest_id)).canonical_json()


def test_an_unresolved_alias_is_named_with_the_other_problems() -> None:
    text = yaml.safe_dump(with_("rpo_s", -1, with_("dataset", "corpus/old")))
    with pytest.raises(SpecError) as info:
        parse_spec(text, "test.yaml", resolve_dataset=pins({ALIAS: DATASET}))
    [dataset] = [p for p in info.value.problems if p.startswith("dataset:")]
    assert "aliases must be resolved first" in dataset
    assert dataset.endswith("; unknown dataset alias 'corpus/old'; known aliases: corpus/latest")
    assert len(info.value.problems) == 2 and any(p.startswith("rpo_s:") for p in
                                                 info.value.problems)


def test_an_unresolved_alias_alone_is_the_catalog_error() -> None:
    text = yaml.safe_dump(with_("dataset", "corpus/old"))
    with pytest.raises(CatalogError, match="unknown dataset alias 'corpus/old'"):
        parse_spec(text, "test.yaml", resolve_dataset=pins({ALIAS: DATASET}))


def test_an_id_the_catalog_refuses_is_its_error_even_beside_other_problems() -> None:
    text = yaml.safe_dump(with_("rpo_s", -1))  # names DATASET, a well-formed id
    with pytest.raises(CatalogError):
        parse_spec(text, "test.yaml", resolve_dataset=pins({}))


def test_only_a_textual_dataset_is_resolved(tmp_path: Path) -> None:
    asked: list[str] = []
    missing = {k: v for k, v in MINIMAL.items() if k != "dataset"}
    for doc in (missing, with_("dataset", 5)):
        with pytest.raises(SpecError) as info:
            parse_spec(yaml.safe_dump(doc), "test.yaml", resolve_dataset=pins({}, asked))
        assert any(p.startswith("dataset:") for p in info.value.problems)
    assert asked == []
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(with_("dataset", ALIAS)))
    assert load_spec(path, resolve_dataset=pins({ALIAS: DATASET}, asked)).dataset == DATASET
    assert asked == [ALIAS]


def test_without_a_resolver_an_alias_is_refused() -> None:
    [problem] = problems_of(with_("dataset", ALIAS))
    assert problem.startswith("dataset: 'corpus/latest' is not a resolved dataset manifest id")


# --- code.workdir ------------------------------------------------------------------------


def test_workdir_defaults_to_the_spec_file_s_directory_and_enters_the_digest(
        tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    plain = tmp_path / "jobs" / "a.yaml"
    plain.write_text(yaml.safe_dump(MINIMAL))
    spec = load_spec(plain)
    assert spec.workdir == str(tmp_path / "jobs")
    assert json.loads(spec.canonical_json())["code"] == {"workdir": str(tmp_path / "jobs")}
    assert parse_spec_json(spec.canonical_json()) == spec
    relative = tmp_path / "jobs" / "b.yaml"
    relative.write_text(yaml.safe_dump({**MINIMAL, "code": {"workdir": "../src"}}))
    assert load_spec(relative).workdir == str(tmp_path / "src")
    assert load_spec(relative).digest() != spec.digest()  # where the code is, is the run's


def test_a_spec_without_a_file_keeps_the_digest_it_always_had() -> None:
    spec = spec_of(MINIMAL)
    assert spec.code is None and spec.workdir == ""
    assert "code" not in json.loads(spec.canonical_json())
    given = spec_of({**MINIMAL, "code": {"workdir": "/srv/job/"}})
    assert given.workdir == "/srv/job"


@pytest.mark.parametrize(("workdir", "problem"), [
    ("src", "is relative and there is no spec file"),
    ("/a/../b", "'..' segment"),
    (7, "code.workdir"),
])
def test_a_bad_workdir_is_named(workdir: object, problem: str) -> None:
    with pytest.raises(SpecError, match=problem) as err:
        spec_of({**MINIMAL, "code": {"workdir": workdir}})
    assert any(p.startswith("code.workdir") for p in err.value.problems)


def test_job_is_not_a_retry_class() -> None:
    with pytest.raises(SpecError, match=r"retry\.job.*never retried"):
        spec_of({**MINIMAL, "retry": {"job": {"attempts": 3}}})
