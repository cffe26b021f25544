"""Run specs: the YAML document that binds everything a run depends on.

A spec is validated completely before anything reaches the log: pydantic
models with ``extra="forbid"`` (a misspelt field is an error, not a silently
ignored default), strict numbers (YAML's ``yes`` is not the integer 1), and one
:class:`~controller.errors.SpecError` naming every bad field at once.

The spec's identity is the digest of its canonical JSON (both defined in
:mod:`dataplane.documents`): sorted keys, no whitespace, every default filled
in, so two YAML files that mean the same run (key order, comments, omitted
defaults, principals in another order) get the same ``spec_digest``. That JSON
is what ``RunSubmitted.spec_json`` carries, and :func:`parse_spec_json` reads
it back. Nothing here reads a clock or makes ids
up; the CLI supplies the submission id and the time at the edge.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, Strict, ValidationError, ValidationInfo, field_validator

from controller.errors import SpecError
from controller.gates import Gates
from controller.policy import RETRY_CLASSES
from controller.spec.bounds import MAX_WORLD_SIZE
from controller.spec.parts import (
    AlertPolicy,
    AutoCheckpoint,
    Budget,
    CheckpointPolicy,
    Code,
    Duration,
    ElasticMembership,
    FixedCheckpoint,
    FixedMembership,
    HeartbeatPolicy,
    Membership,
    Part,
    ResumeContract,
    RetryPolicy,
    Text,
    Topology,
    young_interval_s,
)
from controller.spec.sdc import SdcPolicy
from controller.spec.text import (
    MAX_DEPTH,
    TOO_DEEP,
    check_size,
    depth,
    load_yaml,
    read_spec_text,
)
from dataplane.documents import canonical_json, sha256_digest
from dataplane.errors import CatalogError
from events.names import alias_problem, name_problem

__all__ = [
    "AlertPolicy", "AutoCheckpoint", "Budget", "Code", "ElasticMembership", "FixedCheckpoint",
    "FixedMembership", "HeartbeatPolicy", "RetryPolicy", "RunSpec", "SpecError", "Topology",
    "load_spec", "parse_spec", "parse_spec_json", "run_id_for", "young_interval_s",
]

_GIT_SHA = re.compile(r"[0-9a-f]{40}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# Names become the prefix of run ids (``<name>-<10 hex>``), which key Kafka records
# and name output paths: events.names's rule, short enough to leave room for the suffix.
NAME_MAX = 63
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The agent sets these for every worker (rendezvous, rank, fencing identity);
# a spec that overrode them would put a worker in the wrong group or generation.
RESERVED_ENV = frozenset(
    {"RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
     "MASTER_PORT"}
)
RESERVED_ENV_PREFIX = "RUNLEDGER_"
# The worker's fault-injection hooks (worker/faults.py: ENV, DELAY_ENV), which no
# agent sets: a pilot or drill spec names its fault here, so it reaches only its own run.
# The drill's two switches (worker/faults.py NO_SIGTERM_ENV, IGNORE_FENCE_ENV) likewise.
FAULT_HOOKS = frozenset({"RUNLEDGER_FAULT", "RUNLEDGER_STORAGE_DELAY_S",
                         "RUNLEDGER_FAULT_NO_SIGTERM", "RUNLEDGER_IGNORE_FENCE"})


def _env_name(key: str) -> str:
    if not _ENV_NAME.fullmatch(key):
        raise ValueError("not an environment variable name")
    if key in FAULT_HOOKS:
        return key
    if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIX):
        raise ValueError("set by the agent for every worker; a spec may not override it")
    return key


def _retry_key(key: str) -> str:
    if key != "default" and key not in RETRY_CLASSES:
        raise ValueError(f"unknown failure class; known: default, {', '.join(RETRY_CLASSES)}"
                         " (a job's own error is never retried)")
    return key


# Checked per key, so every bad key is named even when a value is bad too.
EnvName = Annotated[str, Strict(), AfterValidator(_env_name)]
RetryKey = Annotated[str, Strict(), AfterValidator(_retry_key)]

class RunSpec(Part):
    name: Annotated[str, Strict()]
    code_version: Annotated[str, Strict()]
    command: Annotated[list[Annotated[str, Strict()]], Field(min_length=1)]
    # Absent in specs older than code.workdir: their workers run in the agent's
    # work dir, and their canonical JSON (so their digest) is what it was.
    code: Code | None = None
    image: Text | None = None
    env: dict[EnvName, Annotated[str, Strict()]] = Field(default_factory=dict)
    model: dict[str, Any]
    # Filled in from ``model``; a given value must match (so spec_json round-trips).
    model_digest: str = Field(default="", validate_default=True)
    dataset: Annotated[str, Strict()]
    topology: Topology
    membership: Membership = FixedMembership(kind="fixed")
    resume: ResumeContract
    rpo_s: Duration
    rto_s: Duration
    budget: Budget = Budget()
    retry: dict[RetryKey, RetryPolicy] = Field(default_factory=dict, validate_default=True)
    heartbeat: HeartbeatPolicy = HeartbeatPolicy()
    # The submitter may always cancel too; that is decided from RunSubmitted.principal
    # (see may_cancel) rather than written in here, so the digest does not depend on who submits.
    cancel_authority: Annotated[list[Text], Field(min_length=1)]
    checkpoint: CheckpointPolicy
    # Evidence required before admission (controller.gates); None: admitted on slots alone.
    gates: Gates | None = None
    sdc: SdcPolicy | None = None  # silent-data-corruption detectors (controller.spec.sdc)
    # Last, so the heartbeat it reads its default stall warning from is validated first.
    alerts: AlertPolicy = Field(default_factory=AlertPolicy, validate_default=True)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        problem = name_problem(v, "name", NAME_MAX)
        if problem is not None:
            raise ValueError(problem)
        return v

    @field_validator("code_version")
    @classmethod
    def _code_version(cls, v: str) -> str:
        v = v.lower()
        if not (_GIT_SHA.fullmatch(v) or _DIGEST.fullmatch(v)):
            raise ValueError(
                "must be a git commit sha (40 hex) or sha256:<64 hex> digest of the entrypoint"
            )
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if not v[0]:
            raise ValueError("argv[0] (the program) must be non-empty")
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, v: dict[str, Any]) -> dict[str, Any]:
        try:
            text = canonical_json(v)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"must be plain JSON data (no dates, NaN, infinity): {exc}") from None
        # Normalised to what spec_json will carry, so a spec and its log copy are equal.
        normal: dict[str, Any] = json.loads(text)
        return normal

    @field_validator("model_digest")
    @classmethod
    def _model_digest(cls, v: str, info: ValidationInfo) -> str:
        model = info.data.get("model")
        if model is None:  # ``model`` itself is invalid and already reported
            return v
        actual = sha256_digest(canonical_json(model))
        if v and v != actual:
            raise ValueError(f"does not match the model config (its digest is {actual})")
        return actual

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, v: str) -> str:
        if not _DIGEST.fullmatch(v.lower()):
            raise ValueError(
                f"{v!r} is not a resolved dataset manifest id; aliases must be resolved first"
                " (give the manifest id, sha256:<64 hex>)"
            )
        return v.lower()

    @field_validator("membership")
    @classmethod
    def _membership(cls, v: FixedMembership | ElasticMembership,
                    info: ValidationInfo) -> FixedMembership | ElasticMembership:
        topology = info.data.get("topology")
        if not isinstance(v, ElasticMembership) or topology is None:
            return v
        if not v.min <= topology.replicas <= v.max:
            raise ValueError(
                f"topology.replicas {topology.replicas} is outside the elastic range"
                f" {v.min}..{v.max}"
            )
        if (topology.replicas - v.min) % v.step:
            raise ValueError(f"topology.replicas {topology.replicas} is not an allowed size"
                             f" (min {v.min} plus a multiple of step {v.step})")
        # The slots that can ever exist for one run: MAX_WORLD_SIZE ranks. A max
        # past it could never be placed; refused here rather than queued forever.
        if v.max * topology.ranks_per_replica > MAX_WORLD_SIZE:
            raise ValueError(
                f"max {v.max} replicas x ranks_per_replica {topology.ranks_per_replica} ="
                f" {v.max * topology.ranks_per_replica} ranks, over the limit of"
                f" {MAX_WORLD_SIZE}: lower membership.max")
        return v

    @field_validator("retry", mode="before")
    @classmethod
    def _retry_layered(cls, v: Any) -> Any:
        # A class entry names only what differs: its other fields come from the
        # ``default`` entry (then the built-in defaults), not straight from the latter.
        if not isinstance(v, dict) or not isinstance(v.get("default"), dict):
            return v
        base = v["default"]
        return {k: {**base, **e} if isinstance(e, dict) else e for k, e in v.items()}

    @field_validator("retry")
    @classmethod
    def _retry(cls, v: dict[str, RetryPolicy]) -> dict[str, RetryPolicy]:
        # Every class filled in, so the recorded spec states the whole policy and
        # spelling a default out does not change the digest.
        default = v.get("default", RetryPolicy())
        return {c: v.get(c, default) for c in RETRY_CLASSES}

    @field_validator("cancel_authority")
    @classmethod
    def _cancel_authority(cls, v: list[str]) -> list[str]:
        return sorted(set(v))  # a set of principals: order and repeats mean nothing

    @field_validator("alerts")
    @classmethod
    def _alerts(cls, v: AlertPolicy, info: ValidationInfo) -> AlertPolicy:
        heartbeat = info.data.get("heartbeat")
        if heartbeat is None:  # invalid and already reported
            return v
        stall_s = heartbeat.stall_timeout_s
        if v.progress_stall_s is None:
            # Filled in, so writing the default out does not change the digest.
            return v.model_copy(update={"progress_stall_s": stall_s / 2})
        if v.progress_stall_s >= stall_s:
            raise ValueError(
                f"progress_stall_s {v.progress_stall_s} must be below heartbeat.stall_timeout_s"
                f" {stall_s}: at the stall timeout the run has already failed as hung")
        return v

    @property
    def world_size(self) -> int:
        return self.topology.world_size

    def retry_for(self, failure_class: str) -> RetryPolicy:
        if failure_class not in self.retry:
            raise ValueError(f"unknown failure class {failure_class!r}")
        return self.retry[failure_class]

    def may_cancel(self, principal: str, submitter: str) -> bool:
        return principal == submitter or principal in self.cancel_authority

    def canonical_json(self) -> str:
        data = self.model_dump(mode="json")
        if data["code"] is None:
            del data["code"]  # so a spec without one keeps the digest it always had
        for key in ("gates", "sdc"):  # likewise for specs before gates and sdc
            if data[key] is None:
                del data[key]
        for key, unset in (("actions", {}), ("escalate_to", None)):  # and before alert actions
            if data["alerts"].get(key) == unset:
                del data["alerts"][key]
        ckpt = data["checkpoint"]
        for key, unset in (("tiers", None), ("rpo", {})):  # likewise for specs before tiers
            if ckpt.get(key) == unset:
                del ckpt[key]
        return canonical_json(data)

    @property
    def workdir(self) -> str:
        """The workers' directory; empty: the agent's work dir (specs before code.workdir)."""
        return self.code.workdir if self.code is not None else ""

    def digest(self) -> str:
        return sha256_digest(self.canonical_json())


def run_id_for(spec: RunSpec, principal: str, submission_id: str) -> str:
    """``<name>-<10 hex>``: the same submission always gets the same run id."""
    material = canonical_json([spec.digest(), principal, submission_id])
    return f"{spec.name}-{hashlib.sha256(material.encode()).hexdigest()[:10]}"


# Turns the ``dataset`` a spec names (an alias such as corpus/latest, or a
# manifest id) into the manifest id the run records; raises CatalogError when
# the catalog cannot. The CLI supplies one backed by the dataset catalog.
DatasetResolver = Callable[[str], str]


def load_spec(path: str | Path, *, resolve_dataset: DatasetResolver | None = None) -> RunSpec:
    """A spec from its file; ``code.workdir`` defaults to the file's directory."""
    return parse_spec(read_spec_text(path), str(path), resolve_dataset=resolve_dataset,
                      base_dir=Path(path).resolve().parent)


def parse_spec(text: str, source: str, *, resolve_dataset: DatasetResolver | None = None,
               base_dir: Path | None = None) -> RunSpec:
    """A spec from YAML text; ``source`` names it in error messages.

    With ``resolve_dataset``, a textual ``dataset`` is replaced by what it
    returns before validation, so the spec (and its digest) holds the manifest id.
    With ``base_dir`` (the spec file's directory, absolute), ``code.workdir``
    defaults to it and a relative one is resolved against it.
    """
    data = load_yaml(text, source)  # bounded size, depth and aliases; no object tags
    if not isinstance(data, dict):
        got = "an empty document" if data is None else type(data).__name__
        raise SpecError(source, [f"(spec): must be a mapping of fields, got {got}"])
    if resolve_dataset is not None:
        data = _resolved(data, source, resolve_dataset)
    if base_dir is not None:
        data = _with_workdir(data, base_dir)
    spec = _validate(lambda: RunSpec.model_validate(data), source)
    # Defaults filled in and aliases expanded, the recorded form may outgrow the text.
    check_size(spec.canonical_json(), source, " as canonical JSON")
    return spec


def _with_workdir(data: dict[Any, Any], base_dir: Path) -> dict[Any, Any]:
    """``data`` with ``code.workdir`` made absolute against ``base_dir`` (its default)."""
    code = data.get("code", {})
    if code is None:
        code = {}
    if not isinstance(code, dict):
        return data  # not a mapping: validation names it
    workdir = code.get("workdir", ".")
    if not isinstance(workdir, str) or workdir.startswith("/") or not workdir:
        return data  # validation names what is wrong, or it is absolute already
    return {**data, "code": {**code, "workdir": os.path.normpath(base_dir / workdir)}}


def _resolved(data: dict[Any, Any], source: str, resolve: DatasetResolver) -> dict[Any, Any]:
    """``data`` with its ``dataset`` resolved.

    A reference the catalog cannot resolve is a spec problem, named with the
    spec's other problems; its :class:`CatalogError` is raised alone when the
    spec has no other problem or the reference itself is a valid manifest id.
    """
    ref = data.get("dataset")
    if not isinstance(ref, str):
        return data  # missing or not text: validation names it
    if not _DIGEST.fullmatch(ref.lower()) and alias_problem(ref) is not None:
        raise SpecError(source, [f"dataset: {alias_problem(ref)}"])
    try:
        return {**data, "dataset": resolve(ref)}
    except CatalogError as exc:
        try:
            _validate(lambda: RunSpec.model_validate(data), source)
        except SpecError as err:
            others = [p for p in err.problems if not p.startswith("dataset:")]
            if others and len(others) < len(err.problems):
                problems = [p if p in others else f"{p}; {exc}" for p in err.problems]
                raise SpecError(source, problems) from None
        raise


def parse_spec_json(text: str, source: str = "spec_json") -> RunSpec:
    """A spec from its canonical JSON, as ``RunSubmitted.spec_json`` carries it.

    Held to the same limits as a spec's YAML, so an old log or a forged request
    is refused here with a :class:`SpecError`, never by a crash further on.
    """
    check_size(text, source)
    spec = _validate(lambda: RunSpec.model_validate_json(text), source)
    if depth(spec.model) + 1 > MAX_DEPTH:
        raise SpecError(source, [f"model: {TOO_DEEP}: nested more than {MAX_DEPTH} levels deep"])
    return spec


def _validate(build: Callable[[], RunSpec], source: str) -> RunSpec:
    try:
        return build()
    except ValidationError as exc:
        raise SpecError.from_validation(source, exc) from None
