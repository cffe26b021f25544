"""Commands as the controller writes them, for the agent's tests (the test worker as argv)."""

from __future__ import annotations

import sys
import uuid

from events.model import GroupStartCommanded, GroupStopCommanded, Header, Member
from events.workerenv import RANKS

NOW = 1_800_000_000_000
WORKER = (sys.executable, "-m", "agent.testworker")


def start_cmd(node: str, run: str, gen: int, ids: tuple[str, ...], *args: str,
              ranks: tuple[str, ...] | None = None, cid: str | None = None,
              at: int | None = None, env: dict[str, str] | None = None) -> GroupStartCommanded:
    """A start command as the controller writes it: this node's members, all ranks in env."""
    order = ranks or ids
    return GroupStartCommanded(
        header=Header(f"cmd/{uuid.uuid4().hex}", run, gen, NOW if at is None else at,
                      "controller"),
        command_id=cid or f"{run}/g{gen}/{node}/start", node=node,
        members=tuple(Member(lid, node, i) for i, lid in enumerate(ids)),
        world_size=len(order), master_addr="127.0.0.1", master_port=29500,
        argv=(*WORKER, *args), env={RANKS: ",".join(order), **(env or {})},
    )


def stop_cmd(node: str, run: str, gen: int, at: int = NOW) -> GroupStopCommanded:
    return GroupStopCommanded(
        header=Header(f"cmd/{uuid.uuid4().hex}", run, gen, at, "controller"),
        command_id=f"{run}/g{gen}/{node}/stop", node=node, reason="test")
