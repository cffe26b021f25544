"""Commands as the controller writes them, for the agent's tests (the test worker as argv)."""

from __future__ import annotations

import sys
import uuid

from events.model import GroupStartCommanded, GroupStopCommanded
from events.workerenv import RANKS
from tests.events.builders import Ev, members

NOW = 1_800_000_000_000
WORKER = (sys.executable, "-m", "agent.testworker")


def _ev(run: str) -> Ev:
    return Ev(run, producer="controller")


def _new_id() -> str:
    # Header ids are random: the agent tests share a broker across runs of the suite.
    return f"cmd/{uuid.uuid4().hex}"


def start_cmd(node: str, run: str, gen: int, ids: tuple[str, ...], *args: str,
              ranks: tuple[str, ...] | None = None, cid: str | None = None,
              at: int | None = None, env: dict[str, str] | None = None) -> GroupStartCommanded:
    """A start command as the controller writes it: this node's members, all ranks in env."""
    order = ranks or ids
    return _ev(run).group_start(
        gen, node, at=NOW if at is None else at, event_id=_new_id(),
        command_id=cid or f"{run}/g{gen}/{node}/start", members=members(*ids, node=node),
        world_size=len(order), master_addr="127.0.0.1", argv=(*WORKER, *args),
        env={RANKS: ",".join(order), **(env or {})})


def stop_cmd(node: str, run: str, gen: int, at: int = NOW) -> GroupStopCommanded:
    return _ev(run).group_stop(gen, node, at=at, event_id=_new_id(),
                               command_id=f"{run}/g{gen}/{node}/stop", reason="test")
