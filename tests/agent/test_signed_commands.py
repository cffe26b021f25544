"""An agent that checks commands (no --trust-unsigned), against the secure session broker.

The session's stack registered its keys on ``runledger.keys`` (``<data dir>/keys``):
``controller.key`` (role controller) and ``operator.key`` (role operator). Commands
are written by hand, as a forger with broker access would, and the run's facts by
hand too (no controller runs on the shared broker). Only a start signed by the
controller's key, for the generation the fact log shows current, is executed;
every other start is refused, logged with its reason, and reported as exit 125.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from events.codec import default_codec
from events.kafka.clients import EventProducer, event_headers
from events.model import Event, GroupStartCommanded
from events.signed.signing import SigningKey, sign_command
from events.topics import COMMANDS, RUNS
from tests.agent.commands import start_cmd
from tests.agent.test_service import Running, start_agent, stop_agent
from tests.events.builders import Ev
from tests.stacks import session_credentials

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(session_credentials() is None,
                       reason="needs the secure broker (with signing keys) `make test` starts"),
]
CODEC = default_codec()
REJECTED = 125


def stack_key(name: str) -> SigningKey:
    creds = session_credentials()
    assert creds is not None
    return SigningKey.load(creds.parent.parent / "keys" / f"{name}.key")


@pytest.fixture
def checking_agent(bootstrap: str, tmp_path: Path) -> Iterator[Running]:
    running = start_agent(bootstrap, tmp_path, 2, trust_unsigned=False)
    try:
        yield running
    finally:
        stop_agent(running)


def send(bootstrap: str, command: GroupStartCommanded, key: SigningKey | None) -> None:
    value = CODEC.encode(command)
    version = CODEC.registry.latest(command.event_type).version
    signature = sign_command(key, value) if key is not None else []
    producer = EventProducer(bootstrap, client_id="test-forger")
    producer.send_bytes(COMMANDS, command.run_id, value,
                        [*event_headers(command, version), *signature])
    producer.flush()


def facts(bootstrap: str, *events: Event) -> None:
    producer = EventProducer(bootstrap, client_id="test-facts")
    for event in events:
        producer.send(RUNS, event)
    producer.flush()


def start(agent: Running, run: str, gen: int) -> GroupStartCommanded:
    return start_cmd(agent.node, run, gen, ("w0",), "--steps", "1", "--step-time", "0.05",
                     at=int(time.time() * 1000))


def test_only_a_controller_signed_start_of_the_live_generation_runs(
        bootstrap: str, checking_agent: Running, unique: str) -> None:
    agent = checking_agent
    cases = {  # run id -> (signing key, expected reason in the agent's log)
        f"unsigned-{unique}": (None, "unsigned"),
        f"operator-{unique}": (stack_key("operator"), "wrong_role"),
        f"stranger-{unique}": (SigningKey.generate(), "unknown_key"),
        f"nofacts-{unique}": (stack_key("controller"), "no_such_run"),
    }
    for run, (key, _) in cases.items():
        send(bootstrap, start(agent, run, 1), key)
    for run, (_, reason) in cases.items():
        exits = agent.wait_exits(run, 1)
        assert exits["w0"].exit_code == REJECTED, run
        agent.wait_log(f"({run} g1): {reason}; nothing done")
    assert not any((agent.work_dir / run).exists() for run in cases)  # nothing launched

    live = f"live-{unique}"
    ev = Ev(live)
    facts(bootstrap, ev.submitted(), ev.admitted(), ev.generation_started(1),
          ev.generation_started(2))
    send(bootstrap, start(agent, live, 2), stack_key("controller"))
    assert agent.wait_exits(live, 1)["w0"].exit_code == 0  # it ran, and ended well
    # The same controller's signature on a start of generation 1, replayed: refused.
    replayed = f"replayed-{unique}"
    ev = Ev(replayed)
    facts(bootstrap, ev.submitted(), ev.admitted(), ev.generation_started(1),
          ev.generation_started(2))
    send(bootstrap, start(agent, replayed, 1), stack_key("controller"))
    assert agent.wait_exits(replayed, 1)["w0"].exit_code == REJECTED
    agent.wait_log(f"({replayed} g1): generation_not_current; nothing done")
