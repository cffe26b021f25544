"""runledger.stack.acls: the roles' grants enforce events.authority's table, and no more."""

from __future__ import annotations

import pytest

from events.authority import SENDERS
from events.authority import Role as Sender
from events.topics import ALL, COMMANDS, KEYS, RUNS
from runledger.errors import UsageError
from runledger.stack.acls import GRANTS, Role, grants_for, may, role_of

# Which ACL role carries each sending role of events.authority (workers write with
# the worker's credentials, never their agent's; the admin is Kafka's super user
# and needs no ACL).
CARRIER = {Sender.OPERATOR: Role.OPERATOR, Sender.AGENT: Role.AGENT,
           Sender.WORKER: Role.WORKER, Sender.CONTROLLER: Role.CONTROLLER}


def test_every_sender_may_write_the_topic_of_what_it_sends() -> None:
    for cls, sender in SENDERS.items():
        if sender.role.value == "admin":
            continue
        role = CARRIER[sender.role]
        assert may(role, "WRITE", "topic", sender.topic), (cls.__name__, role)


def test_each_topic_has_exactly_the_writers_the_authority_table_names() -> None:
    for topic in ALL:
        writers = {role for role in Role if may(role, "WRITE", "topic", topic)}
        senders = {CARRIER[s.role] for s in SENDERS.values()
                   if s.topic == topic and s.role.value != "admin"}
        if topic == "runledger.quarantine":
            senders = {Role.CONTROLLER}  # the controller keeps what it cannot take
        if topic == "runledger.status":
            senders = {Role.CONTROLLER}  # run summaries: a view of its facts, no event type
        assert writers == senders, topic


def test_only_the_controller_writes_runs_and_commands_and_nobody_writes_keys() -> None:
    assert {r for r in Role if may(r, "WRITE", "topic", RUNS)} == {Role.CONTROLLER}
    assert {r for r in Role if may(r, "WRITE", "topic", COMMANDS)} == {Role.CONTROLLER}
    assert not any(may(r, "WRITE", "topic", KEYS) for r in Role)


def test_the_projector_writes_nothing() -> None:
    assert not any(g.operation == "WRITE" for g in GRANTS[Role.PROJECTOR])


def test_the_controllers_transactional_ids_and_group_are_its_alone() -> None:
    for role in Role:
        owns = may(role, "WRITE", "transactional_id", "runledger-controller-a")
        joins = may(role, "READ", "group", "runledger-controller")
        assert owns == joins == (role is Role.CONTROLLER)
    assert not may(Role.CONTROLLER, "WRITE", "transactional_id", "other")


def test_a_worker_writes_reports_reads_runs_and_nothing_else() -> None:
    # Not the agent's powers: no commands of any run, no keys, no consumer group.
    assert {(g.operation, g.name) for g in GRANTS[Role.WORKER]} == {
        ("WRITE", "runledger.reports"), ("READ", RUNS)}
    assert not may(Role.WORKER, "READ", "topic", COMMANDS)
    assert not may(Role.WORKER, "READ", "group", "agent-n1")


def test_read_and_write_imply_describe() -> None:
    assert may(Role.OPERATOR, "DESCRIBE", "topic", RUNS)
    assert not may(Role.PROJECTOR, "DESCRIBE", "topic", COMMANDS)


def test_grants_are_sorted_and_printable() -> None:
    grants = grants_for(Role.AGENT)
    assert list(grants) == sorted(grants)
    assert "READ group agent-*" in {g.describe() for g in grants}


def test_an_unknown_role_lists_the_valid_ones() -> None:
    with pytest.raises(UsageError,
                       match="use one of operator, agent, worker, controller, projector"):
        role_of("root")
