"""The beat file: how a worker tells its node's agent it is alive, with no record of its own.

Node-aggregated liveness (docs/architecture.md §8). A worker whose agent gave it
``RUNLEDGER_BEAT_FILE`` (``events.workerenv.BEAT_FILE``) writes its heartbeat
there every heartbeat interval instead of sending a ``HeartbeatRecorded``; the
agent reads its members' files and sends one ``MembersHeartbeatRecorded`` per
run and generation for those whose beat moved. A run of 10^5 ranks on 12,500
nodes of 8 is then 12,500 records per interval, not 10^5, and each is signed
once by the node's key instead of by each rank's run key.

The file is one line, ``rl-beat-v1 <seq> <step> <closing 0|1>``, replaced
whole (``os.replace``), so a reader sees the old beat or the new one, never
half of either. ``seq`` counts the worker's beats from 1: the agent reports a
member whose ``seq`` changed since its last look, which is exactly "it beat
since", whatever the clocks say. A missing, foreign or garbled file reads as
no beat (``None``): the member's silence, which the controller judges by its
heartbeat timeout as it judges a silent worker's.

Both sides import it (the kernel holds the contract; ``worker.reporter``,
``agent.testworker`` write, ``agent.beats`` reads).

Tested in tests/events/test_beatfile.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

FORMAT = "rl-beat-v1"
_MAX_BYTES = 128  # a beat is one short line; anything longer is not one


@dataclass(frozen=True, slots=True)
class Beat:
    """One heartbeat of a worker: its count, its last step, whether its session closed."""

    seq: int
    step: int
    closing: bool = False


def path_for(base_dir: str, run_id: str, generation: int, logical_id: str) -> str:
    """Where the agent whose work dir is ``base_dir`` has a member write its beats (ids are
    checked names, ``events.names``, so each is one path component)."""
    return str(Path(base_dir) / "beats" / run_id / f"g{generation}" / logical_id)


def write(path: str | Path, beat: Beat) -> None:
    """Replace the beat at ``path`` (its directory is made if missing)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(f"{FORMAT} {beat.seq} {beat.step} {int(beat.closing)}\n")
    except FileNotFoundError:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(f"{FORMAT} {beat.seq} {beat.step} {int(beat.closing)}\n")
    os.replace(tmp, target)


def read(path: str | Path) -> Beat | None:
    """The beat at ``path``; None when there is none (missing, foreign or garbled)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_BYTES + 1)
    except OSError:
        return None
    if len(raw) > _MAX_BYTES:
        return None
    parts = raw.decode("ascii", "replace").split()
    if len(parts) != 4 or parts[0] != FORMAT or parts[3] not in ("0", "1"):
        return None
    try:
        seq, step = int(parts[1]), int(parts[2])
    except ValueError:
        return None
    if seq < 1 or step < 0:
        return None
    return Beat(seq, step, parts[3] == "1")
