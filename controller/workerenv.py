"""The worker environment contract, re-exported from :mod:`events.workerenv` where it lives.

The agent and controller write it; the worker session reads it; it sits in
``events`` so that neither imports the other.
"""

from events.workerenv import (
    BOOTSTRAP,
    GENERATION,
    HEARTBEAT_INTERVAL_S,
    LOCAL_RANK,
    LOGICAL_ID,
    MASTER_ADDR,
    MASTER_PORT,
    NODE,
    OWNED,
    RANK,
    RANKS,
    RESUME_MANIFEST,
    RESUME_STEP,
    RUN_ID,
    WORLD_SIZE,
    WorkerEnv,
    WorkerEnvError,
    compose_environ,
    format_ranks,
    parse_interval,
    parse_ranks,
)

__all__ = [
    "BOOTSTRAP", "GENERATION", "HEARTBEAT_INTERVAL_S", "LOCAL_RANK", "LOGICAL_ID", "MASTER_ADDR",
    "MASTER_PORT", "NODE", "OWNED", "RANK", "RANKS", "RESUME_MANIFEST", "RESUME_STEP", "RUN_ID",
    "WORLD_SIZE", "WorkerEnv", "WorkerEnvError", "compose_environ", "format_ranks",
    "parse_interval", "parse_ranks",
]
