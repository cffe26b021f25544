"""What every event is made of: the ``Header``, the ``Event`` base class, ``Member``.

The concrete events live by topic: ``events.requests`` (operators),
``events.facts`` (the controller, ``runledger.runs``), ``events.reports``
(agents and workers), ``events.commands`` (the controller to agents);
``events.model`` gathers them into the catalog. Times are integer
milliseconds since the epoch taken from the event's writer (``occurred_at``);
nothing here reads a clock.

Tested in tests/events/test_codec.py and tests/events/test_compat.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from events.errors import InvalidEvent


@dataclass(frozen=True, slots=True)
class Header:
    """The record every event starts with (docs/architecture.md, Events)."""

    event_id: str
    run_id: str
    generation: int
    occurred_at: int
    producer: str
    causation_id: str | None = None
    schema_version: int = 1

    def __post_init__(self) -> None:
        for name in ("event_id", "run_id", "producer"):
            if not getattr(self, name):
                raise InvalidEvent(f"header.{name} must be a non-empty string")
        if self.generation < 0:
            raise InvalidEvent(f"header.generation must be >= 0, got {self.generation}")
        if self.occurred_at < 0:
            raise InvalidEvent(f"header.occurred_at must be >= 0 ms, got {self.occurred_at}")


@dataclass(frozen=True, slots=True)
class Member:
    """One slot of a worker group: a logical id placed on a node's slot."""

    logical_id: str
    node: str
    slot: int
    domain: str | None = None


def by_node(members: Iterable[Member]) -> dict[str, list[Member]]:
    """The members on each node, in their order: grouped once, where a scan of every
    member per node costs O(nodes x ranks) (12,500 x 10^5 for one large run)."""
    out: dict[str, list[Member]] = {}
    for m in members:
        out.setdefault(m.node, []).append(m)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every event; ``header`` comes first in every schema."""

    header: Header
    # Which topic the writer is expected to use; a reader does not rely on it.
    TOPIC: ClassVar[str] = ""

    @property
    def run_id(self) -> str:
        return self.header.run_id

    @property
    def generation(self) -> int:
        return self.header.generation

    @property
    def event_type(self) -> str:
        return type(self).__name__


def one_of(value: str, allowed: tuple[str, ...], where: str) -> None:
    """Refuse a value outside an enumeration (the schemas keep such fields strings)."""
    if value not in allowed:
        raise InvalidEvent(f"{where} must be one of {', '.join(allowed)}; got {value!r}")


# Node-scoped events use the pseudo run id ``node/<name>`` so they stay keyed
# and ordered per node; ``events.fold`` never treats them as runs.
def node_key(node: str) -> str:
    """The ``run_id`` header value of a node-scoped event."""
    return f"node/{node}"


# A preflight's result is keyed by the spec it checked, ``spec/<64 hex>``, so a
# reader (the admission gates) finds every preflight of one digest in one partition.
def spec_key(spec_digest: str) -> str:
    """The ``run_id`` header value of a spec-scoped event (``sha256:`` dropped)."""
    return f"spec/{spec_digest.removeprefix('sha256:')}"
