"""Commands: what the controller tells node agents to do (``runledger.commands``).

Tested in tests/events/test_codec.py and tests/events/test_compat.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from events.base import Event, Member


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupStartCommanded(Event):
    """Start this node's part of a generation's worker group.

    ``command_id`` is deterministic (run, generation, node), so a re-issued
    command is recognisably the same one and agents drop the duplicate.
    v2 adds ``workdir``: the absolute directory the workers run in, where a
    relative path in ``argv`` resolves; empty (v1) means the agent's work dir.
    """

    command_id: str
    node: str
    members: tuple[Member, ...]
    world_size: int
    master_addr: str
    master_port: int
    argv: tuple[str, ...]
    env: dict[str, str]
    resume_step: int | None = None
    resume_manifest: str | None = None
    workdir: str = ""
    TOPIC: ClassVar[str] = "runledger.commands"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupStopCommanded(Event):
    """Stop every worker of ``header.generation`` (and older) of this run on a node."""

    command_id: str
    node: str
    reason: str
    TOPIC: ClassVar[str] = "runledger.commands"
