"""Roles as Kafka ACLs: the least each runledger component needs, and nothing else. Pure.

``events.authority`` says which role may *say* each event; this table makes the
broker enforce it, so a record from the wrong principal is refused before it
is ever written (docs/architecture.md §4):

- **operator** (people, the CLI): writes ``requests``; reads every topic but
  ``commands``: ``status`` shows a run not yet admitted (``requests``) and its
  live steps (``reports``), postmortems read the ``quarantine``;
- **agent** (node agents): writes ``reports``; reads ``commands``, ``runs`` and
  ``keys``; joins consumer groups named ``agent-*``;
- **worker** (the processes an agent launches, which get the worker's
  credentials file, never the agent's): writes ``reports``; reads ``runs`` (a
  worker follows its run's facts: a commit, a stop; ``worker.watcher``), and
  nothing else: no ``commands``, no ``keys``, no group;
- **controller**: reads ``requests``, ``reports``, ``runs`` and ``keys``;
  writes ``runs``, ``commands`` and the ``quarantine``; alone holds the
  transactional ids and consumer groups named ``runledger-controller*``;
- **projector**: reads ``runs``, ``reports`` and ``keys`` (its door of reports
  judges their signatures, ``events.kafka.reportdoor``) and ``status``; writes nothing.

Nobody but the controller writes ``runs`` or ``commands``; nobody but the admin
(Kafka's super user) writes ``keys``, creates topics or changes ACLs. READ and
WRITE on a topic imply DESCRIBE in Kafka, so no grant lists it.

Tested in tests/runledger/stack/test_acls.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from events.topics import COMMANDS, KEYS, QUARANTINE, REPORTS, REQUESTS, RUNS, STATUS
from runledger.errors import UsageError

CONTROLLER_PREFIX = "runledger-controller"  # transactional ids and the consumer group
AGENT_GROUP_PREFIX = "agent-"


class Role(StrEnum):
    OPERATOR = "operator"
    AGENT = "agent"
    WORKER = "worker"
    CONTROLLER = "controller"
    PROJECTOR = "projector"


@dataclass(frozen=True, slots=True, order=True)
class Grant:
    """One ALLOW rule: ``operation`` on a ``resource`` (topic, group, transactional_id)."""

    resource: str
    name: str
    operation: str
    prefixed: bool = False

    def describe(self) -> str:
        pattern = f"{self.name}*" if self.prefixed else self.name
        return f"{self.operation} {self.resource} {pattern}"


def _topics(operation: str, *names: str) -> tuple[Grant, ...]:
    return tuple(Grant("topic", name, operation) for name in names)


GRANTS: dict[Role, tuple[Grant, ...]] = {
    Role.OPERATOR: (*_topics("WRITE", REQUESTS),
                    *_topics("READ", REQUESTS, REPORTS, RUNS, KEYS, QUARANTINE, STATUS)),
    Role.AGENT: (
        *_topics("WRITE", REPORTS), *_topics("READ", COMMANDS, RUNS, KEYS),
        Grant("group", AGENT_GROUP_PREFIX, "READ", prefixed=True),
    ),
    Role.WORKER: (*_topics("WRITE", REPORTS), *_topics("READ", RUNS)),
    Role.CONTROLLER: (
        # runledger.status: the runs' summaries, appended in the facts' transaction
        # and read back when the controller starts deciding for a partition.
        *_topics("READ", REQUESTS, REPORTS, RUNS, KEYS, STATUS),
        *_topics("WRITE", RUNS, COMMANDS, QUARANTINE, STATUS),
        Grant("group", CONTROLLER_PREFIX, "READ", prefixed=True),
        Grant("transactional_id", CONTROLLER_PREFIX, "WRITE", prefixed=True),
    ),
    Role.PROJECTOR: _topics("READ", RUNS, REPORTS, KEYS, STATUS),
}


def role_of(text: str) -> Role:
    """A role named on the command line; the error lists the valid ones."""
    try:
        return Role(text)
    except ValueError:
        raise UsageError(
            f"--role {text!r} is not a role; use one of {', '.join(r.value for r in Role)}"
        ) from None


def grants_for(role: Role) -> tuple[Grant, ...]:
    return tuple(sorted(GRANTS[role]))


def may(role: Role, operation: str, resource: str, name: str) -> bool:
    """Whether ``role``'s grants allow ``operation`` on a resource (READ/WRITE imply DESCRIBE)."""
    for grant in GRANTS[role]:
        matches = name.startswith(grant.name) if grant.prefixed else name == grant.name
        if grant.resource == resource and matches and (
                grant.operation == operation or operation == "DESCRIBE"):
            return True
    return False
