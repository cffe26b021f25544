"""Who may say what: the table, the door's verdicts and the size limits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from events.authority import (
    MAX_BYTES,
    OVERSIZE,
    SENDERS,
    STRAY,
    Role,
    admit_input,
    oversize,
    stray,
)
from events.model import EVENT_TYPES, PRINCIPAL_ROLES
from events.record import Record
from events.topics import ALL, COMMANDS, KEYS, QUARANTINE, REPORTS, REQUESTS, RUNS
from tests.events.sample_events import one_of_each

SAMPLES = {e.event_type: e for e in one_of_each("r1")}


def test_every_type_has_one_sender_and_only_the_controller_writes_facts_and_commands() -> None:
    assert set(SENDERS) == set(EVENT_TYPES.values())
    for cls, sender in SENDERS.items():
        assert sender.topic == cls.TOPIC
        if sender.topic in (RUNS, COMMANDS):
            assert sender.role == Role.CONTROLLER
    by_role = {role: sorted(c.__name__ for c, s in SENDERS.items() if s.role == role)
               for role in Role}
    assert by_role[Role.OPERATOR] == ["CancelRequested", "DrillCompleted",
                                      "NodeOperationRequested", "PilotCompleted",
                                      "PreflightCompleted", "ResumeRequested", "RunSubmitted"]
    assert by_role[Role.AGENT] == ["AgentHeartbeatRecorded", "AgentRegistered",
                                   "MembersHeartbeatRecorded", "WorkerExited"]
    assert by_role[Role.ADMIN] == ["PrincipalKeyRegistered", "PrincipalKeyRevoked"]
    assert {s.topic for s in SENDERS.values() if s.role == Role.ADMIN} == {KEYS}
    # A key may be registered for every role that sends (and for projectors, which read).
    assert {role.value for role in Role} <= set(PRINCIPAL_ROLES)


@pytest.mark.parametrize("name", sorted(EVENT_TYPES))
@pytest.mark.parametrize("topic", ALL)
def test_a_type_is_an_input_only_on_its_own_input_topic(name: str, topic: str) -> None:
    event = SAMPLES[name]
    why = stray(topic, event)
    if topic in (REQUESTS, REPORTS) and topic == event.TOPIC:
        assert why is None
    else:
        assert why is not None and (name in why or topic in why)


def test_the_door_quarantines_strays_and_oversize_records_by_name() -> None:
    finished = SAMPLES["RunFinished"]
    refused = admit_input(Record(REPORTS, 0, 7, 0, finished, 1), 100)
    assert refused is not None and refused.reason == STRAY
    assert "RunFinished is sent by the controller on runledger.runs" in refused.detail
    beat = SAMPLES["HeartbeatRecorded"]
    assert admit_input(Record(REPORTS, 0, 7, 0, beat, 1), 100) is None
    big = admit_input(Record(REPORTS, 0, 7, 0, beat, 1), MAX_BYTES[REPORTS] + 1)
    assert big is not None and big.reason == OVERSIZE
    assert oversize(QUARANTINE, 10**9) is None  # no limit where nothing is judged


def test_the_door_refuses_run_ids_and_node_names_outside_the_charset() -> None:
    beat = SAMPLES["HeartbeatRecorded"]
    forged = replace(beat, header=replace(beat.header, run_id="../../etc"))
    refused = admit_input(Record(REPORTS, 0, 1, 0, forged, 1), 100)
    assert refused is not None and refused.reason == "bad_name"
    agent = SAMPLES["AgentRegistered"]
    bad_node = replace(agent, node="n1;rm -rf /", header=replace(agent.header, run_id="node/n1"))
    refused = admit_input(Record(REPORTS, 0, 1, 0, bad_node, 1), 100)
    assert refused is not None and refused.reason == "bad_name"
    assert admit_input(Record(REPORTS, 0, 1, 0, agent, 1), 100) is None
