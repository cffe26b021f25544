"""Where a worker's log file lies under its agent's work dir, for the agent and the CLI. Pure.

The agent writes each worker's stdout and stderr to
``<work dir>/<run>/g<generation>/<logical id>.log`` (:func:`worker_log_path`,
relative to the work dir). It names the file in the worker's ``WorkerExited``
once the worker has ended, and its work dir in its ``AgentRegistered`` (v2)
when it starts, so ``runledger logs`` finds the file of a worker that is still
running with :func:`worker_log_file`, the same rule, without asking the agent.

Each name becomes one path component that cannot climb out of the work dir
(:func:`path_component`): the agent also refuses run and logical ids that break
the naming rule (``events.names``), so this only matters for old records.

Tested in tests/events/test_workerlog.py.
"""

from __future__ import annotations

import posixpath


def path_component(name: str) -> str:
    """``name`` as one path component that cannot climb out of a directory."""
    cleaned = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in name)
    return cleaned.lstrip(".") or "_"


def worker_log_path(run_id: str, generation: int, logical_id: str) -> str:
    """The log file of a worker, relative to its agent's work dir."""
    return f"{path_component(run_id)}/g{generation}/{path_component(logical_id)}.log"


def worker_log_file(work_dir: str, run_id: str, generation: int, logical_id: str) -> str:
    """The log file of a worker under ``work_dir`` (the agent's, as it registered it)."""
    return posixpath.join(work_dir, worker_log_path(run_id, generation, logical_id))
