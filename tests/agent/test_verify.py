"""agent.verify: a command is acted on only when a controller key signed it and the fact
log shows its generation live. The pure judges here; the agent process in
tests/agent/test_signed_commands.py."""

from __future__ import annotations

from agent.verify import (
    GENERATION_NOT_CURRENT,
    NO_SUCH_RUN,
    RUN_ENDED,
    judge_facts,
    judge_signature,
)
from events.codec import default_codec
from events.fold import fold
from events.model import Event
from events.record import Record
from events.signed.audit import fold_keys
from events.signed.keyring import BAD_SIGNATURE, UNKNOWN_KEY, UNSIGNED, WRONG_ROLE
from events.signed.signing import SigningKey, sign_command, sign_request
from events.state import RunState
from events.topics import COMMANDS
from tests.events.builders import Ev
from tests.events.signed_log import CAST, cast_keys

CODEC = default_codec()
RING, _ = fold_keys(cast_keys().records)


def record(event: Event, headers: tuple[tuple[str, bytes], ...] = ()) -> Record:
    return Record(COMMANDS, 0, 7, 0, event, 1, value=CODEC.encode(event), headers=headers)


def signed(event: Event, key: SigningKey) -> Record:
    value = CODEC.encode(event)
    headers = tuple((k, v if isinstance(v, bytes) else str(v).encode())
                    for k, v in sign_command(key, value))
    return Record(COMMANDS, 0, 7, 0, event, 1, value=value, headers=headers)


START = Ev("r1").group_start(2, "node-a")


def test_a_command_signed_by_the_controller_key_passes() -> None:
    assert judge_signature(RING, signed(START, CAST.controller)) is None


def test_unsigned_unknown_wrong_role_and_altered_commands_are_refused() -> None:
    assert judge_signature(RING, record(START)) == UNSIGNED
    assert judge_signature(RING, signed(START, CAST.stranger)) == UNKNOWN_KEY
    assert judge_signature(RING, signed(START, CAST.alice)) == WRONG_ROLE  # an operator's key
    good = signed(START, CAST.controller)
    other = Ev("r1").group_start(3, "node-a")  # the signature of another command's bytes
    moved = Record(COMMANDS, 0, 7, 0, other, 1, value=CODEC.encode(other), headers=good.headers)
    assert judge_signature(RING, moved) == BAD_SIGNATURE


def test_a_request_signature_is_no_command_signature() -> None:
    value = CODEC.encode(START)
    headers = tuple((k, v if isinstance(v, bytes) else str(v).encode())
                    for k, v in sign_request(CAST.controller, value))
    assert judge_signature(RING, Record(COMMANDS, 0, 7, 0, START, 1, value=value,
                                        headers=headers)) == BAD_SIGNATURE


def facts(*events: Event) -> RunState | None:
    return fold(list(events)).get("r1")


def test_a_start_needs_its_generation_live_in_the_fact_log() -> None:
    ev = Ev("r1")
    live = [ev.submitted(), ev.admitted(), ev.generation_started(1), ev.generation_started(2)]
    assert judge_facts(None, START) == NO_SUCH_RUN
    assert judge_facts(facts(*live), START) is None
    assert judge_facts(facts(*live[:3]), START) == GENERATION_NOT_CURRENT
    replayed = Ev("r1").group_start(1, "node-a")  # an old generation's start, replayed
    assert judge_facts(facts(*live), replayed) == GENERATION_NOT_CURRENT
    ended = [*live, ev.cancelled(2)]
    assert judge_facts(facts(*ended), START) == RUN_ENDED


def test_a_stop_needs_no_facts() -> None:
    assert judge_facts(None, Ev("r1").group_stop(2, "node-a")) is None
