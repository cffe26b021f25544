"""The worker environment contract: what the node agent tells each process it launches.

It lives in ``events`` because both sides read it: the controller and agent
write it, the worker session (``worker/``) reads it, and neither may import
the other.

A worker learns everything about its place in a generation from environment
variables, so any program (the torch worker, ``agent.testworker``, a
user's script under ``torchrun``-style conventions) can read it without
runledger imports. Names:

==============================  ================================================
``RUNLEDGER_RUN_ID``            run id (the ``run_id`` of every report)
``RUNLEDGER_GENERATION``        generation, the fencing token reports carry
``RUNLEDGER_LOGICAL_ID``        this worker's logical id (never a bare rank)
``RUNLEDGER_NODE``              the node the agent runs on
``RUNLEDGER_BOOTSTRAP``         Kafka bootstrap address for reports
``RUNLEDGER_HEARTBEAT_INTERVAL_S``  seconds between heartbeats
``RUNLEDGER_BEAT_FILE``         where to write them for the agent (absent: send
                                ``HeartbeatRecorded`` records; ``events.beatfile``)
``RUNLEDGER_RESUME_STEP``       committed step to resume from (absent: fresh)
``RUNLEDGER_RESUME_MANIFEST``   its manifest path (absent: none)
``WORLD_SIZE`` ``RANK``         torch.distributed: group size, global rank
``LOCAL_RANK``                  rank among this node's members of the group
``MASTER_ADDR`` ``MASTER_PORT`` torch.distributed rendezvous (rank 0's host)
==============================  ================================================

Rank contract. ``GroupStartCommanded.members`` holds only the receiving node's
members, so it cannot say where they sit in the whole group. The controller
therefore puts ``RUNLEDGER_RANKS`` in the command's ``env``: every logical id
of the generation, comma-separated, in global rank order (the order of
``GenerationStarted.members``). A member's rank is its index there; its local
rank is its position among this node's members sorted by rank. Only when the
command names the whole group (``len(members) == world_size``, one node) may
``RUNLEDGER_RANKS`` be left out; then the order of ``members`` is the rank order.

The controller may also set ``RUNLEDGER_HEARTBEAT_INTERVAL_S`` in the command's
``env``; the agent validates it and otherwise uses its own default. It also
sets ``RUNLEDGER_REPLICAS`` (the generation's data-parallel replica count) and
``RUNLEDGER_ACCUMULATION`` (micro-batches per replica per optimizer step, so
the global batch keeps its meaning when an elastic run changes size; the same
two numbers as ``GenerationStarted``), which the agent passes on as given. Every other
variable above is owned by the agent: values the command or the agent's own
environment carry under these names are replaced, so a command cannot give a
worker a wrong rank or a stale resume point.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from events.errors import EventsError
from events.placement import numbered

RUN_ID = "RUNLEDGER_RUN_ID"
GENERATION = "RUNLEDGER_GENERATION"
LOGICAL_ID = "RUNLEDGER_LOGICAL_ID"
NODE = "RUNLEDGER_NODE"
# The broker a process reaches: the one variable every runledger client reads
# (``events.kafka.clients.broker``), and the one the agent sets for its workers.
ENV_BOOTSTRAP = "RUNLEDGER_BOOTSTRAP"
BOOTSTRAP = ENV_BOOTSTRAP
HEARTBEAT_INTERVAL_S = "RUNLEDGER_HEARTBEAT_INTERVAL_S"
# Set by the agent: the worker writes its heartbeats to this file (events.beatfile) and
# the agent sends them for its node's members in one record; absent, the worker sends its own.
BEAT_FILE = "RUNLEDGER_BEAT_FILE"
RESUME_STEP = "RUNLEDGER_RESUME_STEP"
RESUME_MANIFEST = "RUNLEDGER_RESUME_MANIFEST"
WORLD_SIZE = "WORLD_SIZE"
RANK = "RANK"
LOCAL_RANK = "LOCAL_RANK"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
# Read by the agent from a start command's env; not passed on as a WorkerEnv field.
RANKS = "RUNLEDGER_RANKS"
# Set by the controller in a start command's env and passed on to the worker as given.
REPLICAS = "RUNLEDGER_REPLICAS"
ACCUMULATION = "RUNLEDGER_ACCUMULATION"

OWNED = (
    RUN_ID, GENERATION, LOGICAL_ID, NODE, BOOTSTRAP, HEARTBEAT_INTERVAL_S, RESUME_STEP,
    RESUME_MANIFEST, WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, BEAT_FILE,
)


class WorkerEnvError(EventsError):
    """A worker environment variable is missing or invalid (the message names it)."""


@dataclass(frozen=True, slots=True)
class WorkerEnv:
    run_id: str
    generation: int
    logical_id: str
    node: str
    world_size: int
    rank: int
    local_rank: int
    master_addr: str
    master_port: int
    bootstrap: str
    heartbeat_interval_s: float
    resume_step: int | None = None
    resume_manifest: str | None = None
    beat_file: str | None = None  # None: the worker sends its own HeartbeatRecorded

    def __post_init__(self) -> None:
        for var, value in ((RUN_ID, self.run_id), (LOGICAL_ID, self.logical_id),
                           (NODE, self.node), (MASTER_ADDR, self.master_addr),
                           (BOOTSTRAP, self.bootstrap)):
            if not value:
                raise WorkerEnvError(f"{var} must be a non-empty string")
        if self.generation < 0:
            raise WorkerEnvError(f"{GENERATION} must be >= 0, got {self.generation}")
        if self.world_size < 1:
            raise WorkerEnvError(f"{WORLD_SIZE} must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise WorkerEnvError(f"{RANK} must be in [0, {self.world_size}), got {self.rank}")
        if not 0 <= self.local_rank < self.world_size:
            raise WorkerEnvError(f"{LOCAL_RANK} must be in [0, {self.world_size}), "
                                 f"got {self.local_rank}")
        if not 1 <= self.master_port <= 65535:
            raise WorkerEnvError(f"{MASTER_PORT} must be in [1, 65535], got {self.master_port}")
        if not (math.isfinite(self.heartbeat_interval_s) and self.heartbeat_interval_s > 0):
            raise WorkerEnvError(
                f"{HEARTBEAT_INTERVAL_S} must be a positive number, got {self.heartbeat_interval_s}"
            )
        if self.resume_step is not None and self.resume_step < 0:
            raise WorkerEnvError(f"{RESUME_STEP} must be >= 0, got {self.resume_step}")

    def to_environ(self) -> dict[str, str]:
        """The variables to set; the resume ones only when there is a resume point."""
        out = {
            RUN_ID: self.run_id,
            GENERATION: str(self.generation),
            LOGICAL_ID: self.logical_id,
            NODE: self.node,
            BOOTSTRAP: self.bootstrap,
            HEARTBEAT_INTERVAL_S: repr(self.heartbeat_interval_s),
            WORLD_SIZE: str(self.world_size),
            RANK: str(self.rank),
            LOCAL_RANK: str(self.local_rank),
            MASTER_ADDR: self.master_addr,
            MASTER_PORT: str(self.master_port),
        }
        if self.resume_step is not None:
            out[RESUME_STEP] = str(self.resume_step)
        if self.resume_manifest is not None:
            out[RESUME_MANIFEST] = self.resume_manifest
        if self.beat_file is not None:
            out[BEAT_FILE] = self.beat_file
        return out

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> WorkerEnv:
        """Read the contract back; ``WorkerEnvError`` names the first bad variable."""
        resume_step = env.get(RESUME_STEP) or None
        return cls(
            run_id=_required(env, RUN_ID),
            generation=_int(env, GENERATION),
            logical_id=_required(env, LOGICAL_ID),
            node=_required(env, NODE),
            world_size=_int(env, WORLD_SIZE),
            rank=_int(env, RANK),
            local_rank=_int(env, LOCAL_RANK),
            master_addr=_required(env, MASTER_ADDR),
            master_port=_int(env, MASTER_PORT),
            bootstrap=_required(env, BOOTSTRAP),
            heartbeat_interval_s=parse_interval(_required(env, HEARTBEAT_INTERVAL_S)),
            resume_step=None if resume_step is None else _int(env, RESUME_STEP),
            resume_manifest=env.get(RESUME_MANIFEST) or None,
            beat_file=env.get(BEAT_FILE) or None,
        )


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise WorkerEnvError(f"environment variable {name} is not set")
    return value


def _int(env: Mapping[str, str], name: str) -> int:
    raw = _required(env, name)
    try:
        return int(raw)
    except ValueError:
        raise WorkerEnvError(f"environment variable {name} must be an integer, got {raw!r}") \
            from None


def parse_interval(raw: str) -> float:
    """A heartbeat interval in seconds: a finite number > 0."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise WorkerEnvError(f"{HEARTBEAT_INTERVAL_S} must be a positive number, got {raw!r}")
    return value


def format_ranks(logical_ids: Sequence[str]) -> str:
    """The ``RUNLEDGER_RANKS`` value for a membership in global rank order.

    Entries are comma-separated; a run of ids ``<p><a>, <p><a+1>, .., <p><b>`` (the
    ``r0, r1, ..`` admission names) is written ``<p>[<a>..<b>]``, since ``[`` is in no
    logical id (``events.names``). Written out, 16,384 ids are 104 KB in every start
    command, and Linux refuses to start a process with an environment string over
    128 KiB; as a range they are ``r[0..16383]``.
    """
    for lid in logical_ids:
        if not lid or "," in lid or "[" in lid:
            raise WorkerEnvError(f"{RANKS}: logical id {lid!r} is empty or contains ',' or '['")
    out: list[str] = []
    i = 0
    while i < len(logical_ids):
        prefix, first = numbered(logical_ids[i])
        j = i + 1
        if first is not None:
            while j < len(logical_ids) and numbered(logical_ids[j]) == (prefix, first + j - i):
                j += 1
        if first is not None and j - i > 2:
            out.append(f"{prefix}[{first}..{first + j - i - 1}]")
        else:
            out.append(",".join(logical_ids[i:j]))
        i = j
    return ",".join(out)


def parse_ranks(raw: str) -> tuple[str, ...]:
    """Logical ids in global rank order; duplicates or empty entries are refused."""
    ids: list[str] = []
    for part in raw.split(","):
        part = part.strip()
        if part.endswith("]") and "[" in part:
            prefix, _, span = part[:-1].partition("[")
            first, dots, last = span.partition("..")
            if not (dots and first.isdigit() and last.isdigit() and int(first) <= int(last)):
                raise WorkerEnvError(f"{RANKS} has a bad range {part!r}: want <prefix>[a..b]")
            ids.extend(f"{prefix}{n}" for n in range(int(first), int(last) + 1))
        else:
            ids.append(part)
    if not raw or any(not lid for lid in ids):
        raise WorkerEnvError(f"{RANKS} has an empty entry: {raw!r}")
    if len(set(ids)) != len(ids):  # counted once: a count per id was O(ranks^2)
        dup = sorted(lid for lid, n in Counter(ids).items() if n > 1)
        raise WorkerEnvError(f"{RANKS} names {', '.join(dup)} more than once")
    return tuple(ids)


def compose_environ(
    base: Mapping[str, str], command_env: Mapping[str, str], worker: WorkerEnv
) -> dict[str, str]:
    """The full environment of a launched worker.

    Precedence, lowest first: the agent's own environment, the command's
    ``env``, the contract. Contract names are dropped from the lower layers
    first, so an inherited ``RUNLEDGER_RESUME_STEP`` cannot leak into a fresh
    start where the contract leaves it unset.
    """
    owned = set(OWNED)
    env = {k: v for k, v in base.items() if k not in owned}
    env.update({k: v for k, v in command_env.items() if k not in owned})
    env.update(worker.to_environ())
    return env


# --- what the controller adds for the torch worker session -------------------
# Set by the controller in a start command's ``env`` (the agent passes them on
# as they are); read by ``worker.session``. Absent values mean the defaults.

CHECKPOINT_ROOT = "RUNLEDGER_CHECKPOINT_ROOT"
CHECKPOINT_MODE = "RUNLEDGER_CHECKPOINT_MODE"
CHECKPOINT_BACKLOG = "RUNLEDGER_CHECKPOINT_BACKLOG"
CHECKPOINT_BACKLOG_POLICY = "RUNLEDGER_CHECKPOINT_BACKLOG_POLICY"
CHECKPOINT_INTERVAL_STEPS = "RUNLEDGER_CHECKPOINT_INTERVAL_STEPS"
CHECKPOINT_KEEP_LAST = "RUNLEDGER_CHECKPOINT_KEEP_LAST"
CHECKPOINT_KEEP_EVERY = "RUNLEDGER_CHECKPOINT_KEEP_EVERY"
CHECKPOINT_ROLLBACK = "RUNLEDGER_CHECKPOINT_ROLLBACK_WINDOW"
DATASET_ID = "RUNLEDGER_DATASET_ID"
CODE_VERSION = "RUNLEDGER_CODE_VERSION"
MODEL = "RUNLEDGER_MODEL"
RESUME_CANDIDATES = "RUNLEDGER_RESUME_CANDIDATES"
CHECKPOINT_TIERS = "RUNLEDGER_CHECKPOINT_TIERS"
FAILURE_DOMAIN = "RUNLEDGER_FAILURE_DOMAIN"

# Failure domains, narrowest first. A copy that survives the loss of a wider
# domain survives a narrower one too (a copy off the rack is off the host).
FAILURE_DOMAINS = ("process", "host", "domain", "cluster")
# The name of the one tier a spec with only ``checkpoint.root`` has. Shared storage
# every member reaches outlives a host, not its rack or cluster (it may share them).
ROOT_TIER = "root"


@dataclass(frozen=True, slots=True)
class TierEnv:
    """One storage tier: a name, an fsspec root, the widest domain loss it survives,
    and how many committed checkpoints it keeps (``None``: the run's ``keep_last``)."""

    name: str
    root: str
    protects: str
    keep_last: int | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.root:
            raise WorkerEnvError(f"{CHECKPOINT_TIERS}: a tier needs a name and a root,"
                                 f" got {self.name!r} at {self.root!r}")
        if self.protects not in FAILURE_DOMAINS:
            raise WorkerEnvError(f"{CHECKPOINT_TIERS}: tier {self.name} protects"
                                 f" {self.protects!r}, not one of {', '.join(FAILURE_DOMAINS)}")
        if self.keep_last is not None and self.keep_last < 1:
            raise WorkerEnvError(f"{CHECKPOINT_TIERS}: tier {self.name} keep_last must be"
                                 f" >= 1, got {self.keep_last}")

    def survives(self, domain: str) -> bool:
        """Whether a copy here outlives the loss of ``domain``."""
        return FAILURE_DOMAINS.index(self.protects) >= FAILURE_DOMAINS.index(domain)


@dataclass(frozen=True, slots=True)
class CheckpointEnv:
    """The run's checkpoint settings and provenance, as the worker session needs them."""

    root: str | None = None
    mode: str = "sync"
    backlog: int = 1
    backlog_policy: str = "delay"
    interval_steps: int = 100
    keep_last: int = 3
    keep_every: int | None = None
    rollback_window: int = 3
    dataset_id: str | None = None
    code_version: str = ""
    model_json: str = "{}"
    # Committed checkpoints to try on restore, newest first: (step, manifest, digest).
    candidates: tuple[tuple[int, str, str], ...] = ()
    # Every tier, nearest first; the first one's root is ``root``. Empty: ``root`` is
    # the one tier (ROOT_TIER), shared storage every member reaches.
    tiers: tuple[TierEnv, ...] = ()
    # The failure that ended the previous generation: restore skips tiers it took.
    failure_domain: str = "process"

    def __post_init__(self) -> None:
        if self.failure_domain not in FAILURE_DOMAINS:
            raise WorkerEnvError(f"{FAILURE_DOMAIN} must be one of {', '.join(FAILURE_DOMAINS)},"
                                 f" got {self.failure_domain!r}")
        if self.mode not in ("sync", "async"):
            raise WorkerEnvError(f"{CHECKPOINT_MODE} must be sync or async, got {self.mode!r}")
        if self.backlog_policy not in ("delay", "skip"):
            raise WorkerEnvError(f"{CHECKPOINT_BACKLOG_POLICY} must be delay or skip,"
                                 f" got {self.backlog_policy!r}")
        for var, value in ((CHECKPOINT_BACKLOG, self.backlog),
                           (CHECKPOINT_INTERVAL_STEPS, self.interval_steps),
                           (CHECKPOINT_KEEP_LAST, self.keep_last),
                           (CHECKPOINT_ROLLBACK, self.rollback_window)):
            if value < 1:
                raise WorkerEnvError(f"{var} must be >= 1, got {value}")
        if self.keep_every is not None and self.keep_every < 1:
            raise WorkerEnvError(f"{CHECKPOINT_KEEP_EVERY} must be >= 1, got {self.keep_every}")
        if self.tiers and self.tiers[0].root != self.root:
            raise WorkerEnvError(f"{CHECKPOINT_TIERS}: the first tier's root"
                                 f" {self.tiers[0].root} is not {CHECKPOINT_ROOT} {self.root}")

    def storage_tiers(self) -> tuple[TierEnv, ...]:
        """The tiers, nearest first; a lone ``root`` is one tier protecting ``host``."""
        if self.tiers:
            return self.tiers
        return () if self.root is None else (TierEnv(ROOT_TIER, self.root, "host"),)

    def to_environ(self) -> dict[str, str]:
        out = {
            CHECKPOINT_MODE: self.mode, CHECKPOINT_BACKLOG: str(self.backlog),
            CHECKPOINT_BACKLOG_POLICY: self.backlog_policy,
            CHECKPOINT_INTERVAL_STEPS: str(self.interval_steps),
            CHECKPOINT_KEEP_LAST: str(self.keep_last),
            CHECKPOINT_ROLLBACK: str(self.rollback_window), CODE_VERSION: self.code_version,
            MODEL: self.model_json,
            RESUME_CANDIDATES: json.dumps([list(c) for c in self.candidates]),
        }
        if self.root is not None:
            out[CHECKPOINT_ROOT] = self.root
        if self.tiers:
            out[CHECKPOINT_TIERS] = json.dumps(
                [[t.name, t.root, t.protects, t.keep_last] for t in self.tiers])
        if self.failure_domain != "process":
            out[FAILURE_DOMAIN] = self.failure_domain
        if self.keep_every is not None:
            out[CHECKPOINT_KEEP_EVERY] = str(self.keep_every)
        if self.dataset_id is not None:
            out[DATASET_ID] = self.dataset_id
        return out

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> CheckpointEnv:
        def num(name: str, default: int) -> int:
            return _int(env, name) if env.get(name) else default
        raw = env.get(RESUME_CANDIDATES) or "[]"
        try:
            items = json.loads(raw)
            candidates = tuple((int(s), str(p), str(d)) for s, p, d in items)
        except (ValueError, TypeError) as exc:
            raise WorkerEnvError(f"{RESUME_CANDIDATES} must be a JSON list of"
                                 f" [step, manifest, digest]: {exc}") from None
        return cls(
            root=env.get(CHECKPOINT_ROOT) or None,
            mode=env.get(CHECKPOINT_MODE) or "sync",
            backlog=num(CHECKPOINT_BACKLOG, 1),
            backlog_policy=env.get(CHECKPOINT_BACKLOG_POLICY) or "delay",
            interval_steps=num(CHECKPOINT_INTERVAL_STEPS, 100),
            keep_last=num(CHECKPOINT_KEEP_LAST, 3),
            keep_every=_int(env, CHECKPOINT_KEEP_EVERY) if env.get(CHECKPOINT_KEEP_EVERY)
            else None,
            rollback_window=num(CHECKPOINT_ROLLBACK, 3),
            dataset_id=env.get(DATASET_ID) or None,
            code_version=env.get(CODE_VERSION, ""),
            model_json=env.get(MODEL) or "{}",
            candidates=candidates,
            tiers=_tiers(env.get(CHECKPOINT_TIERS) or "[]"),
            failure_domain=env.get(FAILURE_DOMAIN) or "process",
        )


def _tiers(raw: str) -> tuple[TierEnv, ...]:
    try:
        return tuple(TierEnv(str(n), str(r), str(p), None if k is None else int(k))
                     for n, r, p, k in json.loads(raw))
    except (ValueError, TypeError) as exc:
        raise WorkerEnvError(f"{CHECKPOINT_TIERS} must be a JSON list of"
                             f" [name, root, protects, keep_last]: {exc}") from None
