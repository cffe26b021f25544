"""The worker environment contract: what the node agent tells each process it launches.

A worker learns everything about its place in a generation from environment
variables, so any program (the torch worker, ``controller.testworker``, a
user's script under ``torchrun``-style conventions) can read it without
runledger imports. Names:

==============================  ================================================
``RUNLEDGER_RUN_ID``            run id (the ``run_id`` of every report)
``RUNLEDGER_GENERATION``        generation, the fencing token reports carry
``RUNLEDGER_LOGICAL_ID``        this worker's logical id (never a bare rank)
``RUNLEDGER_NODE``              the node the agent runs on
``RUNLEDGER_BOOTSTRAP``         Kafka bootstrap address for reports
``RUNLEDGER_HEARTBEAT_INTERVAL_S``  seconds between ``HeartbeatRecorded``
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
``env``; the agent validates it and otherwise uses its own default. Every other
variable above is owned by the agent: values the command or the agent's own
environment carry under these names are replaced, so a command cannot give a
worker a wrong rank or a stale resume point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller.errors import ControllerError
from events.kafka import ENV_BOOTSTRAP

RUN_ID = "RUNLEDGER_RUN_ID"
GENERATION = "RUNLEDGER_GENERATION"
LOGICAL_ID = "RUNLEDGER_LOGICAL_ID"
NODE = "RUNLEDGER_NODE"
BOOTSTRAP = ENV_BOOTSTRAP
HEARTBEAT_INTERVAL_S = "RUNLEDGER_HEARTBEAT_INTERVAL_S"
RESUME_STEP = "RUNLEDGER_RESUME_STEP"
RESUME_MANIFEST = "RUNLEDGER_RESUME_MANIFEST"
WORLD_SIZE = "WORLD_SIZE"
RANK = "RANK"
LOCAL_RANK = "LOCAL_RANK"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
# Read by the agent from a start command's env; not passed on as a WorkerEnv field.
RANKS = "RUNLEDGER_RANKS"

OWNED = (
    RUN_ID, GENERATION, LOGICAL_ID, NODE, BOOTSTRAP, HEARTBEAT_INTERVAL_S, RESUME_STEP,
    RESUME_MANIFEST, WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,
)


class WorkerEnvError(ControllerError):
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
    """The ``RUNLEDGER_RANKS`` value for a membership in global rank order."""
    for lid in logical_ids:
        if not lid or "," in lid:
            raise WorkerEnvError(f"{RANKS}: logical id {lid!r} is empty or contains a comma")
    return ",".join(logical_ids)


def parse_ranks(raw: str) -> tuple[str, ...]:
    """Logical ids in global rank order; duplicates or empty entries are refused."""
    ids = tuple(part.strip() for part in raw.split(","))
    if not raw or any(not lid for lid in ids):
        raise WorkerEnvError(f"{RANKS} has an empty entry: {raw!r}")
    dup = sorted({lid for lid in ids if ids.count(lid) > 1})
    if dup:
        raise WorkerEnvError(f"{RANKS} names {', '.join(dup)} more than once")
    return ids


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
